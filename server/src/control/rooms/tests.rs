//! The room directory with explicit times: nothing here sleeps.

use super::*;

const LIMITS: RoomLimits = RoomLimits {
    max_rooms: 4,
    max_participants_per_room: 3,
    default_empty_timeout: Duration::from_secs(300),
};

fn secs(s: u64) -> Time {
    Time::from_millis(s * 1000)
}

fn spec(name: &str) -> RoomSpec {
    RoomSpec {
        name: name.into(),
        ..RoomSpec::default()
    }
}

fn member(identity: &str, peer: u64) -> ParticipantSpec {
    ParticipantSpec {
        identity: identity.into(),
        name: String::new(),
        metadata: String::new(),
        shard: 0,
        peer: PeerId(peer),
    }
}

fn names<T>(page: &Page<'_, T>, name: impl Fn(&T) -> &str) -> Vec<String> {
    page.items.iter().map(|t| name(t).to_owned()).collect()
}

#[test]
fn create_get_list_delete() {
    let mut d = RoomDirectory::new(LIMITS);
    let room = d
        .create(
            RoomSpec {
                name: "lobby".into(),
                max_participants: 2,
                empty_timeout: Duration::from_secs(30),
                metadata: "{\"topic\":\"rust\"}".into(),
            },
            secs(5),
        )
        .unwrap();
    assert_eq!(room.max_participants, 2);
    assert_eq!(room.empty_timeout, Duration::from_secs(30));
    assert_eq!(room.created_at, secs(5));
    assert_eq!(room.closes_at(), Some(secs(35)));

    // Zero asks for the node's defaults.
    let other = d.create(spec("annex"), secs(6)).unwrap();
    assert_eq!(other.max_participants, 3);
    assert_eq!(other.empty_timeout, Duration::from_secs(300));

    assert_eq!(d.get("lobby").unwrap().metadata, "{\"topic\":\"rust\"}");
    assert_eq!(
        d.get("nowhere"),
        Err(RoomError::RoomNotFound("nowhere".into()))
    );
    let page = d.list("", 0).unwrap();
    assert_eq!(names(&page, |r| &r.name), ["annex", "lobby"]);
    assert_eq!(page.next_page_token, None);
    assert_eq!(d.room_count(), 2);

    let closed = d.delete("lobby").unwrap();
    assert_eq!(closed.participant_count(), 0);
    assert_eq!(
        d.delete("lobby"),
        Err(RoomError::RoomNotFound("lobby".into()))
    );
    assert_eq!(d.room_count(), 1);
    assert_eq!(d.next_expiry(), Some(secs(306)), "lobby's deadline is gone");
}

#[test]
fn names_are_checked() {
    let mut d = RoomDirectory::new(LIMITS);
    let bad = |reason| {
        Err(RoomError::InvalidName {
            kind: NameKind::Room,
            reason,
        })
    };
    assert_eq!(
        d.create(spec(""), Time::ZERO).map(|_| ()),
        bad(NameError::Empty)
    );
    let long = "x".repeat(MAX_NAME_BYTES + 1);
    assert_eq!(
        d.create(spec(&long), Time::ZERO).map(|_| ()),
        bad(NameError::TooLong(129))
    );
    for name in [
        "a\nb",
        "a\u{0}b",
        "tab\there",
        "a\u{2028}b",
        "\u{7f}",
        "x\u{85}",
    ] {
        assert_eq!(
            d.create(spec(name), Time::ZERO).map(|_| ()),
            bad(NameError::Unprintable),
            "{name:?}"
        );
    }
    for name in [" lead", "trail ", " "] {
        assert_eq!(
            d.create(spec(name), Time::ZERO).map(|_| ()),
            bad(NameError::OuterSpace),
            "{name:?}"
        );
    }
    // 128 bytes of multi-byte characters, inner spaces, punctuation: all fine.
    let wide = "é".repeat(MAX_NAME_BYTES / 2);
    for name in [wide.as_str(), "team standup", "room/1:a#b", "日本語"] {
        d.create(spec(name), Time::ZERO).unwrap();
    }
    // Lookups check names too, so a bad name is INVALID_ARGUMENT, not NOT_FOUND.
    assert_eq!(d.get("").map(|_| ()), bad(NameError::Empty));
    assert_eq!(d.delete("a\nb").map(|_| ()), bad(NameError::Unprintable));
    assert!(matches!(
        d.list("bad\ntoken", 10),
        Err(RoomError::InvalidName {
            kind: NameKind::PageToken,
            ..
        })
    ));
}

#[test]
fn names_are_nfc_without_format_characters() {
    let mut d = RoomDirectory::new(LIMITS);
    // "café" precomposed (U+00E9) and decomposed (e + U+0301) are one room, kept in NFC.
    let composed = "caf\u{e9}";
    let decomposed = "cafe\u{301}";
    let room = d.create(spec(decomposed), Time::ZERO).unwrap();
    assert_eq!(room.name, composed);
    assert_eq!(
        d.create(spec(composed), Time::ZERO).map(|_| ()),
        Err(RoomError::RoomExists(composed.into()))
    );
    assert_eq!(d.get(decomposed).unwrap().name, composed);
    // ...and the same for identities and display names.
    let mut who = member("jos\u{e9}", 1);
    who.name = "Jose\u{301} M.".into();
    let joined = d.join(decomposed, who, Time::ZERO).unwrap();
    assert_eq!(
        (joined.identity.as_str(), joined.name.as_str()),
        ("jos\u{e9}", "Jos\u{e9} M.")
    );
    assert!(matches!(
        d.join(composed, member("jose\u{301}", 2), Time::ZERO),
        Err(RoomError::ParticipantExists { .. })
    ));
    assert_eq!(
        d.participant(composed, "jose\u{301}").unwrap().peer,
        PeerId(1)
    );
    d.set_state(decomposed, "jose\u{301}", ParticipantState::Active)
        .unwrap();
    let page = d.participants(composed, "", 0).unwrap();
    assert_eq!(names(&page, |p| &p.identity), ["jos\u{e9}"]);
    assert_eq!(page.items[0].state, ParticipantState::Active);
    d.remove_participant(decomposed, "jose\u{301}", Time::ZERO)
        .unwrap();
    assert_eq!(d.delete(decomposed).unwrap().name, composed);

    // Format characters (Cf): zero-width, bidi controls, BOM, soft hyphen, and others.
    for c in [
        '\u{ad}',
        '\u{600}',
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{200e}',
        '\u{200f}',
        '\u{202a}',
        '\u{202e}',
        '\u{2060}',
        '\u{2064}',
        '\u{2066}',
        '\u{2069}',
        '\u{feff}',
        '\u{e0001}',
    ] {
        let name = format!("ad{c}min");
        for kind in [NameKind::Room, NameKind::Identity, NameKind::DisplayName] {
            assert_eq!(
                validate_name(&name, kind),
                Err(RoomError::InvalidName {
                    kind,
                    reason: NameError::FormatCharacter(c)
                }),
                "{name:?} as a {kind}"
            );
        }
    }
    let error = validate_name("a\u{202e}b", NameKind::Identity).unwrap_err();
    assert!(error.to_string().contains("U+202E"), "{error}");
    assert!(matches!(
        d.join("r", member("\u{feff}bob", 3), Time::ZERO),
        Err(RoomError::InvalidName {
            kind: NameKind::Identity,
            ..
        })
    ));
    // Channel labels are matched byte for byte with what the peer opened: kept as
    // they are, format characters too (an emoji ZWJ sequence, say).
    let label = "chat\u{200d}e\u{301}";
    assert_eq!(
        validate_name(label, NameKind::Channel).as_deref(),
        Ok(label)
    );
    assert!(validate_name("a\nb", NameKind::Channel).is_err());
    // NFC that would grow past the limit is refused: U+0958 stays decomposed in NFC
    // (a composition exclusion), 3 bytes becoming 6.
    let grows = "\u{958}".repeat(MAX_NAME_BYTES / 3);
    assert_eq!(
        validate_name(&grows, NameKind::Room),
        Err(RoomError::InvalidName {
            kind: NameKind::Room,
            reason: NameError::TooLong(2 * 3 * (MAX_NAME_BYTES / 3))
        })
    );
}

#[test]
fn settings_are_bounded() {
    let mut d = RoomDirectory::new(LIMITS);
    let mut s = spec("r");
    s.metadata = "m".repeat(MAX_METADATA_BYTES + 1);
    assert_eq!(
        d.create(s.clone(), Time::ZERO).map(|_| ()),
        Err(RoomError::MetadataTooLong(MAX_METADATA_BYTES + 1))
    );
    s.metadata = "m".repeat(MAX_METADATA_BYTES);
    s.max_participants = 4;
    assert_eq!(
        d.create(s.clone(), Time::ZERO).map(|_| ()),
        Err(RoomError::TooManyParticipantsAsked {
            requested: 4,
            max: 3
        })
    );
    s.max_participants = 3;
    s.empty_timeout = MAX_EMPTY_TIMEOUT + Duration::from_secs(1);
    assert_eq!(
        d.create(s.clone(), Time::ZERO).map(|_| ()),
        Err(RoomError::EmptyTimeoutTooLong(Duration::from_secs(86_401)))
    );
    s.empty_timeout = MAX_EMPTY_TIMEOUT;
    d.create(s, Time::ZERO).unwrap();
    assert_eq!(d.room_count(), 1, "refused rooms left nothing behind");
}

#[test]
fn rooms_per_node_are_bounded_and_unique() {
    let mut d = RoomDirectory::new(LIMITS);
    for name in ["a", "b", "c", "d"] {
        d.create(spec(name), Time::ZERO).unwrap();
    }
    assert_eq!(
        d.create(spec("a"), Time::ZERO).map(|_| ()),
        Err(RoomError::RoomExists("a".into())),
        "a duplicate is a duplicate even when the node is full"
    );
    assert_eq!(
        d.create(spec("e"), Time::ZERO).map(|_| ()),
        Err(RoomError::TooManyRooms(4))
    );
    d.delete("b").unwrap();
    d.create(spec("e"), Time::ZERO).unwrap();
}

#[test]
fn listings_page_by_name() {
    let limits = RoomLimits {
        max_rooms: 1000,
        ..LIMITS
    };
    let mut d = RoomDirectory::new(limits);
    for i in (0..7).rev() {
        d.create(spec(&format!("room-{i}")), Time::ZERO).unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = d.list(&token, 3).unwrap();
        seen.extend(names(&page, |r| &r.name));
        pages += 1;
        match page.next_page_token {
            Some(t) => token = t,
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..7).map(|i| format!("room-{i}")).collect();
    assert_eq!(seen, expected);

    // A page that ends exactly at the last room says it is the last.
    let page = d.list("room-3", 3).unwrap();
    assert_eq!(names(&page, |r| &r.name), ["room-4", "room-5", "room-6"]);
    assert_eq!(page.next_page_token, None);
    // A token past the end is an empty last page.
    assert!(d.list("zzz", 3).unwrap().items.is_empty());

    // 0 is the default, and large sizes are clamped.
    for i in 7..600 {
        d.create(spec(&format!("room-{i:03}")), Time::ZERO).unwrap();
    }
    assert_eq!(d.list("", 0).unwrap().items.len(), DEFAULT_PAGE_SIZE);
    assert_eq!(d.list("", 100_000).unwrap().items.len(), MAX_PAGE_SIZE);
}

#[test]
fn participants_join_list_and_leave() {
    let mut d = RoomDirectory::new(LIMITS);
    d.create(spec("r"), secs(0)).unwrap();
    let bob = d.join("r", member("bob", 2), secs(1)).unwrap();
    assert_eq!(
        (bob.state, bob.peer, bob.joined_at),
        (ParticipantState::Joining, PeerId(2), secs(1))
    );
    d.join("r", member("alice", 1), secs(2)).unwrap();
    assert_eq!(
        d.join("r", member("alice", 9), secs(3)).map(|_| ()),
        Err(RoomError::ParticipantExists {
            room: "r".into(),
            identity: "alice".into()
        })
    );
    d.join("r", member("carol", 3), secs(3)).unwrap();
    assert_eq!(
        d.join("r", member("dave", 4), secs(3)).map(|_| ()),
        Err(RoomError::RoomFull {
            room: "r".into(),
            max: 3
        })
    );
    // Links to other nodes are not counted: a full room still takes them, and
    // one gone frees no place for a participant.
    d.join("r", member("cascade:node-1", 5), secs(3)).unwrap();
    d.join("r", member("cascade:node-2", 6), secs(3)).unwrap();
    assert!(matches!(
        d.join("r", member("dave", 4), secs(3)),
        Err(RoomError::RoomFull { .. })
    ));
    d.remove_participant("r", "cascade:node-1", secs(3))
        .unwrap();
    assert!(matches!(
        d.join("r", member("dave", 4), secs(3)),
        Err(RoomError::RoomFull { .. })
    ));
    d.remove_participant("r", "cascade:node-2", secs(3))
        .unwrap();
    assert_eq!(
        d.join("nowhere", member("dave", 4), secs(3)).map(|_| ()),
        Err(RoomError::RoomNotFound("nowhere".into()))
    );
    assert!(matches!(
        d.join("r", member("", 4), secs(3)),
        Err(RoomError::InvalidName {
            kind: NameKind::Identity,
            reason: NameError::Empty
        })
    ));
    assert_eq!(
        (
            d.participant_count(),
            d.get("r").unwrap().participant_count()
        ),
        (3, 3)
    );

    let page = d.participants("r", "", 2).unwrap();
    assert_eq!(names(&page, |p| &p.identity), ["alice", "bob"]);
    let next = d.participants("r", "bob", 2).unwrap();
    assert_eq!(names(&next, |p| &p.identity), ["carol"]);
    assert_eq!(next.next_page_token, None);

    d.set_state("r", "bob", ParticipantState::Active).unwrap();
    assert_eq!(
        d.participant("r", "bob").unwrap().state,
        ParticipantState::Active
    );

    let gone = d.remove_participant("r", "bob", secs(4)).unwrap();
    assert_eq!(gone.peer, PeerId(2));
    assert_eq!(
        d.remove_participant("r", "bob", secs(4)),
        Err(RoomError::ParticipantNotFound {
            room: "r".into(),
            identity: "bob".into()
        })
    );
    assert_eq!(
        d.remove_participant("elsewhere", "bob", secs(4)),
        Err(RoomError::RoomNotFound("elsewhere".into()))
    );
    assert_eq!(d.participant_count(), 2);

    // Deleting the room hands back everyone left, to disconnect.
    let closed = d.delete("r").unwrap();
    let left: Vec<_> = closed.participants().map(|p| p.peer).collect();
    assert_eq!(left, [PeerId(1), PeerId(3)]);
    assert_eq!(d.participant_count(), 0);
}

#[test]
fn empty_rooms_close_after_their_timeout() {
    let mut d = RoomDirectory::new(LIMITS);
    let mut s = spec("short");
    s.empty_timeout = Duration::from_secs(10);
    d.create(s, secs(0)).unwrap();
    d.create(spec("long"), secs(0)).unwrap(); // 300 s default
    assert_eq!(d.next_expiry(), Some(secs(10)));

    // Nobody joined: it closes 10 s after creation, not a moment before.
    assert!(d.expire(Time::from_millis(9_999)).is_empty());
    assert_eq!(d.expire(secs(10)), ["short"]);
    assert_eq!(d.get("short"), Err(RoomError::RoomNotFound("short".into())));
    assert_eq!(d.next_expiry(), Some(secs(300)));

    // Someone in the room holds it open however long it lasts.
    d.join("long", member("a", 1), secs(100)).unwrap();
    assert_eq!(d.next_expiry(), None);
    assert!(d.expire(secs(10_000)).is_empty());

    // The last one out starts the count again from that moment.
    d.join("long", member("b", 2), secs(10_001)).unwrap();
    d.remove_participant("long", "a", secs(10_002)).unwrap();
    assert_eq!(d.next_expiry(), None, "b is still in");
    d.remove_participant("long", "b", secs(10_010)).unwrap();
    assert_eq!(d.get("long").unwrap().closes_at(), Some(secs(10_310)));

    // Rejoining before the deadline cancels it.
    d.join("long", member("b", 2), secs(10_300)).unwrap();
    assert!(d.expire(secs(10_310)).is_empty());
    d.remove_participant("long", "b", secs(10_400)).unwrap();
    assert!(d.expire(secs(10_699)).is_empty());
    assert_eq!(d.expire(secs(10_700)), ["long"]);
    assert_eq!(d.room_count(), 0);
    assert_eq!(d.next_expiry(), None);
}

#[test]
fn a_deleted_rooms_deadline_does_not_close_its_successor() {
    let mut d = RoomDirectory::new(LIMITS);
    let mut s = spec("r");
    s.empty_timeout = Duration::from_secs(10);
    d.create(s.clone(), secs(0)).unwrap();
    d.delete("r").unwrap();
    d.create(s, secs(5)).unwrap();
    assert!(
        d.expire(secs(10)).is_empty(),
        "the first room's deadline left with it"
    );
    assert_eq!(d.expire(secs(15)), ["r"]);
}

#[test]
fn expiry_closes_rooms_in_deadline_order() {
    let mut d = RoomDirectory::new(LIMITS);
    for (name, timeout) in [("c", 3), ("a", 1), ("b", 2)] {
        let mut s = spec(name);
        s.empty_timeout = Duration::from_secs(timeout);
        d.create(s, secs(0)).unwrap();
    }
    assert_eq!(d.expire(secs(2)), ["a", "b"]);
    assert_eq!(d.expire(secs(3)), ["c"]);
}

#[test]
fn an_adopted_room_takes_the_settings_and_its_new_deadline() {
    let mut d = RoomDirectory::new(LIMITS);
    d.create(spec("r"), secs(0)).unwrap(); // 300 s default
    let mut held = spec("r");
    held.max_participants = 2;
    held.empty_timeout = Duration::from_secs(20);
    held.metadata = "kept".into();
    let room = d.adopt(held.clone()).unwrap();
    assert_eq!(
        (
            room.max_participants,
            room.empty_timeout,
            room.metadata.as_str()
        ),
        (2, Duration::from_secs(20), "kept")
    );
    assert_eq!(d.next_expiry(), Some(secs(20)), "the old deadline went");
    assert!(d.expire(secs(19)).is_empty());
    // Occupied, it keeps no deadline; adopting again sets none.
    d.join("r", member("a", 1), secs(19)).unwrap();
    d.adopt(held.clone()).unwrap();
    assert_eq!(d.next_expiry(), None);
    // Settings out of bounds, or a room not open, are refused as on creation.
    held.max_participants = 4;
    assert_eq!(
        d.adopt(held).unwrap_err(),
        RoomError::TooManyParticipantsAsked {
            requested: 4,
            max: 3
        }
    );
    assert_eq!(
        d.adopt(spec("other")).unwrap_err(),
        RoomError::RoomNotFound("other".into())
    );
    assert_eq!(d.get("r").unwrap().max_participants, 2, "unchanged");
}

#[test]
fn a_handed_room_is_checked_before_it_is_taken() {
    let mut d = RoomDirectory::new(LIMITS);
    for name in ["a", "b", "c", "d"] {
        d.create(spec(name), secs(0)).unwrap();
    }
    // Full: a new room does not fit, one open here does (its settings change).
    assert_eq!(
        d.check_fits(&spec("e")).unwrap_err(),
        RoomError::TooManyRooms(4)
    );
    assert_eq!(d.check_fits(&spec("a")), Ok(()));
    let mut big = spec("a");
    big.max_participants = 4;
    assert!(matches!(
        d.check_fits(&big),
        Err(RoomError::TooManyParticipantsAsked { .. })
    ));
    assert_eq!(d.room_count(), 4, "checking opens nothing");
}

//! The room directory: which rooms are open on this node, their settings and their
//! participants. Plain data, sans-I/O: it never reads a clock, every method whose
//! outcome depends on time takes `now`, so tests drive empty-timeouts without sleeping.
//!
//! Everything is bounded: rooms per node, participants per room, name and metadata
//! sizes, the empty-timeout, and page sizes of listings. Rooms and participants are
//! kept in byte order of their names, so a page token is simply the last name of the
//! previous page and a listing is a range scan, never a sort.
//!
//! Names are kept in Unicode NFC (see [`validate_name`]): every method takes a name in
//! any normal form and finds the room or participant of its NFC form.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::Duration;

use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::time::Time;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::cluster::cascade::LINK_IDENTITY;

/// Bytes a room name, participant identity or channel label holds at most.
pub const MAX_NAME_BYTES: usize = 128;
/// Bytes of opaque metadata a room or participant carries at most.
pub const MAX_METADATA_BYTES: usize = 8192;
/// The longest empty-timeout a room may ask for.
pub const MAX_EMPTY_TIMEOUT: Duration = Duration::from_secs(86_400);
/// Entries in a listing page when the caller asks for 0.
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// Entries in a listing page at most; larger requests are clamped (AIP-158). With
/// 8 KiB of metadata each, a page stays under gRPC's usual 4 MiB message limit.
pub const MAX_PAGE_SIZE: usize = 250;

/// The node's limits on rooms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoomLimits {
    /// Rooms open at once.
    pub max_rooms: usize,
    /// Participants one room may admit; also what a room asking for 0 gets.
    pub max_participants_per_room: u32,
    /// The empty-timeout of a room that asks for none.
    pub default_empty_timeout: Duration,
}

/// What a caller asks for when opening a room.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoomSpec {
    /// The room's name, unique on the node.
    pub name: String,
    /// Participants admitted at once; 0 takes the node's limit.
    pub max_participants: u32,
    /// How long the room stays open while empty; zero takes the node's default.
    pub empty_timeout: Duration,
    /// Opaque application data.
    pub metadata: String,
}

/// An open room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// The room's name.
    pub name: String,
    /// The room's id in the shards' room indexes: unique on the node and never used
    /// again, so a room deleted and created anew under the same name shares nothing
    /// with the old one (a member of the old room still leaving hears no one new).
    pub id: RoomId,
    /// Participants admitted at once.
    pub max_participants: u32,
    /// How long the room stays open while empty.
    pub empty_timeout: Duration,
    /// Opaque application data.
    pub metadata: String,
    /// When the room was opened.
    pub created_at: Time,
    /// Since when the room has been empty; `None` while someone is in it.
    empty_since: Option<Time>,
    /// The participants, by identity.
    participants: BTreeMap<String, Participant>,
}

impl Room {
    /// Participants in the room now.
    pub fn participant_count(&self) -> usize {
        self.participants.len()
    }

    /// The participants that are links to other nodes of a cluster, each with the
    /// other node's id.
    pub fn links(&self) -> impl Iterator<Item = (&str, &Participant)> {
        self.participants
            .range::<str, _>((Bound::Included(LINK_IDENTITY), Bound::Unbounded))
            .map_while(|(identity, p)| identity.strip_prefix(LINK_IDENTITY).map(|node| (node, p)))
    }

    /// The participants this node serves itself: links to other nodes left out.
    pub fn own_count(&self) -> usize {
        self.participant_count() - self.links().count()
    }

    /// The participants in byte order of their identities.
    pub fn participants(&self) -> impl Iterator<Item = &Participant> {
        self.participants.values()
    }

    /// The participant of `identity`, if it is in the room.
    pub fn participant(&self, identity: &str) -> Option<&Participant> {
        self.participants.get(identity)
    }

    /// The participants whose identities come after `identity` in byte order.
    pub fn participants_after(&self, identity: &str) -> impl Iterator<Item = &Participant> {
        use std::ops::Bound;
        self.participants
            .range::<str, _>((Bound::Excluded(identity), Bound::Unbounded))
            .map(|(_, p)| p)
    }

    /// When the room closes if nobody joins; `None` while someone is in it.
    pub fn closes_at(&self) -> Option<Time> {
        self.empty_since.map(|t| t + self.empty_timeout)
    }
}

/// Where a participant's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParticipantState {
    /// Placed on a shard; ICE and DTLS have not completed yet.
    Joining,
    /// ICE and DTLS are up.
    Active,
}

/// What signalling knows when it admits a participant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParticipantSpec {
    /// Unique within the room.
    pub identity: String,
    /// A display name; may be empty.
    pub name: String,
    /// Opaque application data.
    pub metadata: String,
    /// The shard that holds its connection.
    pub shard: usize,
    /// Its connection's id on that shard.
    pub peer: PeerId,
}

/// One member of a room: one connection, held by one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Participant {
    /// Unique within the room.
    pub identity: String,
    /// A display name; may be empty.
    pub name: String,
    /// Opaque application data.
    pub metadata: String,
    /// Where its connection stands.
    pub state: ParticipantState,
    /// The shard that holds its connection.
    pub shard: usize,
    /// Its connection's id on that shard.
    pub peer: PeerId,
    /// When it joined.
    pub joined_at: Time,
}

/// What a name, identity or label is for, in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A room name.
    Room,
    /// A participant identity.
    Identity,
    /// A participant's display name (may be empty).
    DisplayName,
    /// A data channel label.
    Channel,
    /// A listing's page token.
    PageToken,
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameKind::Room => "room name",
            NameKind::Identity => "participant identity",
            NameKind::DisplayName => "display name",
            NameKind::Channel => "channel label",
            NameKind::PageToken => "page token",
        })
    }
}

/// Why a name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// It is empty.
    #[error("is empty")]
    Empty,
    /// It is longer than [`MAX_NAME_BYTES`].
    #[error("is {0} bytes long, more than {MAX_NAME_BYTES}")]
    TooLong(usize),
    /// It holds a control or line-breaking character.
    #[error("holds a control or line-breaking character")]
    Unprintable,
    /// It holds a format character (general category Cf): invisible, or reordering
    /// what is shown (zero-width spaces and joiners, bidi controls, the BOM).
    #[error(
        "holds the invisible format character U+{:04X} (zero-width and bidi controls are \
         refused)",
        u32::from(*.0)
    )]
    FormatCharacter(char),
    /// It starts or ends with a space.
    #[error("starts or ends with a space")]
    OuterSpace,
}

/// Why the directory refused a request. Each maps to one gRPC status code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoomError {
    /// A name, identity or label breaks the rules.
    #[error("{kind} {reason}")]
    InvalidName {
        /// What the name is for.
        kind: NameKind,
        /// Which rule it breaks.
        reason: NameError,
    },
    /// Metadata is larger than [`MAX_METADATA_BYTES`].
    #[error("metadata is {0} bytes long, more than {MAX_METADATA_BYTES}")]
    MetadataTooLong(usize),
    /// The room asks to admit more participants than the node allows.
    #[error("max_participants {requested} is more than this node's limit of {max}")]
    TooManyParticipantsAsked {
        /// What the room asked for.
        requested: u32,
        /// The node's limit.
        max: u32,
    },
    /// The room asks for an empty-timeout longer than [`MAX_EMPTY_TIMEOUT`].
    #[error("empty timeout {0:?} is longer than {MAX_EMPTY_TIMEOUT:?}")]
    EmptyTimeoutTooLong(Duration),
    /// The node holds as many rooms as it may.
    #[error("this node holds its maximum of {0} rooms")]
    TooManyRooms(usize),
    /// A room of that name is open.
    #[error("room {0:?} already exists")]
    RoomExists(String),
    /// No room of that name is open.
    #[error("room {0:?} not found")]
    RoomNotFound(String),
    /// The room has no participant of that identity.
    #[error("room {room:?} has no participant {identity:?}")]
    ParticipantNotFound {
        /// The room's name.
        room: String,
        /// The identity asked for.
        identity: String,
    },
    /// The room has a participant of that identity already.
    #[error("room {room:?} already has a participant {identity:?}")]
    ParticipantExists {
        /// The room's name.
        room: String,
        /// The identity.
        identity: String,
    },
    /// The room admits no more participants.
    #[error("room {room:?} is full ({max} participants)")]
    RoomFull {
        /// The room's name.
        room: String,
        /// Its limit.
        max: u32,
    },
}

/// One page of a listing.
#[derive(Debug, PartialEq, Eq)]
pub struct Page<'a, T> {
    /// The entries, in byte order of their names.
    pub items: Vec<&'a T>,
    /// The token of the next page; `None` when this page is the last.
    pub next_page_token: Option<String>,
}

/// The rooms of one node.
#[derive(Debug)]
pub struct RoomDirectory {
    limits: RoomLimits,
    rooms: BTreeMap<String, Room>,
    /// `(closes_at, name)` of every empty room, so expiry is O(expired), not a scan.
    closing: BTreeSet<(Time, String)>,
    participants: usize,
    /// The next room's id.
    next_id: u64,
}

impl RoomDirectory {
    /// An empty directory under `limits`.
    pub fn new(limits: RoomLimits) -> RoomDirectory {
        RoomDirectory {
            limits,
            rooms: BTreeMap::new(),
            closing: BTreeSet::new(),
            participants: 0,
            next_id: 1,
        }
    }

    /// The limits the directory enforces.
    pub fn limits(&self) -> RoomLimits {
        self.limits
    }

    /// The names of the rooms open now.
    pub fn names(&self) -> Vec<String> {
        self.rooms.keys().cloned().collect()
    }

    /// Rooms open now.
    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }

    /// Participants in all rooms now.
    pub fn participant_count(&self) -> usize {
        self.participants
    }

    /// Opens a room at `now`. An empty room closes after its empty-timeout unless
    /// someone joins first.
    pub fn create(&mut self, spec: RoomSpec, now: Time) -> Result<&Room, RoomError> {
        let name = validate_name(&spec.name, NameKind::Room)?.into_owned();
        validate_metadata(&spec.metadata)?;
        let (max_participants, empty_timeout) = self.settings(&spec)?;
        // A duplicate is reported as such even when the node is full.
        if self.rooms.contains_key(&name) {
            return Err(RoomError::RoomExists(name));
        }
        if self.rooms.len() >= self.limits.max_rooms {
            return Err(RoomError::TooManyRooms(self.limits.max_rooms));
        }
        let id = RoomId(self.next_id);
        self.next_id += 1;
        let room = Room {
            name: name.clone(),
            id,
            max_participants,
            empty_timeout,
            metadata: spec.metadata,
            created_at: now,
            empty_since: Some(now),
            participants: BTreeMap::new(),
        };
        self.closing.insert((now + empty_timeout, name.clone()));
        Ok(self.rooms.entry(name).or_insert(room))
    }

    /// Gives the open room `spec.name` the settings and metadata of `spec`, as
    /// [`RoomDirectory::create`] would open it; an empty room's closing time follows
    /// the new empty-timeout.
    pub fn adopt(&mut self, spec: RoomSpec) -> Result<&Room, RoomError> {
        let name = validate_name(&spec.name, NameKind::Room)?.into_owned();
        validate_metadata(&spec.metadata)?;
        let (max_participants, empty_timeout) = self.settings(&spec)?;
        let room = self
            .rooms
            .get_mut(&name)
            .ok_or_else(|| RoomError::RoomNotFound(name.clone()))?;
        if let Some(at) = room.closes_at() {
            self.closing.remove(&(at, name.clone()));
        }
        room.max_participants = max_participants;
        room.empty_timeout = empty_timeout;
        room.metadata = spec.metadata;
        if let Some(at) = room.closes_at() {
            self.closing.insert((at, name));
        }
        Ok(room)
    }

    /// Whether a room of `spec` could be opened now, or its settings given to the
    /// room of its name open here ([`RoomDirectory::adopt`]).
    pub fn check_fits(&self, spec: &RoomSpec) -> Result<(), RoomError> {
        let name = validate_name(&spec.name, NameKind::Room)?;
        validate_metadata(&spec.metadata)?;
        self.settings(spec)?;
        if !self.rooms.contains_key(&*name) && self.rooms.len() >= self.limits.max_rooms {
            return Err(RoomError::TooManyRooms(self.limits.max_rooms));
        }
        Ok(())
    }

    /// The participant limit and empty-timeout a room of `spec` gets: its own, or
    /// the defaults for 0, within the limits.
    fn settings(&self, spec: &RoomSpec) -> Result<(u32, Duration), RoomError> {
        let max = self.limits.max_participants_per_room;
        let max_participants = match spec.max_participants {
            0 => max,
            n if n > max => {
                return Err(RoomError::TooManyParticipantsAsked { requested: n, max });
            }
            n => n,
        };
        let empty_timeout = match spec.empty_timeout {
            Duration::ZERO => self.limits.default_empty_timeout,
            t if t > MAX_EMPTY_TIMEOUT => return Err(RoomError::EmptyTimeoutTooLong(t)),
            t => t,
        };
        Ok((max_participants, empty_timeout))
    }

    /// The room of that name.
    pub fn get(&self, name: &str) -> Result<&Room, RoomError> {
        let name = validate_name(name, NameKind::Room)?;
        self.rooms
            .get(&*name)
            .ok_or_else(|| RoomError::RoomNotFound(name.into_owned()))
    }

    /// A page of rooms after `page_token` (empty: from the start), at most
    /// `page_size` long (0: [`DEFAULT_PAGE_SIZE`], clamped to [`MAX_PAGE_SIZE`]).
    pub fn list(&self, page_token: &str, page_size: usize) -> Result<Page<'_, Room>, RoomError> {
        page(&self.rooms, page_token, page_size)
    }

    /// Closes a room and returns it, with the participants to disconnect.
    pub fn delete(&mut self, name: &str) -> Result<Room, RoomError> {
        let name = validate_name(name, NameKind::Room)?;
        let room = self
            .rooms
            .remove(&*name)
            .ok_or_else(|| RoomError::RoomNotFound(name.into_owned()))?;
        if let Some(at) = room.closes_at() {
            self.closing.remove(&(at, room.name.clone()));
        }
        self.participants -= room.participants.len();
        Ok(room)
    }

    /// A page of a room's participants; see [`RoomDirectory::list`] for paging.
    pub fn participants(
        &self,
        room: &str,
        page_token: &str,
        page_size: usize,
    ) -> Result<Page<'_, Participant>, RoomError> {
        page(&self.get(room)?.participants, page_token, page_size)
    }

    /// One participant of a room.
    pub fn participant(&self, room: &str, identity: &str) -> Result<&Participant, RoomError> {
        let identity = validate_name(identity, NameKind::Identity)?;
        let r = self.get(room)?;
        r.participants
            .get(&*identity)
            .ok_or_else(|| RoomError::ParticipantNotFound {
                room: r.name.clone(),
                identity: identity.into_owned(),
            })
    }

    /// Admits a participant into a room at `now`; the room stops counting down to
    /// its close. Signalling calls this once it has placed the connection on a shard.
    pub fn join(
        &mut self,
        room: &str,
        spec: ParticipantSpec,
        now: Time,
    ) -> Result<&Participant, RoomError> {
        let room = validate_name(room, NameKind::Room)?;
        let identity = validate_name(&spec.identity, NameKind::Identity)?.into_owned();
        let name = if spec.name.is_empty() {
            String::new()
        } else {
            validate_name(&spec.name, NameKind::DisplayName)?.into_owned()
        };
        validate_metadata(&spec.metadata)?;
        let r = self
            .rooms
            .get_mut(&*room)
            .ok_or_else(|| RoomError::RoomNotFound(room.clone().into_owned()))?;
        if r.participants.contains_key(&identity) {
            return Err(RoomError::ParticipantExists {
                room: room.into_owned(),
                identity,
            });
        }
        // A cascaded room's links (one per other node hosting it) are not among
        // the participants the room admits: each node admits up to the limit of
        // its own.
        let link = identity.starts_with(LINK_IDENTITY);
        if !link && r.own_count() >= r.max_participants as usize {
            return Err(RoomError::RoomFull {
                room: room.into_owned(),
                max: r.max_participants,
            });
        }
        if let Some(at) = r.closes_at() {
            self.closing.remove(&(at, r.name.clone()));
        }
        r.empty_since = None;
        self.participants += 1;
        let participant = Participant {
            identity: identity.clone(),
            name,
            metadata: spec.metadata,
            state: ParticipantState::Joining,
            shard: spec.shard,
            peer: spec.peer,
            joined_at: now,
        };
        Ok(r.participants.entry(identity).or_insert(participant))
    }

    /// Sets a participant's connection state (signalling reports ICE and DTLS).
    pub fn set_state(
        &mut self,
        room: &str,
        identity: &str,
        state: ParticipantState,
    ) -> Result<(), RoomError> {
        let (room, identity) = self.keys(room, identity)?;
        if let Some(p) = self
            .rooms
            .get_mut(&room)
            .and_then(|r| r.participants.get_mut(&identity))
        {
            p.state = state;
        }
        Ok(())
    }

    /// The directory's own keys (NFC) of a participant that exists.
    fn keys(&self, room: &str, identity: &str) -> Result<(String, String), RoomError> {
        let r = self.get(room)?;
        let p = self.participant(&r.name, identity)?;
        Ok((r.name.clone(), p.identity.clone()))
    }

    /// Takes a participant out of its room at `now` and returns it, so the caller can
    /// disconnect it from its shard. The last one out starts the room's empty-timeout.
    pub fn remove_participant(
        &mut self,
        room: &str,
        identity: &str,
        now: Time,
    ) -> Result<Participant, RoomError> {
        let (room, identity) = self.keys(room, identity)?;
        let Some(r) = self.rooms.get_mut(&room) else {
            return Err(RoomError::RoomNotFound(room));
        };
        let Some(p) = r.participants.remove(&identity) else {
            return Err(RoomError::ParticipantNotFound { room, identity });
        };
        self.participants -= 1;
        if r.participants.is_empty() {
            r.empty_since = Some(now);
            self.closing.insert((now + r.empty_timeout, r.name.clone()));
        }
        Ok(p)
    }

    /// When the next empty room closes, if any is empty.
    pub fn next_expiry(&self) -> Option<Time> {
        self.closing.first().map(|(at, _)| *at)
    }

    /// Closes every room that has been empty for its whole empty-timeout at `now`
    /// and returns their names. Costs O(closed rooms · log rooms).
    pub fn expire(&mut self, now: Time) -> Vec<String> {
        let mut closed = Vec::new();
        while let Some((at, _)) = self.closing.first() {
            if *at > now {
                break;
            }
            let Some((_, name)) = self.closing.pop_first() else {
                break;
            };
            // Only empty rooms are in `closing`; nobody is left to disconnect.
            debug_assert!(
                self.rooms
                    .get(&name)
                    .is_some_and(|r| r.participants.is_empty())
            );
            self.rooms.remove(&name);
            closed.push(name);
        }
        closed
    }
}

/// Checks a room name, identity, display name, page token or channel label and
/// returns it in the form the directory keeps: UTF-8 (the type says so) of 1 to
/// [`MAX_NAME_BYTES`] bytes, no control (Cc) or line-breaking characters (which
/// would forge log lines or vanish in UIs), no space at either end (so "a" and "a "
/// cannot be two rooms that look alike).
///
/// All but channel labels are also put in NFC (Unicode Normalization Form C, UAX #15),
/// so "é" precomposed and "e" + U+0301 are one room and one identity, and refuse
/// format characters (general category Cf: U+00AD soft hyphen, U+200B–U+200F
/// zero-width space, joiners and directional marks, U+202A–U+202E bidi embeddings and
/// overrides, U+2060–U+2064, U+2066–U+2069 bidi isolates, U+FEFF, and the rest), which
/// make names that look the same differ or reorder what a UI shows. A channel label is
/// matched byte for byte against the label the peer opened the channel with (RFC 8832
/// §5.1), so it is returned as it came and only the first rules apply.
///
/// The length is checked before normalising (bounding the work) and after (NFC may
/// lengthen a name).
pub fn validate_name(name: &str, kind: NameKind) -> Result<Cow<'_, str>, RoomError> {
    let invalid = |reason| Err(RoomError::InvalidName { kind, reason });
    if name.is_empty() {
        return invalid(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return invalid(NameError::TooLong(name.len()));
    }
    let is_label = kind == NameKind::Channel;
    let name = if is_label {
        Cow::Borrowed(name)
    } else {
        nfc(name)
    };
    if name.len() > MAX_NAME_BYTES {
        return invalid(NameError::TooLong(name.len()));
    }
    for c in name.chars() {
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            return invalid(NameError::Unprintable);
        }
        if !is_label && c.general_category() == GeneralCategory::Format {
            return invalid(NameError::FormatCharacter(c));
        }
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        return invalid(NameError::OuterSpace);
    }
    Ok(name)
}

/// `name` in NFC; borrowed when it is NFC already (the common case, found without
/// allocating).
fn nfc(name: &str) -> Cow<'_, str> {
    match is_nfc_quick(name.chars()) {
        IsNormalized::Yes => Cow::Borrowed(name),
        IsNormalized::No | IsNormalized::Maybe => Cow::Owned(name.nfc().collect()),
    }
}

/// Checks metadata: opaque, but bounded.
pub fn validate_metadata(metadata: &str) -> Result<(), RoomError> {
    if metadata.len() > MAX_METADATA_BYTES {
        return Err(RoomError::MetadataTooLong(metadata.len()));
    }
    Ok(())
}

/// The page of `map` after `page_token`, whose next token is the page's last key.
/// How many items a page asked for with `page_size` holds at most: 0 means the
/// default.
pub fn page_len(page_size: usize) -> usize {
    match page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    }
}

/// The name a page token says to go on after: `None` for the first page.
pub fn page_after(page_token: &str) -> Result<Option<Cow<'_, str>>, RoomError> {
    match page_token {
        "" => Ok(None),
        t => Ok(Some(validate_name(t, NameKind::PageToken)?)),
    }
}

fn page<'a, T>(
    map: &'a BTreeMap<String, T>,
    page_token: &str,
    page_size: usize,
) -> Result<Page<'a, T>, RoomError> {
    let size = page_len(page_size);
    let token = page_after(page_token)?;
    let start = token.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut range = map.range::<str, _>((start, Bound::Unbounded));
    let items: Vec<(&String, &T)> = range.by_ref().take(size).collect();
    let next_page_token = match (range.next(), items.last()) {
        (Some(_), Some((last, _))) => Some((*last).clone()),
        _ => None,
    };
    Ok(Page {
        items: items.into_iter().map(|(_, v)| v).collect(),
        next_page_token,
    })
}

#[cfg(test)]
mod tests;

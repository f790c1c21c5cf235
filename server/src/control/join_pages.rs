//! A join's view of the room in pages: the join response carries the first
//! [`JOIN_PAGE_BYTES`] of the other participants, and a [`JoinCursor`] queued behind
//! it in the connection's [`Outbox`] becomes each next page (`others` message) only
//! when the writer reaches it, so a join into a large room holds one page at a
//! time, and room events queued meanwhile come after the last page.
//!
//! Pages go on in identity order after the last identity shown, and show each
//! participant as it is when the page is made: one that left since the join is
//! skipped, and every change since the join follows as an event after the pages,
//! so pages then events, applied in order, give the room as it is (see
//! `OthersPage` in signal.proto).

use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_proto::v1::{self, signal_response};

use super::cluster::cascade::LINK_IDENTITY;
use super::cluster::link_tracks::remote_participant;
use super::grpc::ControlState;
use super::media::RoomTrack;
use super::outbox::{Next, Outbox, Outgoing};
use super::participants::Members;
use super::rooms::Room;

/// The other participants one join response or page carries at most, by encoded
/// size (at least one, whatever its size): three with the largest metadata, hundreds
/// of typical ones. A connection's writer holds one page at a time, so this is
/// what a join into a large room costs while its client reads.
pub const JOIN_PAGE_BYTES: usize = 32 * 1024;
/// What a repeated field adds to each participant's encoded size (tag and length).
const PARTICIPANT_FRAMING_BYTES: usize = 4;

/// Participants a join still owes its client, after the pages written so far.
#[derive(Debug)]
pub struct JoinCursor {
    /// The room, by name as the directory keeps it.
    room: String,
    /// The room's id: a room closed and opened again under the name is another.
    room_id: RoomId,
    /// The joiner, whom no page shows.
    me: PeerId,
    /// The last identity shown; the next page goes on after it.
    after: String,
}

impl JoinCursor {
    /// What is owed to `me`, who joined `room` (id `room_id`) and was shown the
    /// participants up to `after`.
    pub(super) fn new(room: String, room_id: RoomId, me: PeerId, after: String) -> JoinCursor {
        JoinCursor {
            room,
            room_id,
            me,
            after,
        }
    }
}

/// One page of other participants.
#[derive(Debug, Default)]
pub(super) struct OthersPage {
    /// The participants, as the client sees them.
    pub(super) others: Vec<v1::Participant>,
    /// The last identity in `others` (empty for an empty page).
    pub(super) last: String,
    /// More participants follow this page.
    pub(super) more: bool,
}

impl ControlState {
    /// Who `room` shows after the identity `after` (from the first when `None`), in
    /// identity order, each as a client sees it, with its tracks: this node's
    /// participants but `me` and the links (hidden ones only when `hidden`) and, in
    /// a cascaded room, those its links list ([`remote_participants`]), this node's
    /// first on a tie.
    pub(super) fn roster<'m>(
        &'m self,
        members: &'m Members,
        room: &'m Room,
        after: Option<&'m str>,
        me: Option<PeerId>,
        hidden: bool,
    ) -> impl Iterator<Item = v1::Participant> + 'm {
        // Identities are never empty: after "" is from the first.
        let mut local = room
            .participants_after(after.unwrap_or(""))
            .filter(move |p| {
                Some(p.peer) != me
                    && !p.identity.starts_with(LINK_IDENTITY)
                    && (hidden || !members.is_hidden(p.peer))
            })
            .peekable();
        // A hidden participant here shadows the other nodes' of its identity too,
        // where it is shown.
        let mut remote = remote_participants(members, room, after, me)
            .into_iter()
            .filter(move |(p, _)| !hidden || room.participant(&p.identity).is_none())
            .peekable();
        std::iter::from_fn(move || {
            let take_local = match (local.peek(), remote.peek()) {
                (Some(l), Some((r, _))) => l.identity <= r.identity,
                (l, _) => l.is_some(),
            };
            if take_local {
                let p = local.next()?;
                Some(v1::Participant {
                    tracks: members.track_infos(p.peer),
                    ..self.participant_message(p)
                })
            } else {
                let (p, relayed) = remote.next()?;
                Some(remote_participant(p, relayed))
            }
        })
    }

    /// One page of the participants that `me` sees in `room` ([`Self::roster`]),
    /// after the identity `after` (from the first when `None`): as many as fit in
    /// [`JOIN_PAGE_BYTES`], at least one.
    pub(super) fn others_page(
        &self,
        members: &Members,
        room: &Room,
        after: Option<&str>,
        me: PeerId,
    ) -> OthersPage {
        let mut page = OthersPage::default();
        let mut bytes = 0;
        for shown in self.roster(members, room, after, Some(me), false) {
            let len = prost::Message::encoded_len(&shown) + PARTICIPANT_FRAMING_BYTES;
            if !page.others.is_empty() && bytes + len > JOIN_PAGE_BYTES {
                page.more = true;
                break;
            }
            bytes += len;
            page.last.clone_from(&shown.identity);
            page.others.push(shown);
        }
        page
    }

    /// The next page of what `cursor` owes, and the cursor for the rest while there
    /// is more. Each participant is shown as it is now; one that left since the join
    /// is skipped (its `left` event follows the pages).
    fn next_others_page(&self, mut cursor: JoinCursor) -> (Outgoing, Option<JoinCursor>) {
        let rooms = self.rooms();
        let members = self.members();
        let page = match rooms.get(&cursor.room) {
            Ok(room) if room.id == cursor.room_id => {
                self.others_page(&members, room, Some(&cursor.after), cursor.me)
            }
            // The room closed (its members hear ROOM_DELETED): nobody more to show.
            _ => OthersPage::default(),
        };
        drop(members);
        drop(rooms);
        let more = page.more;
        cursor.after = page.last;
        let message = signal_response::Message::Others(v1::OthersPage {
            others: page.others,
            more,
        });
        (Outgoing::new(message), more.then_some(cursor))
    }

    /// What a signalling connection's writer writes next: a queued message, or the
    /// next page of its join (made now, so that a page exists only while it is
    /// being written); `None` once the connection's queue is closed and written.
    pub async fn next_outgoing(&self, outbox: &Outbox) -> Option<Outgoing> {
        match outbox.next().await? {
            Next::Message(message) => Some(message),
            Next::Pages(cursor) => {
                let (page, rest) = self.next_others_page(cursor);
                if let Some(rest) = rest {
                    outbox.resume_pages(rest);
                }
                Some(page)
            }
        }
    }
}

/// The participants of other nodes that `room`'s links list and this node's
/// clients see, after the identity `after` if given, sorted by identity, each with
/// the tracks its link brings: one identity once, and none that a participant here
/// shadows ([`Members::shown_here`]) or that `me` joined under.
pub(super) fn remote_participants<'m>(
    members: &'m Members,
    room: &Room,
    after: Option<&str>,
    me: Option<PeerId>,
) -> Vec<(&'m v1::LinkParticipant, &'m [RoomTrack])> {
    let mine = me
        .and_then(|me| members.by_peer.get(&me))
        .map(|m| m.identity.as_str());
    let mut out: Vec<(&v1::LinkParticipant, &[RoomTrack])> = room
        .participants()
        .filter_map(|p| members.by_peer.get(&p.peer))
        .filter(|m| !m.remote.is_empty())
        .flat_map(|m| {
            let from = match after {
                // Each list is sorted by identity.
                Some(a) => m.remote.partition_point(|p| p.identity.as_str() <= a),
                None => 0,
            };
            m.remote[from..].iter().map(|p| (p, m.relayed.as_slice()))
        })
        .filter(|(p, _)| {
            Some(p.identity.as_str()) != mine && members.shown_here(room, &p.identity).is_none()
        })
        .collect();
    out.sort_by(|a, b| a.0.identity.cmp(&b.0.identity));
    out.dedup_by(|a, b| a.0.identity == b.0.identity);
    out
}

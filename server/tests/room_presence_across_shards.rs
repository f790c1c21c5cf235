//! A room spread over two shards by placement: each shard learns which other shard
//! holds members of the room as participants join, and forgets it as they leave
//! (WHIP DELETE) or the room is deleted. Participants are admitted over WHIP with a
//! captured browser offer; no client connects, which presence does not need.

mod grpc_node;
mod http_client;

use std::time::Duration;

use http_client::{fixture_offer, post_offer, request};
use shoal_proto::v1::{DeleteRoomRequest, ListParticipantsRequest};
use shoal_server::driver::ShardReport;

const ROOM: &str = "spread";
const LIMIT: Duration = Duration::from_secs(10);

/// Each shard's count of rooms it shares with another shard, by index.
fn shared(reports: &[ShardReport]) -> Vec<usize> {
    reports.iter().map(|r| r.shared_rooms).collect()
}

#[test]
fn room_presence_follows_joins_leaves_and_room_deletion() {
    let mut node = grpc_node::node_with_split_room(ROOM);
    let offer = fixture_offer("chromium156_data_offer.sdp");
    let join = |identity: &str| {
        let reply = post_offer(
            node.http,
            &format!("/whip/{ROOM}?identity={identity}"),
            &offer,
        );
        assert_eq!(reply.status, 201, "{identity}: {reply:?}");
        reply.header("location").expect("a Location").to_owned()
    };
    let server = &node.server;
    let wait = |want: [usize; 2], what: &str| {
        grpc_node::wait_for_shards(server, LIMIT, what, |r| shared(r) == want);
    };

    // Alone on shard 0, alice's room is shared with nobody.
    let alice = join("alice");
    wait([0, 0], "one participant");
    // Shard 0 is full: bob lands on shard 1, and each shard learns of the other.
    let bob = join("bob");
    let shards: Vec<u32> = node
        .runtime
        .block_on(node.rooms.list_participants(ListParticipantsRequest {
            room: ROOM.into(),
            ..ListParticipantsRequest::default()
        }))
        .expect("list participants")
        .into_inner()
        .participants
        .iter()
        .map(|p| p.shard)
        .collect();
    assert_eq!(shards.len(), 2);
    assert_ne!(shards[0], shards[1], "placement split the room");
    wait([1, 1], "the room on two shards");

    // Bob leaves: neither shard shares the room any more.
    assert_eq!(request(node.http, "DELETE", &bob, None, b"").status, 200);
    wait([0, 0], "bob left");
    // Carol takes bob's place on shard 1: shared again.
    let _carol = join("carol");
    wait([1, 1], "carol joined");
    // Alice leaves, and dave takes shard 0; then the room is deleted: every
    // entry goes.
    assert_eq!(request(node.http, "DELETE", &alice, None, b"").status, 200);
    wait([0, 0], "alice left");
    let _dave = join("dave");
    wait([1, 1], "dave joined");
    node.runtime
        .block_on(
            node.rooms
                .delete_room(DeleteRoomRequest { name: ROOM.into() }),
        )
        .expect("room deleted");
    wait([0, 0], "room deleted");
}

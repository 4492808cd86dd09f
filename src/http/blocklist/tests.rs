use super::*;
use crate::listing::{CHUNK_BYTES, CHUNK_ELEMENTS};
use crate::model::{Action, PERMANENT};
use crate::store::StoreConfig;

/// Items `{prefix}00000…` of which those with `i % 7 == 0` end at `short_end`.
fn items(kind: Kind, prefix: &str, n: usize, now: i64, short_end: i64) -> Vec<(Kind, Item)> {
    (0..n)
        .map(|i| {
            let item = Item {
                id: format!("{prefix}{i:05}"),
                action: Action::MarkBlocked,
                start_timestamp: now,
                end_timestamp: if i % 7 == 0 { short_end } else { PERMANENT },
                cause: "c".repeat(i % 50 + 1),
                forced: None,
                source: "unknown".into(),
                report_count: 1,
                first_report_timestamp: now,
                last_report_timestamp: now,
                revision: 0,
                escalated: None,
                held_by: Vec::new(),
            };
            (kind, item)
        })
        .collect()
}

/// Drives a listing chunk by chunk as the HTTP layer does, checking each chunk's bound.
fn chunks(store: &Store, mut listing: Listing) -> (Vec<u8>, usize) {
    let (mut body, mut count) = (Vec::new(), 0);
    loop {
        let mut chunk = Vec::new();
        let done = listing.next_chunk(store, &mut chunk).unwrap();
        assert!(
            chunk.len() < CHUNK_BYTES + 1024,
            "a chunk of {}",
            chunk.len()
        );
        body.extend_from_slice(&chunk);
        count += 1;
        if done {
            return (body, count);
        }
    }
}

/// The streamed bodies, over several chunks, are byte for byte the serialization of the
/// documented types, with the items due at the listing's `now` left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_listings_are_the_documented_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&StoreConfig::new(dir.path().join("data"))).unwrap();
    let now = crate::clock::now_ms();
    let n = 2 * CHUNK_ELEMENTS + 100;
    let short_end = now + 60_000;
    store
        .import(items(Kind::TaskManager, "tm-", n, now, short_end), false)
        .await
        .unwrap();
    store
        .import(items(Kind::Node, "n-", n, now, short_end), false)
        .await
        .unwrap();
    store
        .register(vec![
            ("tm-b".into(), "n-00001".into()),
            ("tm-a".into(), "n-00001".into()),
            ("tm-c".into(), "n-00002".into()),
        ])
        .await
        .unwrap();
    let revision = store.revision();
    tokio::task::spawn_blocking(move || {
        // After the short items' end: they are due, whether or not swept.
        let later = short_end;
        let task_managers = store.list(Kind::TaskManager, later).unwrap();
        let nodes: Vec<NodeEntry> = store
            .list(Kind::Node, later)
            .unwrap()
            .into_iter()
            .map(|item| node_entry(&store, item, &mut store.seen()).unwrap())
            .collect();
        assert_eq!(task_managers.len(), n - n.div_ceil(7));
        assert_eq!(nodes[0].task_managers, ["tm-a", "tm-b"]);

        let (tms_body, tms_chunks) = chunks(&store, kind_listing(Kind::TaskManager, later));
        assert_eq!(tms_body, serde_json::to_vec(&task_managers).unwrap());
        assert!(tms_chunks > 1, "{tms_chunks} chunk(s)");
        let (nodes_body, _) = chunks(&store, kind_listing(Kind::Node, later));
        assert_eq!(nodes_body, serde_json::to_vec(&nodes).unwrap());
        let (all, all_chunks) = chunks(&store, blocklist_listing(revision, later));
        let whole = Blocklist {
            blocked_task_managers: task_managers,
            blocked_nodes: nodes,
            revision,
        };
        assert_eq!(
            String::from_utf8(all).unwrap(),
            serde_json::to_string(&whole).unwrap()
        );
        assert!(all_chunks >= 3, "{all_chunks} chunk(s)");

        // Before the short items' end they are listed; an empty kind is `[]`.
        let (body, _) = chunks(&store, kind_listing(Kind::TaskManager, now));
        let listed: Vec<Item> = serde_json::from_slice(&body).unwrap();
        assert_eq!(listed.len(), n);
        assert_eq!(chunks(&store, kind_listing(Kind::Node, PERMANENT)).0, b"[]");
        store.shutdown().unwrap();
    })
    .await
    .unwrap();
}

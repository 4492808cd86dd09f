//! Storage faults: a full disk gets 503s with nothing half-written while reads go on, and
//! the daemon takes writes again once space is back; a corrupted data dir is refused.
//!
//! The disk-full test mounts a small tmpfs, so it needs root (as CI runs); elsewhere it
//! says so and does nothing.

mod common;

use std::process::Command;

use common::ids as ids_of;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A tmpfs mounted for the length of a test.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_owned()))
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn batch(n: usize, size: usize) -> (Vec<String>, Value) {
    // (ids of the batch, its body)
    let ids: Vec<String> = (0..100).map(|i| format!("b{n}-{i:03}")).collect();
    let items = ids
        .iter()
        .map(|id| item(id, "MARK_BLOCKED", &"x".repeat(size)))
        .collect();
    (ids, Value::Array(items))
}

#[tokio::test]
async fn a_full_disk_gets_503_keeps_reads_and_recovers_when_space_returns() {
    let ws = Workspace::new();
    let mount_point = ws.tmp.path().join("small-disk");
    let Some(disk) = Tmpfs::mount(&mount_point, "4m") else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs here (needs root); the disk-full test did not run"
        );
        return;
    };
    let data = mount_point.join("data");
    let d = Daemon::start(&data, &ws.tmp.path().join("daemon.log"), &[]);

    // Fill the disk with batches of 100 items until the daemon refuses one.
    let mut acknowledged = Vec::new();
    let mut refused = Vec::new();
    for n in 0..200 {
        let (ids, body) = batch(n, 900);
        let (status, resp) = d.post("/blocklist/taskmanagers", body).await;
        match status {
            StatusCode::CREATED => acknowledged.push(ids),
            StatusCode::SERVICE_UNAVAILABLE => {
                assert!(
                    resp["errors"][0].as_str().unwrap().contains("unavailable"),
                    "{resp}"
                );
                refused.push(ids);
                if refused.len() == 3 {
                    break;
                }
            }
            other => panic!("unexpected {other}: {resp}"),
        }
    }
    assert!(
        !acknowledged.is_empty() && refused.len() == 3,
        "the disk never filled up"
    );

    // Reads never answer wrongly: the right item, or a 503 when sled must write to serve
    // them (it splits nodes lazily, on the first traversal after the inserts that grew
    // them, and a split is a write). Most are served from its cache.
    let first = &acknowledged[0][0];
    let (status, found) = d.get(&format!("/blocklist/taskmanagers/{first}")).await;
    match status {
        StatusCode::OK => assert_eq!(found["id"], json!(first)),
        StatusCode::SERVICE_UNAVAILABLE => {
            assert!(found["errors"][0].as_str().unwrap().contains("unavailable"));
        }
        other => panic!("a read during the full disk answered {other}: {found}"),
    }
    let (status, verdict) = d
        .get(&format!("/blocklist/check/taskmanagers/{first}"))
        .await;
    assert!(
        (status == StatusCode::OK && verdict["blocked"] == json!(true))
            || status == StatusCode::SERVICE_UNAVAILABLE,
        "{status}: {verdict}"
    );
    assert_eq!(d.get("/healthz").await.0, StatusCode::OK);
    // Each refused batch is a failed group commit, which an alert watches (the stage
    // depends on where the disk ran out: sled's transaction or its flush).
    let failures = d
        .metric(r#"blocklist_commit_failures_total{stage="transaction"}"#)
        .await
        + d.metric(r#"blocklist_commit_failures_total{stage="sync"}"#)
            .await;
    assert!(failures >= 3.0, "{failures} failed commits counted");

    // Space comes back: writes work again without a restart.
    disk.resize("64m");
    let (ids, body) = batch(999, 10);
    eventually("writes to work again", || async {
        d.post("/blocklist/taskmanagers", body.clone()).await.0 == StatusCode::CREATED
    })
    .await;
    assert_eq!(
        d.get(&format!("/blocklist/taskmanagers/{}", ids[0]))
            .await
            .0,
        StatusCode::OK
    );

    // Every acknowledged item is there, and nothing of a refused batch is half there.
    let (status, list) = d.get("/blocklist/taskmanagers").await;
    assert_eq!(status, StatusCode::OK);
    let present: std::collections::BTreeSet<String> = ids_of(&list).into_iter().collect();
    for id in acknowledged.iter().flatten() {
        assert!(present.contains(id), "acknowledged {id} is missing");
    }
    for batch in &refused {
        let n = batch.iter().filter(|id| present.contains(*id)).count();
        assert!(n == 0 || n == batch.len(), "a refused batch is half there");
    }
    d.kill9();
    let out = Command::new(&*BIN)
        .args(["check".as_ref(), "--data-dir".as_ref(), data.as_os_str()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    drop(disk);
}

#[tokio::test]
async fn a_corrupted_data_dir_is_refused_and_left_as_it_was() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    d.post("/blocklist/nodes", json!([item("n1", "MARK_BLOCKED", "c")]))
        .await;
    assert!(d.terminate().success());
    let dir = ws.data_dir();
    // Overwrite the schema version with garbage of the wrong length.
    {
        let db = common::open_sled(&dir);
        db.open_tree("meta")
            .unwrap()
            .insert("schema_version", b"garbage!!")
            .unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    // The log and the config are the data; sled may rewrite its snapshot (a cache of the
    // log) when it opens a directory, before our own checks can run.
    let data_files = || -> Vec<(String, Vec<u8>)> {
        ["db", "conf"]
            .iter()
            .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
            .collect()
    };
    let before = data_files();
    let stderr = refused_start(&dir);
    assert!(stderr.contains("not a blocklistd data dir"), "{stderr}");
    assert!(
        data_files() == before,
        "the log and config were left as they were"
    );
}

/// A clear that meets a value it cannot decode fails whole: it reads every item before it
/// removes any, since the group's transaction commits anyway (for the other requests in it).
#[test]
fn a_clear_that_meets_a_corrupt_item_removes_nothing() {
    use blocklistd::model::{Action, Kind, NewItem};
    use blocklistd::store::{Store, StoreConfig};

    let ws = Workspace::new();
    let dir = ws.data_dir();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ids = ["a", "b", "c"];
    {
        let store = Store::open(&StoreConfig::new(&dir)).unwrap();
        let items = ids
            .iter()
            .map(|id| NewItem {
                id: (*id).to_owned(),
                action: Action::MarkBlocked,
                end: i64::MAX,
                cause: "c".to_owned(),
                allow_merge: false,
                source: "unknown".into(),
                timeout: None,
                details: blocklistd::model::Details::new(),
            })
            .collect();
        runtime
            .block_on(store.add(Kind::Node, items, now_ms()))
            .unwrap();
        store.shutdown().unwrap();
    }
    wait_until_unlocked(&dir);
    {
        let db = common::open_sled(&dir);
        db.open_tree("items")
            .unwrap()
            .insert(b"Nb", &[0xFF][..])
            .unwrap();
        db.flush().unwrap();
    }
    wait_until_unlocked(&dir);
    let store = Store::open(&StoreConfig::new(&dir)).unwrap();
    let revision = store.revision();
    let all = ids
        .iter()
        .map(|id| (Kind::Node, (*id).to_owned()))
        .collect();
    let cleared = runtime.block_on(store.clear(all, Vec::new()));
    assert!(cleared.is_err(), "{cleared:?}");
    assert_eq!(store.revision(), revision, "no event, no change");
    for id in ["a", "c"] {
        assert!(
            store
                .get(Kind::Node, id, now_ms(), &mut store.seen())
                .unwrap()
                .is_some(),
            "{id} was removed"
        );
    }
    store.shutdown().unwrap();
}

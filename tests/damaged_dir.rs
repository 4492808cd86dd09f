//! A data dir a disk damaged: the daemon and `blocklistd check` say which files and what to
//! do instead of panicking, leave the dir as it was, and `blocklistd salvage` exports what
//! is still readable for an import into a new dir.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::{blocklistd, item, refused_start, run_to_exit, Workspace};
use reqwest::StatusCode;
use serde_json::json;

/// Every file under `dir` with its contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(snapshot(&path));
        } else {
            files.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    files
}

/// Merges 17 distinct ~1 KiB causes into each of 20 adjacent task managers: leaves of
/// ~17 KiB values, which sled writes as blob files when its segments are small.
async fn long_causes(d: &common::Daemon) {
    for part in 0..17 {
        let batch: Vec<_> = (0..20)
            .map(|i| {
                let mut element = item(
                    &format!("tm-{i:02}"),
                    "MARK_BLOCKED",
                    &format!("{part:02}{}", "c".repeat(1000)),
                );
                element["allowMerge"] = json!(true);
                element
            })
            .collect();
        let (status, body) = d.post("/blocklist/taskmanagers", json!(batch)).await;
        assert!(status.is_success(), "{status} {body}");
    }
}

fn check(dir: &Path) -> (std::process::ExitStatus, String) {
    run_to_exit(&["--data-dir".as_ref(), dir.as_os_str(), "check".as_ref()])
}

fn salvage(dir: &Path, out: &Path) -> (std::process::ExitStatus, String) {
    run_to_exit(&[
        "--data-dir".as_ref(),
        dir.as_os_str(),
        "salvage".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ])
}

#[tokio::test]
async fn empty_blob_files_are_reported_without_a_panic_and_the_dir_is_left_as_it_was() {
    let mut ws = Workspace::new();
    // Small segments, so that sled writes blob files (the default never does).
    let d = ws.start(&["--segment-bytes", "65536"]);
    long_causes(&d).await;
    assert!(d.terminate().success());
    let dir = ws.data_dir();
    let blobs: Vec<PathBuf> = std::fs::read_dir(dir.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!blobs.is_empty(), "the workload made no blob file");
    // What a power cut leaves of blob files nobody fsynced.
    for blob in &blobs {
        std::fs::write(blob, b"").unwrap();
    }
    let before = snapshot(&dir);

    let stderr = refused_start(&dir);
    assert!(!stderr.contains("panicked at"), "{stderr}");
    assert!(
        stderr.contains("could not recover the database"),
        "{stderr}"
    );
    assert!(stderr.contains("empty blob"), "{stderr}");
    assert!(stderr.contains("salvage"), "{stderr}");
    assert!(stderr.contains("The data dir was not changed"), "{stderr}");

    let (status, stderr) = check(&dir);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("empty blob"), "{stderr}");

    // Salvage cannot open it either (sled's recovery fails on the pages those blobs held),
    // and says so instead of panicking.
    let out = ws.tmp.path().join("salvaged.jsonl");
    let (status, stderr) = salvage(&dir, &out);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("could not open any copy"), "{stderr}");

    assert!(before == snapshot(&dir), "the damaged data dir was changed");
    let leftovers: Vec<_> = std::fs::read_dir(ws.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "scratch copies left: {leftovers:?}");
}

#[tokio::test]
async fn a_damaged_conf_is_refused_and_salvage_recovers_every_item_for_a_new_dir() {
    let mut ws = Workspace::new();
    let d = ws.start(&[]);
    let (status, _) = d
        .post(
            "/blocklist/nodes",
            json!([item("n1", "MARK_BLOCKED_AND_EVACUATE_TASKS", "disk")]),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    long_causes(&d).await;
    let registered = d
        .send(
            reqwest::Method::PUT,
            "/taskmanagers/tm-00",
            Some(json!({"node": "n1"})),
        )
        .await;
    assert!(registered.status().is_success());
    let listing = d.listing().await;
    assert!(d.terminate().success());
    let dir = ws.data_dir();
    // sled's conf, written at creation and never fsynced by sled: empty after a power cut.
    std::fs::write(dir.join("conf"), b"").unwrap();

    let stderr = refused_start(&dir);
    assert!(stderr.contains("conf is damaged"), "{stderr}");
    assert!(!stderr.contains("panicked at"), "{stderr}");

    let out = ws.tmp.path().join("salvaged.jsonl");
    let (status, stderr) = salvage(&dir, &out);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("salvaged 21 items"), "{stderr}");
    assert!(stderr.contains("1 registrations"), "{stderr}");

    let fresh = ws.tmp.path().join("fresh");
    let imported = blocklistd(&[
        OsStr::new("--data-dir"),
        fresh.as_os_str(),
        OsStr::new("import"),
        out.as_os_str(),
    ]);
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let log = ws.tmp.path().join("fresh.log");
    let restored = common::Daemon::start(&fresh, &log, &[]);
    let mut again = restored.listing().await;
    let mut before = listing;
    // The revision is the new store's own, and so is each item's (the import wrote them
    // all); every other field, the provenance with it, is recovered.
    for listing in [&mut again, &mut before] {
        let revision = listing.as_object_mut().unwrap().remove("revision");
        let revision = revision.and_then(|r| r.as_u64()).unwrap();
        for kind in ["blockedTaskManagers", "blockedNodes"] {
            for item in listing[kind].as_array_mut().unwrap() {
                let of_item = item.as_object_mut().unwrap().remove("revision");
                let of_item = of_item.and_then(|r| r.as_u64()).unwrap();
                assert!(
                    (1..=revision).contains(&of_item),
                    "{item}: {of_item} of {revision}"
                );
            }
        }
    }
    assert_eq!(again, before);
}

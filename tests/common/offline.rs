//! The data dir opened in-process while no daemon runs: sled directly, or the store.

use std::path::Path;
use std::time::{Duration, Instant};

use blocklistd::config::Opener;
use blocklistd::store::{Store, StoreConfig};
use clap::Parser;

use super::{on_etcd, store_flags, Workspace, DEADLINE};

impl Workspace {
    /// Opens the store offline (no daemon running) and returns what `verify` finds, and the
    /// sizes of the items and expiry trees.
    pub fn inspect(&self) -> (Vec<String>, (usize, usize)) {
        let dir = self.data_dir();
        // On a plain thread: the store's shutdown blocks, which a tokio worker may not do.
        let result = std::thread::spawn(move || {
            let store = Store::open(&offline_config(&dir)).expect("open the store offline");
            let problems = store.verify().expect("verify");
            let sizes = store.tree_sizes().expect("tree sizes");
            store.shutdown().expect("shutdown");
            (problems, sizes)
        })
        .join()
        .expect("inspect thread");
        wait_until_unlocked(&self.data_dir());
        result
    }
}

impl Workspace {
    /// How many entries each tree named in `names` holds in the stopped daemon's store
    /// (its data dir, or its prefix on etcd), read through the store opened offline.
    pub fn tree_entries(&self, names: &[&str]) -> Vec<u64> {
        let dir = self.data_dir();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let entries = std::thread::spawn(move || {
            let store = Store::open(&offline_config(&dir)).expect("open the store offline");
            let usage = store.disk_usage().expect("the trees' sizes");
            store.shutdown().expect("shutdown");
            names
                .iter()
                .map(|name| {
                    usage
                        .trees
                        .iter()
                        .find(|t| &t.name == name)
                        .unwrap_or_else(|| panic!("no tree {name}"))
                        .entries
                })
                .collect()
        })
        .join()
        .expect("tree_entries thread");
        wait_until_unlocked(&self.data_dir());
        entries
    }
}

/// The store's settings as an offline tool opens it: the data dir's, or on etcd
/// (`BLOCKLISTD_TEST_STORE`) the data dir's prefix, waiting one lease for a killed daemon.
pub fn offline_config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir);
    if on_etcd() {
        let mut args = vec!["blocklistd".to_owned()];
        args.extend(store_flags(dir));
        let cli = blocklistd::config::Cli::try_parse_from(args).expect("the store's flags");
        cli.serve
            .store
            .place(&mut config, "a test".into(), Opener::Tool { create: false })
            .expect("connect to etcd");
    }
    config
}

/// Opens the sled database in `dir` directly, with the segment size it was created with.
/// While another handle still holds the database's lock it retries until [`DEADLINE`]: under
/// a loaded suite the lock was seen taken again right after [`wait_until_unlocked`] found it
/// free.
pub fn open_sled(dir: impl AsRef<Path>) -> sled::Db {
    let config = blocklistd::store::sled_config(dir.as_ref()).expect("a readable conf");
    let deadline = Instant::now() + DEADLINE;
    loop {
        match config.open() {
            Ok(db) => return db,
            Err(e) if e.to_string().contains("could not acquire lock") => {
                assert!(Instant::now() < deadline, "open sled: {e}");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("open sled: {e}"),
        }
    }
}

/// Waits until no sled instance in this process holds the database in `dir` any more.
///
/// Dropping a `sled::Db` (or closing a `Store`) does not release the database's file lock
/// at once: sled's I/O threads finish their last writes holding it. A daemon started in
/// that window refuses the dir as in use, so a test that opened the database in-process
/// calls this before starting one.
pub fn wait_until_unlocked(dir: &Path) {
    use rustix::fs::{flock, FlockOperation};
    let Ok(file) = std::fs::File::open(dir.join("db")) else {
        return; // no database yet
    };
    let deadline = Instant::now() + DEADLINE;
    while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        assert!(Instant::now() < deadline, "{} stays locked", dir.display());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Closing the file releases the lock we took.
}

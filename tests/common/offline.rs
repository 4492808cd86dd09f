//! The data dir opened in-process while no daemon runs: sled directly, or the store.

use std::path::Path;
use std::time::{Duration, Instant};

use blocklistd::store::{Store, StoreConfig};

use super::{Workspace, DEADLINE};

impl Workspace {
    /// Opens the store offline (no daemon running) and returns what `verify` finds, and the
    /// sizes of the items and expiry trees.
    pub fn inspect(&self) -> (Vec<String>, (usize, usize)) {
        let dir = self.data_dir();
        // On a plain thread: the store's shutdown blocks, which a tokio worker may not do.
        let result = std::thread::spawn(move || {
            let store = Store::open(&StoreConfig::new(dir)).expect("open the store offline");
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

//! Emulated power cuts on a real file system: the daemon's data dir on a loop-mounted ext4
//! image, a workload through the API, SIGKILL, and at once a copy of the image *file*,
//! read while it is still mounted and without any sync: the copy holds what ext4 had
//! actually written to its block device, as after a power cut (file data still in the page
//! cache — such as a blob file sled wrote and never fsync'd — is not in it). The copy is
//! then mounted (ext4 replays its journal) and the daemon started on it.
//!
//! After every cut: the daemon starts (no panic, no exit 101), every acknowledged id is
//! there with at least every cause it was acknowledged with, and `blocklistd check` on the
//! stopped copy exits 0. Also, sled's `conf` is not empty: it is written when the database
//! is created, long before the first acknowledgement, and an empty one makes sled silently
//! take the settings (segment size) of whoever opens the directory next.
//!
//! Needs root, /dev/loop-control, mount/umount/losetup/findmnt and mkfs.ext4. Without them
//! each test prints a loud SKIPPED on stderr and passes, except with `CI` set, where that
//! is a failure. Mounts and loop devices are released on every path, failures included.

mod common;
mod powerloss;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{available, runs};
use powerloss::{
    listing, long_causes, lost, offline_check, small_writers, tail, Ledger, Running, SharedLedger,
    LONG_IDS, LONG_ROUNDS,
};

/// The size of each image (sparse: only what ext4 writes takes space).
const IMAGE_BYTES: u64 = 256 << 20;

/// Whether this machine can loop-mount images; `false` (after saying so) when not.
fn loop_mounts(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    let control = Path::new("/dev/loop-control").exists();
    let tools = [
        ("mount", "--version"),
        ("umount", "--version"),
        ("losetup", "--version"),
        ("findmnt", "--version"),
        ("mkfs.ext4", "-V"),
    ];
    let missing: Vec<&str> = tools
        .iter()
        .filter(|(tool, arg)| !runs(tool, arg))
        .map(|(tool, _)| *tool)
        .collect();
    let why = match (root, control, missing.is_empty()) {
        (false, _, _) => "not running as root (loop mounts need it)".to_owned(),
        (_, false, _) => "no /dev/loop-control (no loop devices)".to_owned(),
        (_, _, false) => format!("missing tools: {}", missing.join(", ")),
        _ => String::new(),
    };
    available(&why, why.is_empty(), test)
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// An ext4 image loop-mounted on a directory; unmounted, and its loop device released, on
/// drop (lazily when busy).
struct Mounted {
    image: PathBuf,
    dir: PathBuf,
    mounted: bool,
}

impl Mounted {
    /// A new sparse image with a fresh ext4 on it, mounted.
    fn fresh(image: &Path, dir: &Path) -> Mounted {
        std::fs::File::create(image)
            .and_then(|f| f.set_len(IMAGE_BYTES))
            .expect("the image file");
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image)).expect("mkfs.ext4");
        Mounted::mount(image, dir)
    }

    /// Mounts an existing image (replaying its journal when it has one to replay).
    fn mount(image: &Path, dir: &Path) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(image)
            .arg(dir))
        .unwrap_or_else(|e| panic!("cannot loop-mount although root with loop devices: {e}"));
        Mounted {
            image: image.to_owned(),
            dir: dir.to_owned(),
            mounted: true,
        }
    }

    /// The loop device under the mount, e.g. `/dev/loop3`.
    fn device(&self) -> Option<String> {
        let out = Command::new("findmnt")
            .args(["-n", "-o", "SOURCE", "--mountpoint"])
            .arg(&self.dir)
            .output()
            .ok()?;
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        dev.starts_with("/dev/loop").then_some(dev)
    }

    /// Unmounts, asserting it worked (the daemon must be gone).
    fn unmount(mut self) {
        let device = self.device();
        run(Command::new("umount").arg(&self.dir)).expect("umount");
        self.mounted = false;
        release(device.as_deref(), &self.image);
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        let device = self.device();
        if run(Command::new("umount").arg(&self.dir)).is_err() {
            let _ = run(Command::new("umount").arg("-l").arg(&self.dir));
        }
        release(device.as_deref(), &self.image);
    }
}

/// Detaches `device` if it is still attached to `image` (`mount -o loop` sets autoclear,
/// so usually it is not; and by then the device may already serve another test).
fn release(device: Option<&str>, image: &Path) {
    let Some(device) = device else { return };
    let name = device.trim_start_matches("/dev/");
    let backing = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"));
    let ours = std::fs::canonicalize(image).ok();
    if backing.is_ok_and(|b| Some(PathBuf::from(b.trim())) == ours) {
        let _ = run(Command::new("losetup").arg("-d").arg(device));
    }
}

/// Copies the image file with plain reads (no sync first), keeping it sparse: only the
/// ranges that hold data (`SEEK_DATA`/`SEEK_HOLE`, which see the backing file's page cache)
/// are read, so the copy is taken within milliseconds of the kill.
fn copy_image(from: &Path, to: &Path) {
    use rustix::fs::{seek, SeekFrom};
    let src = std::fs::File::open(from).expect("open the image");
    let len = src.metadata().unwrap().len();
    let dst = std::fs::File::create(to).expect("create the copy");
    dst.set_len(len).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let Ok(data) = seek(&src, SeekFrom::Data(at)) else {
            break; // ENXIO: no data after `at`
        };
        let hole = seek(&src, SeekFrom::Hole(data)).unwrap_or(len);
        let mut pos = data;
        while pos < hole {
            let want = buf.len().min((hole - pos) as usize);
            let n = src.read_at(&mut buf[..want], pos).expect("read the image");
            if n == 0 {
                break;
            }
            if buf[..n].iter().any(|&b| b != 0) {
                dst.write_all_at(&buf[..n], pos).expect("write the copy");
            }
            pos += n as u64;
        }
        at = hole.max(pos);
    }
}

/// One test's images, mount points and logs, under a temp dir.
struct Bench {
    tmp: tempfile::TempDir,
    runs: usize,
}

impl Bench {
    fn new() -> Bench {
        Bench {
            tmp: tempfile::tempdir().expect("temp dir"),
            runs: 0,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn fresh_fs(&self) -> Mounted {
        Mounted::fresh(&self.path("image-0"), &self.path("mnt-0"))
    }

    fn start(&mut self, fs: &Mounted) -> Result<Running, powerloss::StartFailure> {
        self.runs += 1;
        let log = self.path(&format!("daemon-{}.log", self.runs));
        Running::start(&fs.dir.join("data"), &log, &[], None)
    }

    /// The power cut: SIGKILL, at once a copy of the image file, the original unmounted,
    /// the copy mounted in its place. `n` numbers the cut.
    fn cut(&self, d: Running, fs: Mounted, n: usize) -> Mounted {
        let started = Instant::now();
        d.kill9();
        let image = self.path(&format!("image-{n}"));
        copy_image(&fs.image, &image);
        let copied = started.elapsed();
        fs.unmount();
        let fs = Mounted::mount(&image, &self.path(&format!("mnt-{n}")));
        eprintln!("cut {n}: image copied {copied:?} after the kill");
        fs
    }

    /// After cut `n`: the daemon starts on the copy and still has everything in `ledger`;
    /// stopped, `blocklistd check` finds the store sound. Panics with what went wrong.
    async fn after_cut(&mut self, fs: &Mounted, ledger: &Ledger, n: usize) {
        let data = fs.dir.join("data");
        let files = listing(&data);
        let blobs: Vec<_> = files
            .iter()
            .filter(|(p, _)| p.starts_with("blobs"))
            .collect();
        let empty = blobs.iter().filter(|(_, len)| *len == 0).count();
        let files_line = format!(
            "the data dir after the cut: {} files, {} of them in blobs/ ({empty} empty): {:?}",
            files.len(),
            blobs.len(),
            files.iter().take(12).collect::<Vec<_>>()
        );
        eprintln!("cut {n}: {files_line}");
        let d = match self.start(fs) {
            Ok(d) => d,
            Err(failure) => {
                let (status, out) = offline_check(&data);
                panic!(
                    "cut {n}: the daemon did not start on the power-cut copy ({} ids, {} \
                     acknowledged adds at stake): {failure}\n\n`blocklistd check` on it: \
                     {status}\n{}\n\n{files_line}",
                    ledger.causes.len(),
                    ledger.acks,
                    tail(&out, 25)
                );
            }
        };
        let problems = lost(&d, ledger).await;
        let log = d.log_text();
        let exit = d.terminate();
        let (status, out) = offline_check(&data);
        // Everything that went wrong, in one message.
        let mut failures = Vec::new();
        // sled writes `conf` (its segment size, among others) when it creates the database,
        // long before the first acknowledgement; empty after a cut, sled silently takes the
        // settings of whoever opens the directory next.
        if files
            .iter()
            .any(|(p, len)| p.as_path() == Path::new("conf") && *len == 0)
        {
            failures.push(
                "sled's `conf` is empty after the cut: it was written when the database was \
                 created and never fsync'd"
                    .to_owned(),
            );
        }
        if !problems.is_empty() {
            let lines: Vec<&String> = problems.values().flatten().take(20).collect();
            failures.push(format!(
                "{} of {} acknowledged ids lost something (the daemon started and \
                 answered):\n{}",
                problems.len(),
                ledger.causes.len(),
                lines
                    .iter()
                    .map(|l| l.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        if log.contains("panicked") {
            failures.push(format!("a thread panicked:\n{}", tail(&log, 30)));
        }
        if !exit.success() {
            failures.push(format!("the daemon exited {exit} on SIGTERM"));
        }
        if !status.success() {
            failures.push(format!(
                "`blocklistd check` failed ({status}):\n{}",
                tail(&out, 25)
            ));
        }
        assert!(
            failures.is_empty(),
            "cut {n}: {}\n\n{files_line}",
            failures.join("\n\n")
        );
    }
}

fn new_ledger() -> SharedLedger {
    Arc::new(Mutex::new(Ledger::default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_writers_lose_nothing_acknowledged_to_a_power_cut() {
    if !loop_mounts("power cut, 8 writers") {
        return;
    }
    let started = Instant::now();
    let mut bench = Bench::new();
    let fs = bench.fresh_fs();
    let d = bench.start(&fs).unwrap_or_else(|f| panic!("{f}"));
    let ledger = new_ledger();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = tokio::spawn(small_writers(
        d.url(""),
        "a".into(),
        8,
        ledger.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fs = bench.cut(d, fs, 1);
    stop.store(true, Ordering::Relaxed);
    writers.await.unwrap();
    let ledger = ledger.lock().unwrap().clone();
    assert!(ledger.acks > 100, "only {} adds acknowledged", ledger.acks);
    bench.after_cut(&fs, &ledger, 1).await;
    eprintln!(
        "8 writers: {} adds acknowledged, all there after the cut ({:?})",
        ledger.acks,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_merged_causes_on_adjacent_ids_survive_a_power_cut() {
    if !loop_mounts("power cut, long causes") {
        return;
    }
    let started = Instant::now();
    let mut bench = Bench::new();
    let fs = bench.fresh_fs();
    let d = bench.start(&fs).unwrap_or_else(|f| panic!("{f}"));
    let ledger = new_ledger();
    long_causes(d.url(""), "tm".into(), ledger.clone()).await;
    let fs = bench.cut(d, fs, 1);
    let ledger = ledger.lock().unwrap().clone();
    assert_eq!(
        ledger.acks,
        LONG_IDS * LONG_ROUNDS,
        "every merge acknowledged"
    );
    bench.after_cut(&fs, &ledger, 1).await;
    eprintln!(
        "long causes: all there after the cut ({:?})",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_power_cuts_lose_nothing_acknowledged() {
    if !loop_mounts("repeated power cuts") {
        return;
    }
    const CUTS: usize = 3;
    let started = Instant::now();
    let mut bench = Bench::new();
    let mut fs = bench.fresh_fs();
    let ledger = new_ledger();
    for n in 1..=CUTS {
        let d = bench
            .start(&fs)
            .unwrap_or_else(|f| panic!("before cut {n}: {f}"));
        let stop = Arc::new(AtomicBool::new(false));
        let writers = tokio::spawn(small_writers(
            d.url(""),
            format!("c{n}"),
            4,
            ledger.clone(),
            stop.clone(),
        ));
        // The long causes on ids of their own each round, so each round makes big leaves.
        long_causes(d.url(""), format!("c{n}-tm"), ledger.clone()).await;
        // Cut while the small writers are still writing.
        fs = bench.cut(d, fs, n);
        stop.store(true, Ordering::Relaxed);
        writers.await.unwrap();
        let snapshot = ledger.lock().unwrap().clone();
        bench.after_cut(&fs, &snapshot, n).await;
    }
    let acks = ledger.lock().unwrap().acks;
    eprintln!(
        "{CUTS} cuts: {acks} adds acknowledged, all there after each ({:?})",
        started.elapsed()
    );
}

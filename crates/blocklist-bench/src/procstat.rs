//! What the kernel says about a process: CPU time, resident memory, and disk use of a dir.
//!
//! Read from `/proc` rather than sampled, so the CPU of a phase is exact however short it is.

use std::path::Path;

/// Linux reports `utime`/`stime` in `USER_HZ` ticks, which is 100 on every architecture the
/// kernel ABI exposes to user space (the kernel converts from its internal HZ).
const TICKS_PER_SECOND: f64 = 100.0;

/// User + system CPU seconds consumed so far by `pid` (all its threads), or `None` when the
/// process is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state); utime is field 14, stime field 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / TICKS_PER_SECOND)
}

/// The CPU of this (the bench) process.
pub fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// A line of `/proc/PID/status` such as `VmRSS:   1234 kB`, in bytes.
fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Resident memory now.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

/// The highest resident memory the process has had.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    status_kb(pid, "VmHWM:")
}

/// Disk use of everything under `dir`: (apparent bytes, allocated bytes). Allocated is what
/// the file system really holds (`st_blocks`), which is what "disk per item" should count;
/// apparent shows sparse or preallocated files.
pub fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut apparent = 0;
    let mut allocated = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                apparent += meta.len();
                allocated += meta.blocks() * 512;
            }
        }
    }
    (apparent, allocated)
}

/// CPU seconds of a set of processes between two points in time.
pub struct CpuWindow {
    pids: Vec<u32>,
    start: Vec<f64>,
    bench_start: f64,
    system_start: Option<f64>,
    wall: std::time::Instant,
}

/// Busy CPU seconds of the whole machine (all cores) from the first line of `/proc/stat`:
/// everything but idle and iowait.
fn system_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: f64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4)?;
    Some((total - idle) / TICKS_PER_SECOND)
}

/// What a [`CpuWindow`] measured, in cores (CPU seconds per wall second).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    /// Summed over the watched server processes (the daemon, the ceiling server or Redis).
    pub server: f64,
    pub bench: f64,
    pub server_seconds: f64,
    pub wall_seconds: f64,
    /// CPU used by every other process on the machine (a build, another benchmark), in
    /// cores: a figure measured while this is large is not worth much.
    pub others: f64,
}

impl CpuWindow {
    pub fn start(pids: &[u32]) -> CpuWindow {
        CpuWindow {
            pids: pids.to_vec(),
            start: pids
                .iter()
                .map(|&p| cpu_seconds(p).unwrap_or(0.0))
                .collect(),
            bench_start: self_cpu_seconds(),
            system_start: system_busy_seconds(),
            wall: std::time::Instant::now(),
        }
    }

    pub fn stop(&self) -> CpuUse {
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        let server: f64 = self
            .pids
            .iter()
            .zip(&self.start)
            .map(|(&p, &s)| cpu_seconds(p).map_or(0.0, |now| now - s))
            .sum();
        let bench = self_cpu_seconds() - self.bench_start;
        let system = match (self.system_start, system_busy_seconds()) {
            (Some(start), Some(end)) => end - start,
            _ => 0.0,
        };
        CpuUse {
            others: ((system - server - bench) / wall).max(0.0),
            server: server / wall,
            bench: bench / wall,
            server_seconds: server,
            wall_seconds: wall,
        }
    }
}

/// Waits until the rest of the machine is quiet: other processes (not `pids`, not the
/// bench) using under a tenth of a core over one second. Gives up after `max_wait`; returns
/// whether it got quiet. On a machine shared with builds, measuring while a compiler runs
/// would halve every figure.
pub async fn wait_quiet(pids: &[u32], max_wait: std::time::Duration) -> bool {
    let give_up = std::time::Instant::now() + max_wait;
    loop {
        let window = CpuWindow::start(pids);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        if window.stop().others < 0.1 {
            return true;
        }
        if std::time::Instant::now() >= give_up {
            return false;
        }
    }
}

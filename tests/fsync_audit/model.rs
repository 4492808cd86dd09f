//! The audit: replays the calls against a model of the data dir and finds every creation
//! not durable before a response that may depend on it.

use super::*;

// ---------------------------------------------------------------------------------------
// The audit

/// A file or directory that came into being during the trace (one per creation).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) path: PathBuf,
    pub(crate) dir: bool,
    /// The call that made it: `openat(O_CREAT)`, `mkdir`, `rename from …`.
    pub(crate) how: String,
    pub(crate) tid: u32,
    /// The creating call's entry and exit.
    pub(crate) created: (u64, u64),
    /// When the name went away (unlinked, renamed over or away).
    pub(crate) gone: Option<u64>,
    /// The node this one was renamed from: its syncs count for this one's contents.
    pub(crate) origin: Option<usize>,
    /// fsync / fdatasync of this node: (entry, exit).
    pub(crate) syncs: Vec<(u64, u64)>,
    /// Exits of the writes to it.
    pub(crate) writes: Vec<u64>,
    /// `close()` calls on it: (entry, exit).
    pub(crate) closes: Vec<(u64, u64)>,
}

/// An HTTP response on its way out: a write to a TCP socket.
#[derive(Debug, Clone)]
pub(crate) struct Ack {
    pub(crate) at: u64,
    pub(crate) tid: u32,
    pub(crate) socket: String,
    /// The start of what was written (`HTTP/1.1 201 Created`), as far as strace shows it.
    pub(crate) head: String,
}

/// One creation that was not durable by the next response.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) node: Node,
    pub(crate) ack: Ack,
    pub(crate) missing: Vec<String>,
}

/// What a traced run produced.
#[derive(Debug)]
pub(crate) struct Audit {
    /// Which run of the daemon: on a fresh data dir, or restarted on it.
    pub(crate) phase: &'static str,
    pub(crate) data_dir: PathBuf,
    pub(crate) nodes: Vec<Node>,
    pub(crate) acks: Vec<Ack>,
    pub(crate) violations: Vec<Violation>,
    /// fsync, fdatasync and `sync_file_range` calls: (path, call, thread) → count; blob
    /// files as `blobs/*`.
    pub(crate) syncs: BTreeMap<(String, String, String), usize>,
    /// Thread names, read from /proc while the daemon ran.
    pub(crate) threads: BTreeMap<u32, String>,
    /// The trace's first timestamp, for relative times in reports.
    pub(crate) t0: u64,
    /// Add requests acknowledged during the run.
    pub(crate) acked_adds: usize,
    /// `blobs/` at the end of the workload.
    pub(crate) blobs_at_end: Vec<(PathBuf, u64)>,
}

/// Replays the calls against a model of the data dir and checks every creation inside
/// `data_dir` against the first response that may depend on it.
///
/// Which response is that? The daemon pipelines: its committer runs transaction k+1 —
/// where sled writes blob files — while the syncer flushes and syncs group k and then
/// answers it. Group k's flush covers only what was logged before the flush began, and
/// that flush began after the syncer's previous sync of `db` ended. So a creation at `t`
/// is owed by the first response after the log sync that *follows* the first log sync
/// ending at or after `t`; responses before that went out on flushes that began before
/// the creation and cannot refer to it. (With no log sync in the trace at all, the very
/// next response owes it.) A blob file that is never synced is flagged either way.
/// `existing`: what the data dir held when the trace began (an `O_CREAT` open of it
/// creates nothing).
///
/// `later_syncs` is how many log syncs after that first one may still answer groups
/// committed before the creation: 1 as above. With blob files it is 2: the committer
/// fsyncs a transaction's blobs when the transaction returns, before it hands the group on,
/// and up to two earlier groups (one being synced, the rest queued, all taken by the next
/// pass) may be flushed meanwhile — their flush writes the new pointer to the log too. That
/// window is why the default segment size must make blobs impossible (the test above),
/// not only synced.
pub(crate) fn audit(
    calls: &[Call],
    data_dir: &Path,
    cwd: &Path,
    existing: &[PathBuf],
    later_syncs: usize,
) -> (Vec<Node>, Vec<Ack>, Vec<Violation>) {
    let mut nodes: Vec<Node> = Vec::new();
    let mut live: HashMap<PathBuf, usize> = HashMap::new();
    let mut old: std::collections::HashSet<PathBuf> = existing.iter().cloned().collect();
    let mut dir_syncs: HashMap<PathBuf, Vec<(u64, u64)>> = HashMap::new();
    let mut global_syncs: Vec<(u64, u64)> = Vec::new();
    let mut acks = Vec::new();
    let resolve = |dirfd: Option<&String>, path: &str| -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            return normalize(p);
        }
        let base = dirfd
            .and_then(|d| decoration(d))
            .map_or_else(|| cwd.to_owned(), PathBuf::from);
        normalize(&base.join(p))
    };
    let create = |nodes: &mut Vec<Node>,
                  live: &mut HashMap<PathBuf, usize>,
                  path: PathBuf,
                  dir: bool,
                  how: String,
                  c: &Call|
     -> usize {
        if let Some(old) = live.remove(&path) {
            nodes[old].gone = Some(c.start);
        }
        nodes.push(Node {
            path: path.clone(),
            dir,
            how,
            tid: c.tid,
            created: (c.start, c.end),
            gone: None,
            origin: None,
            syncs: Vec::new(),
            writes: Vec::new(),
            closes: Vec::new(),
        });
        live.insert(path, nodes.len() - 1);
        nodes.len() - 1
    };
    for c in calls {
        let arg = |i: usize| c.args.get(i);
        let fd_path = || arg(0).and_then(|a| decoration(a)).map(PathBuf::from);
        match c.name.as_str() {
            "open" | "openat" | "openat2" | "creat" if c.ok() => {
                let flags = c.args.join(" ");
                if c.name != "creat" && !flags.contains("O_CREAT") {
                    continue;
                }
                let path = if let Some(p) = decoration(&c.ret) {
                    PathBuf::from(p)
                } else {
                    let (dirfd, name) = match c.name.as_str() {
                        "open" | "creat" => (None, arg(0)),
                        _ => (arg(0), arg(1)),
                    };
                    let Some(name) = name.and_then(|n| c_string(n)) else {
                        continue;
                    };
                    resolve(dirfd, &name)
                };
                if flags.contains("O_EXCL") || !(live.contains_key(&path) || old.contains(&path)) {
                    create(
                        &mut nodes,
                        &mut live,
                        path,
                        false,
                        format!("{}(O_CREAT)", c.name),
                        c,
                    );
                }
            }
            "mkdir" | "mkdirat" if c.ok() => {
                let (dirfd, name) = if c.name == "mkdir" {
                    (None, arg(0))
                } else {
                    (arg(0), arg(1))
                };
                if let Some(name) = name.and_then(|n| c_string(n)) {
                    let path = resolve(dirfd, &name);
                    create(&mut nodes, &mut live, path, true, c.name.clone(), c);
                }
            }
            "rename" | "renameat" | "renameat2" if c.ok() => {
                let (from, to) = if c.name == "rename" {
                    (
                        arg(0).and_then(|a| c_string(a)).map(|p| resolve(None, &p)),
                        arg(1).and_then(|a| c_string(a)).map(|p| resolve(None, &p)),
                    )
                } else {
                    (
                        arg(1)
                            .and_then(|a| c_string(a))
                            .map(|p| resolve(arg(0), &p)),
                        arg(3)
                            .and_then(|a| c_string(a))
                            .map(|p| resolve(arg(2), &p)),
                    )
                };
                let (Some(from), Some(to)) = (from, to) else {
                    continue;
                };
                let origin = live.remove(&from);
                let dir = origin.is_some_and(|o| nodes[o].dir);
                old.remove(&from);
                old.remove(&to);
                if let Some(o) = origin {
                    nodes[o].gone = Some(c.start);
                }
                let how = format!("{} from {}", c.name, from.display());
                let n = create(&mut nodes, &mut live, to, dir, how, c);
                nodes[n].origin = origin;
            }
            "unlink" | "unlinkat" | "rmdir" if c.ok() => {
                let (dirfd, name) = if c.name == "unlinkat" {
                    (arg(0), arg(1))
                } else {
                    (None, arg(0))
                };
                if let Some(name) = name.and_then(|n| c_string(n)) {
                    let path = resolve(dirfd, &name);
                    old.remove(&path);
                    if let Some(n) = live.remove(&path) {
                        nodes[n].gone = Some(c.start);
                    }
                }
            }
            "fsync" | "fdatasync" if c.ok() => {
                if let Some(path) = fd_path() {
                    if let Some(&n) = live.get(&path) {
                        nodes[n].syncs.push((c.start, c.end));
                    }
                    dir_syncs.entry(path).or_default().push((c.start, c.end));
                }
            }
            "sync" | "syncfs" if c.ok() => global_syncs.push((c.start, c.end)),
            "write" | "writev" | "pwrite64" | "pwritev" | "pwritev2" | "sendto" | "sendmsg"
            | "sendmmsg"
                if c.ret_num().is_some_and(|n| n > 0) =>
            {
                let Some(target) = arg(0).and_then(|a| decoration(a)) else {
                    continue;
                };
                if target.starts_with("TCP") {
                    let head = c
                        .args
                        .get(1)
                        .and_then(|a| a.find('"').map(|i| &a[i..]))
                        .and_then(c_string)
                        .map(|s| s.lines().next().unwrap_or_default().to_owned())
                        .unwrap_or_default();
                    acks.push(Ack {
                        at: c.start,
                        tid: c.tid,
                        socket: target.to_owned(),
                        head,
                    });
                } else if let Some(&n) = live.get(Path::new(target)) {
                    nodes[n].writes.push(c.end);
                }
            }
            "close" if c.ok() => {
                if let Some(&n) = fd_path().as_ref().and_then(|p| live.get(p)) {
                    nodes[n].closes.push((c.start, c.end));
                }
            }
            _ => {}
        }
    }

    // The syncs of `n`'s contents that count for a response at `at`.
    pub(crate) fn content_synced(nodes: &[Node], n: usize, at: u64, global: &[(u64, u64)]) -> bool {
        let node = &nodes[n];
        let mut after = node.created.1;
        // A file written and closed before the response must be synced after its last write.
        if let Some(&last) = node.writes.iter().filter(|&&w| w <= at).max() {
            if node.closes.iter().any(|&(s, e)| s >= last && e <= at) {
                after = after.max(last);
            }
        }
        let counts = |&(s, e): &(u64, u64)| s >= after && e <= at;
        node.syncs.iter().any(counts)
            || global.iter().any(counts)
            || node
                .origin
                .is_some_and(|o| content_synced(nodes, o, at, global))
    }

    // The daemon's group commit, seen through its syncs of the log: see `owed_from`.
    let mut log_syncs: Vec<(u64, u64)> = dir_syncs
        .get(&data_dir.join("db"))
        .cloned()
        .unwrap_or_default();
    log_syncs.sort_by_key(|&(_, end)| end);
    let owed_from = |created: u64| -> Option<u64> {
        if log_syncs.is_empty() {
            return Some(created); // no group commit to go by: the very next response
        }
        let x = log_syncs.iter().position(|&(_, end)| end >= created)?;
        log_syncs.get(x + later_syncs).map(|&(_, end)| end)
    };

    let mut violations = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if !node.path.starts_with(data_dir) {
            continue;
        }
        let Some(due) = owed_from(node.created.1) else {
            continue; // no response went out on a sync that could have covered it
        };
        let Some(ack) = acks
            .iter()
            .find(|a| a.at >= due && node.gone.is_none_or(|g| a.at < g))
        else {
            continue; // gone, or created after the last response: nothing to answer for
        };
        let mut missing = Vec::new();
        if !content_synced(&nodes, i, ack.at, &global_syncs) {
            let what = if node.dir {
                "the directory"
            } else {
                "its contents"
            };
            missing.push(if node.syncs.is_empty() && node.origin.is_none() {
                format!("{what}: never fsync'd")
            } else {
                format!("{what}: not fsync'd between its creation (or last write) and the response")
            });
        }
        let parent = node.path.parent().unwrap_or(Path::new("/"));
        let entry = dir_syncs.get(parent).is_some_and(|syncs| {
            syncs
                .iter()
                .chain(&global_syncs)
                .any(|&(s, e)| s >= node.created.1 && e <= ack.at)
        }) || global_syncs
            .iter()
            .any(|&(s, e)| s >= node.created.1 && e <= ack.at);
        if !entry {
            missing.push(format!(
                "directory entry: {} not fsync'd after the creation",
                parent.display()
            ));
        }
        if !missing.is_empty() {
            violations.push(Violation {
                node: node.clone(),
                ack: ack.clone(),
                missing,
            });
        }
    }
    (nodes, acks, violations)
}

/// A path inside the data dir for reports, blob files and snapshots folded together.
pub(crate) fn kind_of(path: &Path, data_dir: &Path) -> String {
    let Ok(rel) = path.strip_prefix(data_dir) else {
        return path.display().to_string();
    };
    let rel = rel.to_string_lossy();
    if rel.is_empty() {
        return "<the data dir>".into();
    }
    if rel.starts_with("blobs/") {
        return "blobs/*".into();
    }
    if let Some(snap) = rel.strip_prefix("snap.") {
        return if snap.ends_with(".generating") {
            "snap.*.generating".into()
        } else {
            "snap.*".into()
        };
    }
    rel.into_owned()
}

impl Audit {
    pub(crate) fn ms(&self, t: u64) -> String {
        format!("+{:.1} ms", t.saturating_sub(self.t0) as f64 / 1000.0)
    }

    pub(crate) fn thread(&self, tid: u32) -> String {
        match self.threads.get(&tid) {
            Some(name) => format!("tid {tid} \"{name}\""),
            None => format!("tid {tid}"),
        }
    }

    /// Blob files sled created during the run.
    pub(crate) fn blob_files(&self) -> Vec<&Node> {
        let blobs = self.data_dir.join("blobs");
        self.nodes
            .iter()
            .filter(|n| !n.dir && n.path.starts_with(&blobs))
            .collect()
    }

    /// What the daemon and sled did in the data dir, for the report and for reading.
    pub(crate) fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} responses on TCP sockets, {} add requests acknowledged, {} violations",
            self.phase,
            self.acks.len(),
            self.acked_adds,
            self.violations.len()
        );
        let mut created: BTreeMap<String, (usize, BTreeMap<String, usize>)> = BTreeMap::new();
        for n in self
            .nodes
            .iter()
            .filter(|n| n.path.starts_with(&self.data_dir))
        {
            let (count, by) = created.entry(kind_of(&n.path, &self.data_dir)).or_default();
            *count += 1;
            *by.entry(format!(
                "{} by {}",
                n.how.split(' ').next().unwrap(),
                self.thread(n.tid)
            ))
            .or_default() += 1;
        }
        let _ = writeln!(out, "created in the data dir:");
        for (kind, (count, by)) in &created {
            let by: Vec<String> = by.iter().map(|(k, v)| format!("{v}× {k}")).collect();
            let _ = writeln!(out, "  {kind}: {count} ({})", by.join(", "));
        }
        let _ = writeln!(
            out,
            "sync calls under the workspace (path: call × count by thread):"
        );
        for ((path, call, thread), count) in &self.syncs {
            let _ = writeln!(out, "  {path}: {call} ×{count} by {thread}");
        }
        let _ = writeln!(
            out,
            "blobs/ at the end of the workload: {} files",
            self.blobs_at_end.len()
        );
        out
    }

    /// The violations, one line each (blob files: the first few, then a count).
    pub(crate) fn report(&self) -> String {
        let mut out = format!("{}:\n", self.phase);
        let mut blobs = 0;
        for v in &self.violations {
            let is_blob = kind_of(&v.node.path, &self.data_dir) == "blobs/*";
            if is_blob {
                blobs += 1;
                if blobs > 5 {
                    continue;
                }
            }
            let _ =
                writeln!(
                out,
                "- {} ({} by {} at {}): {}; the response at {} ({}, {} on {} by {}) went out first",
                v.node.path.display(),
                v.node.how,
                self.thread(v.node.tid),
                self.ms(v.node.created.0),
                v.missing.join("; "),
                self.ms(v.ack.at),
                v.ack.at as f64 / 1e6,
                if v.ack.head.is_empty() { "?" } else { &v.ack.head },
                v.ack.socket,
                self.thread(v.ack.tid),
            );
        }
        if blobs > 5 {
            let _ = writeln!(out, "- … and {} more blob files like these", blobs - 5);
        }
        out
    }
}

//! The parts of the `flink` scenario: the Flink harness (a real Flink 2.3 cluster in one
//! JVM, driven over its stdin), the watcher run as a process, its `/metrics`, and the
//! daemon's change feed for one task manager.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::super::kube::cluster::{built, log, spawn_sibling, Killed};

/// How long the cluster may take to start (a JVM, a `JobManager`, four task managers): the
/// harness's own tests allow the same.
const FLINK_START: Duration = Duration::from_secs(90);

/// A running Flink cluster: [`Flink::stop`] ends it; dropped on an error path, it is
/// killed (`kill_on_drop`), so no JVM outlives the bench.
pub(super) struct Flink {
    child: Child,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
    pub(super) url: String,
}

impl Flink {
    /// The harness with task managers `task_managers`, four slots each, in `dir`.
    pub(super) async fn start(dir: &Path, task_managers: &[&str]) -> Result<Flink, String> {
        let runs = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !runs {
            return Err("java is not installed (Debian: default-jdk-headless maven)".into());
        }
        let harness = built("flink-2.3")?;
        let dir = dir.join("flink");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut child = tokio::process::Command::new("java")
            .arg(format!("-Djava.io.tmpdir={}", dir.display()))
            .arg("-Xmx768m")
            .arg("-jar")
            .arg(harness.join("harness.jar"))
            .args(["--rest-port", "0", "--slots", "4"])
            .args(["--taskmanagers", &task_managers.join(",")])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log(&dir, "flink.log")?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("java -jar harness.jar: {e}"))?;
        let stdin = child.stdin.take().ok_or("the harness's stdin")?;
        let stdout = child.stdout.take().ok_or("the harness's stdout")?;
        let mut flink = Flink {
            child,
            stdin,
            answers: BufReader::new(stdout).lines(),
            url: String::new(),
        };
        let ready = flink.answer(FLINK_START).await?;
        let port = ready
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .ok_or_else(|| format!("the harness said {ready:?}; its log: {}", dir.display()))?;
        flink.url = format!("http://127.0.0.1:{port}");
        Ok(flink)
    }

    async fn answer(&mut self, within: Duration) -> Result<String, String> {
        match tokio::time::timeout(within, self.answers.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err("the Flink harness exited (its log: flink/flink.log)".into()),
            Ok(Err(e)) => Err(format!("the Flink harness: {e}")),
            Err(_) => Err(format!("the Flink harness did not answer in {within:?}")),
        }
    }

    /// One command line and its answer, which must start with `expect`.
    async fn command(&mut self, line: &str, expect: &str) -> Result<String, String> {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| format!("the Flink harness: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("the Flink harness: {e}"))?;
        let answer = self.answer(Duration::from_secs(60)).await?;
        answer
            .strip_prefix(expect)
            .map(|rest| rest.trim().to_owned())
            .ok_or_else(|| format!("{line}: the harness answered {answer:?}"))
    }

    /// Submits a job of parallelism 4 whose subtask on `fail_on` throws `exception` 300 ms
    /// after it starts, `times` times: its job id.
    pub(super) async fn submit(
        &mut self,
        name: &str,
        fail_on: &str,
        exception: &str,
        times: u32,
    ) -> Result<String, String> {
        self.command(
            &format!("submit {name} 4 {fail_on} {exception} {times} 300"),
            &format!("JOB {name} "),
        )
        .await
    }

    /// Cancels `job`, until Flink says it ended.
    pub(super) async fn cancel(&mut self, job: &str) -> Result<(), String> {
        self.command(&format!("cancel {job}"), "CANCELLED ")
            .await
            .map(|_| ())
    }

    /// Stops the cluster (`stop`: the harness closes Flink and exits), killed if it takes
    /// more than 15 s.
    pub(super) async fn stop(mut self) {
        let _ = self.stdin.write_all(b"stop\n").await;
        let _ = self.stdin.flush().await;
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The watcher (`blocklist-flink`, next to the bench's binary) following the Flink REST
/// API at `flink` (named `bench`) for the daemon at `daemon`, polling every second, with
/// `args`; its log in `dir/<log_name>`. The process, and its `/metrics` URL.
pub(super) fn spawn_watcher(
    flink: &str,
    daemon: &str,
    args: &[&str],
    dir: &Path,
    log_name: &str,
) -> Result<(Killed, String), String> {
    let cluster = format!("bench={flink}");
    let all = [
        &["--flink", &cluster, "--daemon", daemon, "--poll", "1s"][..],
        args,
    ]
    .concat();
    let (watcher, url) = spawn_sibling("blocklist-flink", &all, dir, log_name)?;
    Ok((watcher, format!("{url}/metrics")))
}

/// One scrape of the watcher's `/metrics`.
pub(super) struct Scrape(String);

impl Scrape {
    pub(super) async fn of(http: &reqwest::Client, url: &str) -> Result<Scrape, String> {
        let text = http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .text()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        Ok(Scrape(text))
    }

    /// The sample of the series named with its labels exactly as the text has them; 0 when
    /// it is absent.
    pub(super) fn value(&self, series: &str) -> f64 {
        self.0
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .find(|(name, _)| *name == series)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// Histogram `name` (seconds): its cumulative bucket counts by upper bound, ascending.
    pub(super) fn histogram(&self, name: &str) -> Histogram {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut buckets: Vec<(f64, f64)> = self
            .0
            .lines()
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let le = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, value.parse().ok()?))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram {
            count: self.value(&format!("{name}_count")),
            sum: self.value(&format!("{name}_sum")),
            buckets,
        }
    }
}

/// A Prometheus histogram as scraped.
pub(super) struct Histogram {
    pub(super) count: f64,
    pub(super) sum: f64,
    buckets: Vec<(f64, f64)>,
}

impl Histogram {
    /// The bucket holding quantile `q`, in ms: (its lower bound, its upper bound). The true
    /// quantile lies between them.
    pub(super) fn quantile_ms(&self, q: f64) -> (f64, f64) {
        let rank = (q * self.count).ceil().max(1.0);
        let mut lower = 0.0;
        for (le, count) in &self.buckets {
            if *count >= rank {
                return (lower * 1000.0, le * 1000.0);
            }
            lower = *le;
        }
        (f64::NAN, f64::NAN)
    }

    /// The observations by bucket, the empty ones left out: `(8, 16] ms: 15`.
    pub(super) fn spread(&self) -> String {
        let mut parts = Vec::new();
        let (mut lower, mut below) = (0.0, 0.0);
        for (le, count) in &self.buckets {
            if *count > below {
                parts.push(format!(
                    "({} ms, {} ms]: {}",
                    lower * 1000.0,
                    le * 1000.0,
                    count - below
                ));
            }
            (lower, below) = (*le, *count);
        }
        parts.join(", ")
    }

    pub(super) fn mean_ms(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count * 1000.0
        } else {
            f64::NAN
        }
    }
}

/// The daemon's change feed for task manager `id`: each of its events (`added`, `expired`,
/// …) with when it arrived.
pub(super) struct Feed {
    events: mpsc::UnboundedReceiver<(String, Instant)>,
    task: tokio::task::JoinHandle<()>,
}

impl Feed {
    /// Follows the feed of the daemon at `base` from now on.
    pub(super) async fn follow(base: &str, id: &str) -> Result<Feed, String> {
        let mut feed = reqwest::Client::new()
            .get(format!("{base}/blocklist/events"))
            .send()
            .await
            .map_err(|e| format!("the daemon's feed: {e}"))?;
        if !feed.status().is_success() {
            return Err(format!("the daemon's feed: {}", feed.status()));
        }
        let (tx, events) = mpsc::unbounded_channel();
        let item = format!("\"id\":\"{id}\"");
        let task = tokio::spawn(async move {
            let mut text = String::new();
            while let Ok(Some(chunk)) = feed.chunk().await {
                let at = Instant::now();
                text.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = text.find("\n\n") {
                    let event: String = text.drain(..end + 2).collect();
                    if !event.contains("\"kind\":\"taskmanager\"") || !event.contains(&item) {
                        continue;
                    }
                    let name = event
                        .lines()
                        .find_map(|l| l.strip_prefix("event: "))
                        .unwrap_or_default()
                        .to_owned();
                    if tx.send((name, at)).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Feed { events, task })
    }

    /// When the next event came, which must be `name` (`added`, `expired`), within `within`.
    pub(super) async fn next(&mut self, name: &str, within: Duration) -> Result<Instant, String> {
        match tokio::time::timeout(within, self.events.recv()).await {
            Ok(Some((event, at))) if event == name => Ok(at),
            Ok(Some((event, _))) => Err(format!("the feed said {event}, not {name}")),
            Ok(None) => Err("the daemon's feed ended".into()),
            Err(_) => Err(format!(
                "no {name} event in the daemon's feed in {within:?}"
            )),
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads `job`'s exception history at `flink` every 10 ms until it holds `failures`
/// failures of task manager `tm` (entries and their concurrent exceptions): when the
/// answer that showed them arrived, and the newest one's own timestamp (unix ms) with the
/// wall clock's at that arrival.
pub(super) async fn until_visible(
    http: &reqwest::Client,
    flink: &str,
    job: &str,
    tm: &str,
    failures: usize,
) -> Result<(Instant, i64, i64), String> {
    let url = format!("{flink}/jobs/{job}/exceptions");
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(10));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let answer: Value = http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let (at, wall) = (Instant::now(), blocklistd::clock::now_ms());
        let times: Vec<i64> = answer["exceptionHistory"]["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|entry| {
                std::iter::once(entry).chain(
                    entry["concurrentExceptions"]
                        .as_array()
                        .into_iter()
                        .flatten(),
                )
            })
            .filter(|e| e["taskManagerId"] == tm)
            .filter_map(|e| e["timestamp"].as_i64())
            .collect();
        if times.len() >= failures {
            return Ok((at, times.into_iter().max().unwrap_or_default(), wall));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "job {job}: {} of {failures} failures of {tm} in its history after 60 s",
                times.len()
            ));
        }
    }
}

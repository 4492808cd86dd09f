//! One Flink cluster followed: every poll reads its jobs' exception histories, counts each
//! new failure once (`crate::window`), judges who stands out (`crate::judge`) and asks the
//! daemon to block them (`crate::report`).
//!
//! What is asked is level-triggered: each poll computes the sick task managers and nodes
//! from the window as it is, and asks for what the daemon does not hold yet. Nothing is
//! queued: a report the daemon could not take is computed again at a later poll, after a
//! backoff; a report it refused (a guardrail, the allowlist) is not asked again until the
//! evidence changes. Flink unreachable changes nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::filter::Filter;
use crate::flink::Flink;
use crate::history::Failure;
use crate::judge::{Rules, Verdict};
use crate::metrics::{labels, Metrics};
use crate::report::{cause_text, Daemon, Held, Report, Sent};
use crate::window::Window;

/// What the watcher asks for and how, the same for every cluster.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The reports' source is `<name>/<cluster>` (a `detector` token named `name` may
    /// report under it).
    pub name: String,
    pub poll: Duration,
    pub window: Duration,
    pub rules: Rules,
    pub filter: Filter,
    pub action: String,
    pub duration: Duration,
    pub dry_run: bool,
    /// Register Flink's task managers on their hosts in the daemon's membership.
    pub register: bool,
    /// How many entries Flink keeps of a job's exception history
    /// (`web.exception-history-size`).
    pub history_size: usize,
}

/// Most failure times a report's details carry (the newest).
const MAX_TIMES: usize = 32;
/// How long where a job runs is taken as known: it is read as soon as the job has a
/// counted failure, so the read is off the path of the failure that crosses a threshold.
const PLACEMENT_FRESH: Duration = Duration::from_secs(10);
/// Longest wait before asking the daemon again after it failed.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// A report the daemon could not take: when to ask again.
struct Backoff {
    next: Instant,
    wait: Duration,
}

pub struct Watcher {
    flink: Flink,
    daemon: Arc<Daemon>,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    source: String,
    window: Window,
    /// The newest entry seen per job: a history whose oldest entry is newer lost some.
    newest: HashMap<String, i64>,
    /// What this source holds, by kind and id: until when.
    held: HashMap<(&'static str, String), i64>,
    /// The evidence each held block was last checked on: new failures of a held task
    /// manager read the daemon again (an operator may have lifted the block since).
    held_on: HashMap<(&'static str, String), String>,
    /// Reports refused, with the evidence they were refused on.
    refused: HashMap<(&'static str, String), String>,
    backoff: HashMap<(&'static str, String), Backoff>,
    /// Jobs already logged as failing everywhere.
    everywhere: HashSet<String>,
    /// The nodes of sick task managers, as the daemon's membership says.
    nodes: HashMap<String, Option<String>>,
    /// Where each job with counted failures runs, and when that was read.
    placement: HashMap<String, (Instant, BTreeSet<String>)>,
    /// The registrations sent, to send only changes.
    registered: BTreeMap<String, String>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A duration as people write it (`10m`), for causes.
fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

impl Watcher {
    pub fn new(
        flink: Flink,
        daemon: Arc<Daemon>,
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
    ) -> Watcher {
        let source = format!("{}/{}", settings.name, flink.name);
        Watcher {
            window: Window::new(millis(settings.window)),
            flink,
            daemon,
            settings,
            metrics,
            source,
            newest: HashMap::new(),
            held: HashMap::new(),
            held_on: HashMap::new(),
            refused: HashMap::new(),
            backoff: HashMap::new(),
            everywhere: HashSet::new(),
            nodes: HashMap::new(),
            registered: BTreeMap::new(),
            placement: HashMap::new(),
        }
    }

    /// Polls for ever, every `poll`.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(self.settings.poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        loop {
            ticks.tick().await;
            match self.poll().await {
                Ok(()) => {
                    if failed_before {
                        tracing::info!(cluster = %self.flink.name, "Flink answers again");
                    }
                    failed_before = false;
                    self.metrics.polled(&self.flink.name, true);
                }
                Err(e) => {
                    if !failed_before {
                        tracing::warn!(cluster = %self.flink.name, error = %e, "cannot poll Flink; nothing changes until it answers");
                    }
                    failed_before = true;
                    self.metrics.polled(&self.flink.name, false);
                }
            }
        }
    }

    /// One poll: read, count, judge, report. `Err` when Flink did not answer.
    pub async fn poll(&mut self) -> Result<(), String> {
        let jobs = self.flink.jobs().await?;
        let followed: Vec<_> = jobs
            .jobs
            .into_iter()
            .filter(crate::history::JobSummary::followed)
            .collect();
        self.metrics
            .jobs
            .get_or_create(&labels(&[("cluster", &self.flink.name)]))
            .set(i64::try_from(followed.len()).unwrap_or(i64::MAX));
        // Only the jobs followed now are remembered.
        self.newest
            .retain(|job, _| followed.iter().any(|j| j.jid == *job));
        let mut names = HashMap::new();
        for job in &followed {
            // A job that ended since the overview has no history to read: the others still
            // count, and it is read again at the next poll if it is still there.
            let history = match self.flink.history(&job.jid).await {
                Ok(history) => history,
                Err(e) => {
                    tracing::debug!(cluster = %self.flink.name, job = %job.jid, error = %e, "cannot read the job's exception history");
                    continue;
                }
            };
            self.take_in(&job.jid, &job.name, &history);
            // When its failures were read: the start of the watcher's own part.
            names.insert(job.jid.clone(), (job.name.clone(), Instant::now()));
        }
        let now = now_ms();
        self.window.slide(now);
        // A block that ended paid for the failures before its end.
        let ended: Vec<_> = self
            .held
            .iter()
            .filter(|(_, end)| **end <= now)
            .map(|(key, end)| (key.clone(), *end))
            .collect();
        for ((kind, id), end) in ended {
            self.held.remove(&(kind, id.clone()));
            self.held_on.remove(&(kind, id.clone()));
            if kind == "taskmanagers" {
                self.window.pay(&id, end);
            }
        }
        let sick = self.judge().await;
        for (tm, (job, failures)) in &sick {
            let (name, read_at) = names
                .get(job)
                .map_or((job.as_str(), Instant::now()), |(name, at)| {
                    (name.as_str(), *at)
                });
            let report = self.task_manager_report(tm, job, name, failures);
            self.ask(report, read_at).await;
        }
        self.nodes_of_sick().await;
        if self.settings.register {
            self.register().await;
        }
        Ok(())
    }

    /// Counts the new failures of one job's history.
    fn take_in(&mut self, job: &str, name: &str, history: &crate::history::History) {
        let cluster = self.flink.name.clone();
        let newest_before = self.newest.get(job).copied();
        // Flink keeps the newest `history_size` entries: a full history none of whose
        // entries was seen before may have lost older ones (the watcher fell behind, or
        // started late). `truncated` says the answer itself was cut.
        let full = history.entries.len() >= self.settings.history_size;
        let all_new = history
            .oldest()
            .is_some_and(|oldest| newest_before.is_none_or(|before| oldest > before));
        if history.truncated || (full && all_new) {
            self.metrics
                .truncated
                .get_or_create(&labels(&[("cluster", &cluster)]))
                .inc();
            tracing::warn!(%cluster, job, name, "the job's exception history is cut short: failures between polls may have been lost; counting what is there");
        }
        if let Some(newest) = history.entries.iter().map(|e| e.timestamp).max() {
            self.newest.insert(job.to_owned(), newest);
        }
        let now = now_ms();
        for failure in history.failures(job).iter().rev() {
            let verdict = self.settings.filter.judge(failure);
            if !self.window.observe(failure, verdict.is_ok(), now) {
                continue;
            }
            let outcome = match verdict {
                Ok(()) => "counted",
                Err(why) => why.as_str(),
            };
            self.metrics
                .failures
                .get_or_create(&labels(&[("cluster", &cluster), ("outcome", outcome)]))
                .inc();
            if verdict.is_ok() {
                #[expect(
                    clippy::cast_precision_loss,
                    reason = "milliseconds of lag, far below 2^52"
                )]
                self.metrics
                    .lag_seconds
                    .observe((now - failure.timestamp).max(0) as f64 / 1000.0);
            }
            tracing::debug!(%cluster, job, task_manager = %failure.task_manager, exception = %failure.exception, outcome, "failure seen");
        }
    }

    /// The sick task managers, each with the job it failed most in and those failures.
    async fn judge(&mut self) -> BTreeMap<String, (String, Vec<Failure>)> {
        let jobs: Vec<(String, BTreeMap<String, usize>)> = self
            .window
            .counts()
            .map(|(job, counts)| (job.to_owned(), counts))
            .collect();
        let mut sick: BTreeMap<String, (String, Vec<Failure>)> = BTreeMap::new();
        let mut quiet = HashSet::new();
        self.placement
            .retain(|job, _| jobs.iter().any(|(counted, _)| counted == job));
        for (job, counts) in jobs {
            let candidates = !self.settings.rules.candidates(&counts).is_empty();
            // Who runs the job: never judged blind.
            let running = self.placement(&job, candidates).await;
            if !candidates {
                quiet.insert(job);
                continue;
            }
            let Some(running) = running else {
                continue;
            };
            match self.settings.rules.judge(&counts, &running) {
                Verdict::Sick(tms) => {
                    for tm in tms {
                        let failures: Vec<Failure> = self
                            .window
                            .failures(&job, &tm)
                            .into_iter()
                            .cloned()
                            .collect();
                        // A task manager sick in several jobs is reported for the one it
                        // failed in last (then the most): the freshest evidence, and the
                        // latest end.
                        let rank = |f: &[Failure]| (f.iter().map(|f| f.timestamp).max(), f.len());
                        let fresher = sick.get(&tm).is_none_or(|(_, f)| rank(&failures) > rank(f));
                        if fresher {
                            sick.insert(tm, (job.clone(), failures));
                        }
                    }
                }
                Verdict::Everywhere { failing, of } => {
                    if self.everywhere.insert(job.clone()) {
                        self.metrics
                            .failing_everywhere
                            .get_or_create(&labels(&[("cluster", &self.flink.name)]))
                            .inc();
                        tracing::warn!(cluster = %self.flink.name, job, failing, of, "the job fails on most of its task managers: its own failure, no task manager is blamed");
                    }
                }
                Verdict::Quiet => {
                    quiet.insert(job);
                }
            }
        }
        self.everywhere.retain(|job| !quiet.contains(job));
        sick
    }

    /// Where `job` runs, read again when not fresh. Without `needed` (no task manager to
    /// judge yet) a failed read is no matter: it is read ahead of the failure that will
    /// need it.
    async fn placement(&mut self, job: &str, needed: bool) -> Option<BTreeSet<String>> {
        if let Some((at, running)) = self.placement.get(job) {
            if at.elapsed() < PLACEMENT_FRESH {
                return Some(running.clone());
            }
        }
        match self.flink.running(job).await {
            Ok(running) => {
                let running: BTreeSet<String> = running.into_iter().collect();
                self.placement
                    .insert(job.to_owned(), (Instant::now(), running.clone()));
                Some(running)
            }
            Err(e) => {
                if needed {
                    tracing::warn!(cluster = %self.flink.name, job, error = %e, "cannot read where the job runs; judging it at the next poll");
                }
                None
            }
        }
    }

    fn task_manager_report(&self, tm: &str, job: &str, name: &str, failures: &[Failure]) -> Report {
        let newest = failures
            .iter()
            .map(|f| f.timestamp)
            .max()
            .unwrap_or_default();
        let last = failures.iter().max_by_key(|f| f.timestamp);
        let (exception, message) =
            last.map_or(("", ""), |f| (f.exception.as_str(), f.message.as_str()));
        let cause = cause_text(
            &format!(
                "{} task failures within {} in Flink job {name} ({job}) on {}: {exception}: {}",
                failures.len(),
                human(self.settings.window),
                self.flink.name,
                cause_text(message, 200),
            ),
            1000,
        );
        let times: Vec<String> = failures
            .iter()
            .rev()
            .take(MAX_TIMES)
            .map(|f| f.timestamp.to_string())
            .collect();
        let details = BTreeMap::from([
            ("cluster".to_owned(), self.flink.name.clone()),
            ("job".to_owned(), job.to_owned()),
            ("jobName".to_owned(), cause_text(name, 200)),
            ("exception".to_owned(), cause_text(exception, 200)),
            ("failures".to_owned(), times.join(" ")),
            ("window".to_owned(), human(self.settings.window)),
        ]);
        Report {
            kind: "taskmanagers",
            id: tm.to_owned(),
            action: self.settings.action.clone(),
            cause,
            end: newest.saturating_add(millis(self.settings.duration)),
            details,
        }
    }

    /// Asks the daemon for `report` unless this source holds it already (and no new
    /// failure came since it was checked), it was refused on the same evidence, or the
    /// daemon failed a moment ago.
    async fn ask(&mut self, report: Report, read_at: Instant) {
        let key = (report.kind, report.id.clone());
        let evidence = report.details.get("failures").cloned().unwrap_or_default();
        if self.held.contains_key(&key)
            && (self.settings.dry_run || self.held_on.get(&key) == Some(&evidence))
        {
            return;
        }
        if self.refused.get(&key) == Some(&evidence) {
            return;
        }
        if self
            .backoff
            .get(&key)
            .is_some_and(|b| b.next > Instant::now())
        {
            return;
        }
        let now = now_ms();
        if report.end <= now {
            return;
        }
        let outcome = match self.try_ask(&report).await {
            Ok(outcome) => {
                self.backoff.remove(&key);
                if self.held.contains_key(&key) {
                    self.held_on.insert(key.clone(), evidence.clone());
                } else {
                    self.held_on.remove(&key);
                }
                outcome
            }
            Err(e) => {
                let wait = self
                    .backoff
                    .get(&key)
                    .map_or(Duration::from_secs(1), |b| (b.wait * 2).min(MAX_BACKOFF));
                self.backoff.insert(
                    key.clone(),
                    Backoff {
                        next: Instant::now() + wait,
                        wait,
                    },
                );
                tracing::warn!(kind = report.kind, id = %report.id, error = %e, retry_in = ?wait, "the daemon did not take the report; asking again later");
                "error"
            }
        };
        if outcome == "refused" {
            self.refused.insert(key.clone(), evidence);
        }
        if matches!(outcome, "blocked" | "dry-run") {
            self.metrics
                .report_seconds
                .observe(read_at.elapsed().as_secs_f64());
        }
        self.metrics
            .reports
            .get_or_create(&labels(&[("kind", report.kind), ("outcome", outcome)]))
            .inc();
    }

    /// One attempt: the outcome's name, or why the daemon could not say.
    async fn try_ask(&mut self, report: &Report) -> Result<&'static str, String> {
        let key = (report.kind, report.id.clone());
        match self
            .daemon
            .held(report.kind, &report.id, &self.source)
            .await?
        {
            Held::Ours { end } => {
                self.held.insert(key, end);
                return Ok("held");
            }
            Held::No {
                last_end: Some(last_end),
            } if report.kind == "taskmanagers"
                && report_oldest(report).is_some_and(|oldest| oldest <= last_end) =>
            {
                self.held.remove(&key);
                // An earlier block covered some of these failures (it expired, or an
                // operator lifted it): they count toward no new one.
                self.window.pay(&report.id, last_end);
                tracing::info!(task_manager = %report.id, "failures before the end of its last block are paid for; counting what came after");
                return Ok("paid");
            }
            // Not (or no longer) ours: whatever was held before is not.
            Held::No { .. } | Held::Others => {
                self.held.remove(&key);
            }
        }
        if self.settings.dry_run {
            tracing::info!(kind = report.kind, id = %report.id, action = %report.action, cause = %report.cause, end = report.end, source = %self.source, "dry run: would block");
            self.held.insert(key, report.end);
            return Ok("dry-run");
        }
        match self.daemon.send(report, &self.source).await? {
            Sent::Blocked => {
                tracing::info!(kind = report.kind, id = %report.id, action = %report.action, cause = %report.cause, end = report.end, source = %self.source, "blocked");
                self.held.insert(key, report.end);
                Ok("blocked")
            }
            Sent::Refused(why) => {
                tracing::warn!(kind = report.kind, id = %report.id, refusal = %why, "the daemon refused the block; not asking again until more failures come");
                Ok("refused")
            }
        }
    }

    /// Blocks the nodes under enough sick task managers (those this source holds).
    async fn nodes_of_sick(&mut self) {
        let sick: Vec<String> = self
            .held
            .keys()
            .filter(|(kind, _)| *kind == "taskmanagers")
            .map(|(_, id)| id.clone())
            .collect();
        for tm in &sick {
            if self.nodes.get(tm).is_some_and(Option::is_some) {
                continue;
            }
            match self.daemon.node_of(tm).await {
                Ok(node) => {
                    self.nodes.insert(tm.clone(), node);
                }
                Err(e) => {
                    tracing::warn!(task_manager = %tm, error = %e, "cannot read the task manager's node");
                }
            }
        }
        self.nodes.retain(|tm, _| sick.contains(tm));
        let pairs: Vec<(&str, &str)> = self
            .nodes
            .iter()
            .filter_map(|(tm, node)| Some((tm.as_str(), node.as_deref()?)))
            .collect();
        let nodes = self.settings.rules.sick_nodes(pairs);
        for (node, mut tms) in nodes {
            if self.held.contains_key(&("nodes", node.clone())) {
                continue;
            }
            // A node's block rests on its task managers' blocks: each one still held, not
            // lifted by an operator since (whose failures are then paid for).
            if !self.settings.dry_run {
                let mut lifted = Vec::new();
                for tm in &tms {
                    match self.daemon.held("taskmanagers", tm, &self.source).await {
                        Ok(Held::Ours { .. }) => {}
                        Ok(Held::No { last_end }) => lifted.push((tm.clone(), last_end)),
                        Ok(Held::Others) => lifted.push((tm.clone(), None)),
                        Err(e) => {
                            tracing::warn!(%node, task_manager = %tm, error = %e, "cannot read the task manager's block; judging the node at the next poll");
                            lifted.push((tm.clone(), None));
                        }
                    }
                }
                for (tm, last_end) in lifted {
                    tms.remove(&tm);
                    self.held_on.remove(&("taskmanagers", tm.clone()));
                    if let Some(end) = self.held.remove(&("taskmanagers", tm.clone())) {
                        if let Some(last_end) = last_end {
                            self.window.pay(&tm, last_end.min(end));
                        }
                    }
                }
                if tms.len() < self.settings.rules.per_node {
                    continue;
                }
            }
            let end = tms
                .iter()
                .filter_map(|tm| self.held.get(&("taskmanagers", tm.clone())))
                .max()
                .copied()
                .unwrap_or_default();
            let list: Vec<&str> = tms.iter().map(String::as_str).collect();
            let report = Report {
                kind: "nodes",
                id: node.clone(),
                action: self.settings.action.clone(),
                cause: cause_text(
                    &format!(
                        "{} task managers on it blocked for repeated task failures within {} on Flink {}: {}",
                        tms.len(),
                        human(self.settings.window),
                        self.flink.name,
                        list.join(" "),
                    ),
                    1000,
                ),
                end,
                details: BTreeMap::from([
                    ("cluster".to_owned(), self.flink.name.clone()),
                    ("failures".to_owned(), list.join(" ")),
                    ("taskManagers".to_owned(), list.join(" ")),
                    ("window".to_owned(), human(self.settings.window)),
                ]),
            };
            self.ask(report, Instant::now()).await;
        }
    }

    /// Registers Flink's task managers on their hosts, when they changed.
    async fn register(&mut self) {
        let all = match self.flink.task_managers().await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(cluster = %self.flink.name, error = %e, "cannot list the task managers");
                return;
            }
        };
        let changed: Vec<(String, String)> = all
            .iter()
            .filter_map(|tm| Some((tm.id.clone(), tm.host()?.to_owned())))
            .filter(|(id, host)| self.registered.get(id) != Some(host))
            .collect();
        if changed.is_empty() {
            return;
        }
        match self.daemon.register(&changed).await {
            Ok(()) => {
                tracing::info!(cluster = %self.flink.name, count = changed.len(), "registered task managers on their hosts");
                self.registered.extend(changed);
            }
            Err(e) => {
                tracing::warn!(cluster = %self.flink.name, error = %e, "cannot register the task managers");
            }
        }
    }
}

/// The oldest failure time a report's details name.
fn report_oldest(report: &Report) -> Option<i64> {
    report
        .details
        .get("failures")?
        .split(' ')
        .filter_map(|t| t.parse().ok())
        .min()
}

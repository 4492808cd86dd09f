//! The result table: one row per scenario, ceiling and peer measurement, printed as text
//! and written as JSON for the record.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::load::Phase;
use crate::procstat::CpuUse;

/// What a row measured: our daemon, a ceiling, or a peer.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Ours,
    Ceiling,
    /// Redis, `appendfsync always`: the fastest durable store a team could use instead.
    Redis,
    /// etcd: the store with the daemon's guarantees (durable, time to live, watch).
    Etcd,
}

/// One target (docs/benchmarks.md, "Targets") and whether this run met it (`None`: not measurable here).
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub what: String,
    pub met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub role: Role,
    /// Operations per second (requests, transactions or commands), when the row has a rate.
    pub ops_per_s: Option<f64>,
    /// Items per second, for rows whose operations carry many items.
    pub items_per_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    /// CPU of the server process (daemon, ceiling server or redis-server), in cores.
    pub server_cpu: Option<f64>,
    /// CPU of the bench process over the same window, in cores.
    pub bench_cpu: Option<f64>,
    /// Server CPU microseconds per operation (or per item for batch rows).
    pub server_cpu_us_per_op: Option<f64>,
    pub ops: u64,
    pub errors: u64,
    pub ratio_ceiling: Option<f64>,
    pub ratio_redis: Option<f64>,
    pub ratio_etcd: Option<f64>,
    pub targets: Vec<Target>,
    /// Scenario-specific figures (RSS, disk, ready time, ...).
    pub extra: BTreeMap<String, f64>,
    pub note: String,
}

impl Row {
    pub fn new(scenario: &str, role: Role) -> Row {
        Row {
            scenario: scenario.to_owned(),
            role,
            ops_per_s: None,
            items_per_s: None,
            p50_ms: None,
            p99_ms: None,
            p999_ms: None,
            server_cpu: None,
            bench_cpu: None,
            server_cpu_us_per_op: None,
            ops: 0,
            errors: 0,
            ratio_ceiling: None,
            ratio_redis: None,
            ratio_etcd: None,
            targets: Vec::new(),
            extra: BTreeMap::new(),
            note: String::new(),
        }
    }

    /// A row filled from a load phase and the CPU over it. `per_item` reports the CPU cost
    /// per item rather than per request.
    pub fn from_phase(
        scenario: &str,
        role: Role,
        phase: &Phase,
        cpu: CpuUse,
        per_item: bool,
    ) -> Row {
        let mut row = Row::new(scenario, role);
        row.ops_per_s = Some(phase.ops_per_s());
        if per_item {
            row.items_per_s = Some(phase.items_per_s());
        }
        if phase.ops > 0 {
            row.p50_ms = Some(phase.ms(0.50));
            row.p99_ms = Some(phase.ms(0.99));
            row.p999_ms = Some(phase.ms(0.999));
            let units = if per_item { phase.items } else { phase.ops };
            row.server_cpu_us_per_op = Some(cpu.server_seconds * 1e6 / units.max(1) as f64);
        }
        row.server_cpu = Some(cpu.server);
        row.bench_cpu = Some(cpu.bench);
        row.record_others(cpu);
        row.ops = phase.ops;
        row.errors = phase.errors;
        if let Some(e) = &phase.first_error {
            row.add_note(&format!("{} errors, first: {e}", phase.errors));
        }
        row
    }

    /// Records the CPU other processes used during the measurement, and flags it when it
    /// was enough to distort the figures (a tenth of a core or more).
    pub fn record_others(&mut self, cpu: CpuUse) {
        self.extra.insert("other_cpu".into(), cpu.others);
        if cpu.others >= 0.1 {
            self.add_note(&format!(
                "WARNING: other processes used {:.0}% CPU during this measurement",
                cpu.others * 100.0
            ));
        }
    }

    pub fn add_note(&mut self, note: &str) {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(note);
    }

    pub fn target(&mut self, what: impl Into<String>, met: Option<bool>) {
        self.targets.push(Target {
            what: what.into(),
            met,
        });
    }
}

/// Machine facts printed with the table, so a number is never read without its context.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub mem_total_kb: u64,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map_or_else(|| "unknown".into(), |s| s.trim().to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_owned());
        let mem_total_kb = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0);
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            cpu_model,
            kernel,
            mem_total_kb,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub machine: &'a Machine,
    pub settings: BTreeMap<&'static str, String>,
    pub rows: &'a [Row],
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100_000.0 => format!("{:.0}k", v / 1000.0),
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
    }
}

fn ratio(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}x"))
}

fn targets(row: &Row) -> String {
    row.targets
        .iter()
        .map(|t| {
            let mark = match t.met {
                Some(true) => "MET",
                Some(false) => "MISSED",
                None => "n/a",
            };
            format!("{} {mark}", t.what)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The table as Markdown, which reads fine in a terminal and pastes into docs as is.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| scenario | role | ops/s | items/s | p50 ms | p99 ms | p999 ms | server CPU | bench CPU \
         | server µs/op | ours/ceiling | ours/Redis | ours/etcd | targets | note |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for row in rows {
        let role = match row.role {
            Role::Ours => "ours",
            Role::Ceiling => "ceiling",
            Role::Redis => "Redis",
            Role::Etcd => "etcd",
        };
        let extra = row
            .extra
            .iter()
            .map(|(k, v)| format!("{k}={}", num(Some(*v))))
            .collect::<Vec<_>>()
            .join(" ");
        let note = match (extra.is_empty(), row.note.is_empty()) {
            (true, _) => row.note.clone(),
            (false, true) => extra,
            (false, false) => format!("{extra}; {}", row.note),
        };
        let _ = writeln!(
            out,
            "| {} | {role} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.scenario,
            num(row.ops_per_s),
            num(row.items_per_s),
            num(row.p50_ms),
            num(row.p99_ms),
            num(row.p999_ms),
            row.server_cpu
                .map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
            row.bench_cpu
                .map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
            num(row.server_cpu_us_per_op),
            ratio(row.ratio_ceiling),
            ratio(row.ratio_redis),
            ratio(row.ratio_etcd),
            targets(row),
            note.replace('|', "/"),
        );
    }
    out
}

pub fn write_json(path: &Path, report: &impl Serialize) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(path, json + "\n")
}

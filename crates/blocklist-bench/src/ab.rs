//! `blocklist-bench ab`: two daemon builds measured in one run.
//!
//! Each round runs the chosen scenarios against every build in turn — the order flips from
//! one round to the next (A B, B A, A B, …), so a drift of the machine over the run weighs
//! on both alike — each build on fresh data dirs and a fixture of its own loaded anew every
//! round. The summary gives, per scenario and figure of the daemon's own rows (ceilings and
//! peers are left out), the median over the rounds for each build and the ratio of the
//! second to the first. See docs/benchmarks.md, "A/B: two builds in one run".

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::report::{Role, Row};
use crate::scenarios::{Bench, RUN_ORDER};

/// One build under comparison.
pub struct Arm {
    pub label: String,
    pub bench: Bench,
}

/// The daemon's rows of one build in one round.
#[derive(Debug, Serialize)]
pub struct RoundRows {
    pub round: usize,
    pub label: String,
    pub rows: Vec<Row>,
}

/// One figure of one scenario: each build's median over the rounds, and the ratio.
#[derive(Debug, Serialize)]
pub struct Compared {
    pub scenario: String,
    pub figure: String,
    /// Per build, in the order given: the median, and every round's value.
    pub medians: Vec<Option<f64>>,
    pub values: Vec<Vec<f64>>,
    /// The second build's median ÷ the first's.
    pub ratio: Option<f64>,
}

/// Runs `scenarios` (in the order `all` runs them) `rounds` times against each arm,
/// alternating; returns every round's rows and whether a scenario failed.
pub async fn run(arms: &mut [Arm], scenarios: &[String], rounds: usize) -> (Vec<RoundRows>, bool) {
    let chosen: Vec<&str> = RUN_ORDER
        .iter()
        .copied()
        .filter(|s| scenarios.iter().any(|c| c == s))
        .collect();
    let mut all = Vec::new();
    let mut failed = false;
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..arms.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for i in order {
            let arm = &mut arms[i];
            // A fixture of its own every round: footprint and restart measure a fresh load.
            arm.bench.drop_fixture();
            let mut rows = Vec::new();
            for scenario in &chosen {
                eprintln!(
                    "blocklist-bench ab: round {round}/{rounds}, {}: {scenario}",
                    arm.label
                );
                let (r, scenario_failed) = arm.bench.run_or_row(scenario).await;
                rows.extend(r.into_iter().filter(|row| row.role == Role::Ours));
                failed |= scenario_failed;
            }
            all.push(RoundRows {
                round,
                label: arm.label.clone(),
                rows,
            });
        }
    }
    (all, failed)
}

/// The figures of a row by name: the columns with a value, then the scenario's own.
fn figures(row: &Row) -> Vec<(String, f64)> {
    let columns = [
        ("ops_s", row.ops_per_s),
        ("items_s", row.items_per_s),
        ("p50_ms", row.p50_ms),
        ("p99_ms", row.p99_ms),
        ("p999_ms", row.p999_ms),
        ("server_us_per_op", row.server_cpu_us_per_op),
    ];
    columns
        .into_iter()
        .filter_map(|(name, v)| Some((name.to_owned(), v?)))
        .chain(row.extra.iter().map(|(k, v)| (k.clone(), *v)))
        .collect()
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some(f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])),
    }
}

/// Medians and ratios of every figure, by scenario (in run order) and figure name. A
/// scenario with several rows of its own (`feed`, one per subscriber count) names them
/// `scenario#k`, k from 1, in the order the scenario reports them.
pub fn compare(labels: &[String], rounds: &[RoundRows]) -> Vec<Compared> {
    // (scenario key, figure) → per arm, the values of every round.
    let mut table: BTreeMap<(usize, String, String), Vec<Vec<f64>>> = BTreeMap::new();
    for r in rounds {
        let Some(arm) = labels.iter().position(|l| *l == r.label) else {
            continue;
        };
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for row in &r.rows {
            let k = seen.entry(row.scenario.as_str()).or_default();
            *k += 1;
            let order = RUN_ORDER
                .iter()
                .position(|s| *s == row.scenario)
                .unwrap_or(RUN_ORDER.len());
            let scenario = if *k == 1 {
                row.scenario.clone()
            } else {
                format!("{}#{k}", row.scenario)
            };
            for (figure, value) in figures(row) {
                table
                    .entry((order, scenario.clone(), figure))
                    .or_insert_with(|| vec![Vec::new(); labels.len()])[arm]
                    .push(value);
            }
        }
    }
    table
        .into_iter()
        .map(|((_, scenario, figure), values)| {
            let medians: Vec<Option<f64>> = values.iter().map(|v| median(v)).collect();
            let ratio = match (medians.first(), medians.get(1)) {
                (Some(Some(a)), Some(Some(b))) if *a != 0.0 => Some(b / a),
                _ => None,
            };
            Compared {
                scenario,
                figure,
                medians,
                values,
                ratio,
            }
        })
        .collect()
}

fn number(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 1000.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// The comparison as Markdown: a line per scenario and figure, each build's median with
/// its rounds in brackets, and the ratio.
pub fn table(labels: &[String], compared: &[Compared]) -> String {
    let mut out = String::from("| scenario | figure |");
    for label in labels {
        let _ = write!(out, " {label} (median [rounds]) |");
    }
    out.push_str(" ratio |\n|---|---|");
    for _ in labels {
        out.push_str("---:|");
    }
    out.push_str("---:|\n");
    for c in compared {
        let _ = write!(out, "| {} | {} |", c.scenario, c.figure);
        for (median, values) in c.medians.iter().zip(&c.values) {
            let rounds: Vec<String> = values.iter().map(|v| number(Some(*v))).collect();
            let _ = write!(out, " {} [{}] |", number(*median), rounds.join(" · "));
        }
        let ratio = c.ratio.map_or("-".into(), |r| format!("{r:.2}x"));
        let _ = writeln!(out, " {ratio} |");
    }
    out
}

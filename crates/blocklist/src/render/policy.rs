//! The guardrail policy (`policy show`, `policy set`) and where each kind stands against
//! it (`policy status`).

use serde::Deserialize;

use super::table;

/// `GET /policy`: the guardrail policy.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    pub nodes: KindPolicyView,
    pub task_managers: KindPolicyView,
    pub min_registered: u64,
    #[serde(default)]
    pub max_block_duration_secs: Option<u64>,
    pub permanent_blocks_allowed: bool,
}

/// One kind in `GET /policy`; `None` is a guard that is off.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindPolicyView {
    #[serde(default)]
    pub max_blocked_percent: Option<u64>,
    #[serde(default)]
    pub max_evacuating_percent: Option<u64>,
    #[serde(default)]
    pub max_blocked: Option<u64>,
    #[serde(default)]
    pub evacuations: Option<RateView>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateView {
    pub per_minute: u64,
    pub burst: u64,
}

/// `GET /policy/status`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatusView {
    pub task_managers: KindStatusView,
    pub nodes: KindStatusView,
    pub min_registered: u64,
    #[serde(default)]
    pub max_block_duration_secs: Option<u64>,
    pub permanent_blocks_allowed: bool,
}

/// One kind in `GET /policy/status`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindStatusView {
    pub items: u64,
    #[serde(default)]
    pub max_blocked: Option<u64>,
    #[serde(default)]
    pub headroom: Option<u64>,
    pub registered: u64,
    pub blocked_share: ShareView,
    pub evacuating_share: ShareView,
    #[serde(default)]
    pub evacuations: Option<EvacuationsView>,
}

/// A share cap in `GET /policy/status`: registered ids it counts, against the cap.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareView {
    pub current: u64,
    #[serde(default)]
    pub percent: Option<u64>,
    /// `None` when off, or while fewer than `minRegistered` ids are registered.
    #[serde(default)]
    pub cap: Option<u64>,
    #[serde(default)]
    pub headroom: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvacuationsView {
    pub per_minute: u32,
    pub burst: u32,
    pub available: u32,
}

/// `secs` as humantime writes it (`1day`, `12h`), which `--max-block-duration` reads back.
fn duration(secs: u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// Where the guardrails stand: per kind a line on items, the count cap and the rate, and
/// one line per share cap; then one for durations.
pub fn policy_status_text(status: &PolicyStatusView) -> String {
    let share = |name: &str, share: &ShareView, registered: u64| {
        let cap = match (share.percent, share.cap, share.headroom) {
            (None, _, _) => "no cap".to_owned(),
            (Some(percent), Some(cap), Some(headroom)) => {
                format!("cap {percent}% = {cap} ({headroom} more allowed)")
            }
            (Some(percent), _, _) => format!(
                "cap {percent}%, applies from {} registered",
                status.min_registered.max(1)
            ),
        };
        format!(
            "  {name}: {} of {registered} registered; {cap}\n",
            share.current
        )
    };
    let kind = |name: &str, kind: &KindStatusView| {
        let items = match kind.items {
            1 => "1 item".to_owned(),
            n => format!("{n} items"),
        };
        let cap = match (kind.max_blocked, kind.headroom) {
            (Some(cap), Some(headroom)) => format!("cap {cap} ({headroom} more allowed)"),
            _ => "no cap".to_owned(),
        };
        let evacuations = match &kind.evacuations {
            Some(e) => format!(
                "evacuations {}/min, bursts of {}: {} allowed now",
                e.per_minute, e.burst, e.available
            ),
            None => "no evacuation limit".to_owned(),
        };
        format!(
            "{name}: {items}, {cap}; {evacuations}\n{}{}",
            share("blocked", &kind.blocked_share, kind.registered),
            share("evacuating", &kind.evacuating_share, kind.registered),
        )
    };
    let longest = match status.max_block_duration_secs {
        Some(secs) => format!("at most {}", duration(secs)),
        None => "no longest".to_owned(),
    };
    let permanent = if status.permanent_blocks_allowed {
        "permanent blocks allowed"
    } else {
        "permanent blocks not allowed"
    };
    format!(
        "{}{}blocks: {longest}; {permanent}\n",
        kind("nodes", &status.nodes),
        kind("task managers", &status.task_managers),
    )
}

/// The policy: a table of the per-kind settings, then the global ones, each named as the
/// flag of `policy set` that changes it (`--nodes-max-blocked`, `--min-registered`).
pub fn policy_table(policy: &PolicyView) -> String {
    fn or_off(value: Option<u64>) -> String {
        value.map_or_else(|| "off".to_owned(), |v| v.to_string())
    }
    let kinds = [&policy.nodes, &policy.task_managers];
    let row = |name: &str, cell: &dyn Fn(&KindPolicyView) -> String| {
        std::iter::once(name.to_owned())
            .chain(kinds.iter().map(|k| cell(k)))
            .collect::<Vec<String>>()
    };
    let rows = [
        row("max-blocked-percent", &|k| or_off(k.max_blocked_percent)),
        row("max-evacuating-percent", &|k| {
            or_off(k.max_evacuating_percent)
        }),
        row("max-blocked", &|k| or_off(k.max_blocked)),
        row("evacuations-per-minute", &|k| {
            or_off(k.evacuations.as_ref().map(|r| r.per_minute))
        }),
        // No rate, no burst: "-" rather than "off", which the flag does not take.
        row("evacuation-burst", &|k| {
            k.evacuations
                .as_ref()
                .map_or_else(|| "-".to_owned(), |r| r.burst.to_string())
        }),
    ];
    let longest = policy
        .max_block_duration_secs
        .map_or_else(|| "off".to_owned(), duration);
    let permanent = if policy.permanent_blocks_allowed {
        "allowed"
    } else {
        "forbidden"
    };
    format!(
        "{}min-registered: {}\nmax-block-duration: {longest}\npermanent-blocks: {permanent}\n",
        table(&["SETTING", "NODES", "TASKMANAGERS"], &rows),
        policy.min_registered
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policy_status_lines() {
        let status: PolicyStatusView = serde_json::from_value(json!({
            "taskManagers": {"items": 0, "maxBlocked": null, "headroom": null, "registered": 20,
                "blockedShare": {"current": 7, "percent": 50, "cap": 10, "headroom": 3},
                "evacuatingShare": {"current": 2, "percent": null, "cap": null, "headroom": null},
                "evacuations": null},
            "nodes": {"items": 18, "maxBlocked": 20, "headroom": 2, "registered": 4,
                "blockedShare": {"current": 1, "percent": 50, "cap": null, "headroom": null},
                "evacuatingShare": {"current": 0, "percent": 20, "cap": null, "headroom": null},
                "evacuations": {"perMinute": 6, "burst": 6, "available": 4}},
            "minRegistered": 10,
            "maxBlockDurationSecs": 86400,
            "permanentBlocksAllowed": false
        }))
        .unwrap();
        assert_eq!(
            policy_status_text(&status),
            "nodes: 18 items, cap 20 (2 more allowed); evacuations 6/min, bursts of 6: 4 \
             allowed now\n  \
             blocked: 1 of 4 registered; cap 50%, applies from 10 registered\n  \
             evacuating: 0 of 4 registered; cap 20%, applies from 10 registered\n\
             task managers: 0 items, no cap; no evacuation limit\n  \
             blocked: 7 of 20 registered; cap 50% = 10 (3 more allowed)\n  \
             evacuating: 2 of 20 registered; no cap\n\
             blocks: at most 1day; permanent blocks not allowed\n"
        );
    }

    #[test]
    fn policy_rows_are_named_as_the_flags_that_set_them() {
        let policy: PolicyView = serde_json::from_value(json!({
            "nodes": {"maxBlockedPercent": 50, "maxEvacuatingPercent": 20, "maxBlocked": null,
                      "evacuations": null},
            "taskManagers": {"maxBlockedPercent": null, "maxEvacuatingPercent": null,
                             "maxBlocked": 7, "evacuations": {"perMinute": 60, "burst": 30}},
            "minRegistered": 10,
            "maxBlockDurationSecs": 43200,
            "permanentBlocksAllowed": true
        }))
        .unwrap();
        assert_eq!(
            policy_table(&policy),
            "SETTING                 NODES  TASKMANAGERS\n\
             max-blocked-percent     50     off\n\
             max-evacuating-percent  20     off\n\
             max-blocked             off    7\n\
             evacuations-per-minute  off    60\n\
             evacuation-burst        -      30\n\
             min-registered: 10\n\
             max-block-duration: 12h\n\
             permanent-blocks: allowed\n"
        );
    }
}

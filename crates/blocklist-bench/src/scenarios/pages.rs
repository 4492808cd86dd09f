//! `list-pages`: a walk of the fixture's whole blocklist in pages of 1,000
//! (`GET /blocklist?limit=1000`, then each page's `continue` token), one page at a time:
//! each page's latency, and the daemon's memory during the walk against before it.

use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::client::{expect_status, Http};
use crate::procstat::{self, CpuWindow};
use crate::report::{Role, Row};

use super::Bench;

/// Entries a page.
const PAGE: usize = 1_000;

impl Bench {
    pub(super) async fn list_pages(&mut self) -> Result<Vec<Row>, String> {
        let fixture = self.fixture().await?;
        let (addr, pid, items) = (fixture.server.addr, fixture.server.pid(), fixture.items);
        // What the daemon holds at rest, once the load's garbage is handed back.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = procstat::rss_bytes(pid).unwrap_or(0);
        let mut http = Http::connect(addr).await?;
        let mut latencies = Vec::with_capacity(items / PAGE + 1);
        let (mut listed, mut most) = (0, before);
        let mut path = format!("/blocklist?limit={PAGE}");
        let cpu = CpuWindow::start(&[pid]);
        let started = Instant::now();
        loop {
            let sent = Instant::now();
            let (status, headers, body) = http.get_with_headers(&path).await?;
            latencies.push(sent.elapsed());
            let (_, body) = expect_status((status, body), &[StatusCode::OK])?;
            let page: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| format!("a page is not JSON: {e}"))?;
            listed += ["blockedTaskManagers", "blockedNodes"]
                .iter()
                .map(|k| page[k].as_array().map_or(0, Vec::len))
                .sum::<usize>();
            most = most.max(procstat::rss_bytes(pid).unwrap_or(0));
            let Some(token) = headers.get("x-blocklist-continue") else {
                break;
            };
            let token = token.to_str().map_err(|e| format!("the token: {e}"))?;
            path = format!("/blocklist?limit={PAGE}&continue={token}");
        }
        let walk = started.elapsed();
        let cpu = cpu.stop();
        if listed != items {
            return Err(format!("the walk listed {listed} items, expected {items}"));
        }
        latencies.sort();
        let at = |q: f64| {
            let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len());
            latencies[i - 1].as_secs_f64() * 1000.0
        };
        let mut ours = Row::new("list-pages", Role::Ours);
        ours.ops = latencies.len() as u64;
        ours.ops_per_s = Some(latencies.len() as f64 / walk.as_secs_f64());
        ours.items_per_s = Some(items as f64 / walk.as_secs_f64());
        ours.p50_ms = Some(at(0.5));
        ours.p99_ms = Some(at(0.99));
        ours.p999_ms = Some(at(0.999));
        ours.server_cpu = Some(cpu.server);
        ours.server_cpu_us_per_op = Some(cpu.server_seconds * 1e6 / latencies.len() as f64);
        let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
        let growth = most as f64 / before.max(1) as f64;
        ours.extra.insert("rss_before_mb".into(), mb(before));
        ours.extra.insert("rss_walk_max_mb".into(), mb(most));
        ours.extra.insert("rss_walk_ratio".into(), growth);
        ours.extra.insert("walk_s".into(), walk.as_secs_f64());
        ours.target("page p99 ≤20 ms", ours.p99_ms.map(|p| p <= 20.0));
        ours.target("RSS during ≤1.1× before", Some(growth <= 1.1));
        ours.add_note(&format!(
            "{items} items in {} pages of {PAGE}, one at a time on 1 connection, each \
             following the page before's token; RSS sampled after every page",
            latencies.len()
        ));
        Ok(vec![ours])
    }
}

//! The read scenarios: `check` (against the shared fixture) and `list` (on a fresh daemon).

use hyper::{Method, StatusCode};

use crate::client::{expect_status, Http};
use crate::dataset::{self, Registration};
use crate::load::Rng;
use crate::procstat;
use crate::report::{Role, Row};

use super::fixture::fixture_item;
use super::reference::ratio;
use super::workers::{http_workers, HttpWorker, Req};
use super::Bench;

/// The daemon the check scenarios ask, and whom they ask about.
pub(super) struct CheckTarget {
    pub(super) addr: std::net::SocketAddr,
    pub(super) pid: u32,
    pub(super) items: usize,
    pub(super) registered: usize,
    /// The daemon has no membership: point reads stand in for checks.
    pub(super) fallback: bool,
    pub(super) note: String,
}

impl CheckTarget {
    /// Each worker's requests: the check of a random registered task manager.
    pub(super) fn requests(&self) -> impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send> {
        let (registered, fallback) = (self.registered as u64, self.fallback);
        move |w| {
            let mut rng = Rng::new(w as u64);
            Box::new(move || check_request(fallback, rng.below(registered)))
        }
    }
}

/// The check of registered task manager `tm-{r}` (a point read of it: `fallback`).
pub(super) fn check_request(fallback: bool, r: u64) -> Req {
    let (path, ok): (String, &'static [StatusCode]) = if fallback {
        (
            format!("/blocklist/taskmanagers/tm-{r}"),
            &[StatusCode::OK, StatusCode::NOT_FOUND],
        )
    } else {
        (
            format!("/blocklist/check/taskmanagers/tm-{r}"),
            &[StatusCode::OK],
        )
    };
    Req {
        method: Method::GET,
        path,
        body: None,
        items: 1,
        ok,
        idempotency_key: None,
    }
}

/// The concurrent listers of the `list` scenario's memory measurement.
const LISTERS: usize = 4;

impl Bench {
    /// The fixture, with its task managers registered: what the check scenarios ask about.
    pub(super) async fn check_target(&mut self) -> Result<CheckTarget, String> {
        let fixture = self.fixture().await?;
        let registered = fixture.registered;
        let nodes = (registered / 10).max(1);
        if fixture.registration.is_none() {
            fixture.registration =
                Some(dataset::register(fixture.server.addr, registered, nodes).await?);
        }
        let (fallback, note) = match fixture.registration.as_ref().expect("set above") {
            Registration::Done { count, elapsed } => (
                false,
                format!(
                    "{count} task managers registered on {nodes} nodes in {:.2} s",
                    elapsed.as_secs_f64()
                ),
            ),
            Registration::Unsupported(status) => (
                true,
                format!(
                    "FALLBACK: PUT /taskmanagers answered {status}, so these are point reads \
                     GET /blocklist/taskmanagers/{{id}} (200 or 404), not effective checks"
                ),
            ),
        };
        Ok(CheckTarget {
            addr: fixture.server.addr,
            pid: fixture.server.pid(),
            items: fixture.items,
            registered,
            fallback,
            note,
        })
    }

    /// `check`: effective checks of random registered task managers against the fixture.
    pub(super) async fn check(&mut self) -> Result<Vec<Row>, String> {
        let concurrency = self.settings.concurrency;
        let target = self.check_target().await?;
        let (addr, pid, items, registered) =
            (target.addr, target.pid, target.items, target.registered);
        let reg_note = &target.note;
        let workers = http_workers(addr, concurrency, target.requests()).await?;
        let (workers, phase, cpu) = self.measure(workers, &[pid]).await;
        let paced = self.paced_half(workers, &phase).await;
        let mut ours = Row::from_phase("check", Role::Ours, &phase, cpu, false);
        paced.annotate(&mut ours, 2.0);
        let ceiling = self.http_ceiling_get(registered as u64, paced.rate).await?;
        let now = blocklistd::clock::now_ms();
        let redis = self
            .redis_check(items, fixture_item(items, now), registered as u64)
            .await?;
        let etcd = self
            .etcd_check(items, fixture_item(items, now), registered as u64)
            .await?;
        ours.ratio_ceiling = ratio(ours.ops_per_s, ceiling.ops_per_s);
        ours.ratio_redis = redis
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.ratio_etcd = etcd
            .as_ref()
            .and_then(|p| ratio(ours.ops_per_s, p.ops_per_s));
        ours.target("≥0.8× GET ceiling", ours.ratio_ceiling.map(|r| r >= 0.8));
        ours.target("≥1.5× etcd", ours.ratio_etcd.map(|r| r >= 1.5));
        ours.target("p99 ≤2 ms", ours.p99_ms.map(|p| p <= 2.0));
        ours.add_note(&format!(
            "{concurrency} connections, {items} items blocked, random of {registered} task managers; {reg_note}"
        ));
        Ok(vec![
            ours,
            ceiling,
            redis.unwrap_or_else(|| self.redis_skipped("check")),
            etcd.unwrap_or_else(|| self.etcd_skipped("check")),
        ])
    }

    /// `list`: `GET /blocklist` of items/10 items, one request at a time; then [`LISTERS`]
    /// at once, for memory.
    pub(super) async fn list(&mut self) -> Result<Vec<Row>, String> {
        let (server, _dir) = self.fresh_daemon("list").await?;
        let count = (self.settings.items / 10).max(2);
        dataset::bulk_add(
            server.addr,
            count,
            fixture_item(count, blocklistd::clock::now_ms()),
        )
        .await?;
        let loaded_rss = procstat::rss_bytes(server.pid());
        let mut http = Http::connect(server.addr).await?;
        let (_, body) = expect_status(http.get("/blocklist").await?, &[StatusCode::OK])?;
        let listing: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("listing is not JSON: {e}"))?;
        let listed = ["blockedTaskManagers", "blockedNodes"]
            .iter()
            .map(|k| listing[k].as_array().map_or(0, Vec::len))
            .sum::<usize>();
        if listed != count {
            return Err(format!(
                "GET /blocklist listed {listed} items, expected {count}"
            ));
        }
        let workers = vec![HttpWorker {
            http,
            next: Box::new(|| Req {
                method: Method::GET,
                path: "/blocklist".into(),
                body: None,
                items: 1,
                ok: &[StatusCode::OK],
                idempotency_key: None,
            }),
        }];
        let (_, phase, cpu) = self.measure(workers, &[server.pid()]).await;
        let mut ours = Row::from_phase("list", Role::Ours, &phase, cpu, false);
        let mb = |b: Option<u64>| b.unwrap_or(0) as f64 / (1024.0 * 1024.0);
        ours.extra
            .insert("rss_mb".into(), mb(procstat::rss_bytes(server.pid())));
        ours.extra.insert(
            "peak_rss_mb".into(),
            mb(procstat::peak_rss_bytes(server.pid())),
        );
        ours.extra
            .insert("body_mb".into(), body.len() as f64 / (1024.0 * 1024.0));
        ours.extra.insert("rss_loaded_mb".into(), mb(loaded_rss));
        // Then several listers at once: a body built whole costs each of them the whole
        // list, a streamed one a few chunks. The peak after them shows which.
        let listers = (0..LISTERS).map(|_| Http::connect(server.addr));
        let mut tasks = Vec::new();
        for http in listers {
            let mut http = http.await?;
            let expected = body.len();
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let (_, got) = expect_status(http.get("/blocklist").await?, &[StatusCode::OK])?;
                    if got.len() != expected {
                        return Err(format!(
                            "a concurrent GET /blocklist got {} bytes, expected {expected}",
                            got.len()
                        ));
                    }
                }
                Ok(())
            }));
        }
        for task in tasks {
            task.await.map_err(|e| format!("a lister failed: {e}"))??;
        }
        ours.extra.insert(
            format!("peak_rss_{LISTERS}_listers_mb"),
            mb(procstat::peak_rss_bytes(server.pid())),
        );
        ours.target("p99 ≤300 ms", ours.p99_ms.map(|p| p <= 300.0));
        ours.add_note(&format!(
            "{count} items (half nodes), 1 connection, sequential; then {LISTERS} concurrent \
             listers × 3 for peak_rss_{LISTERS}_listers_mb"
        ));
        Ok(vec![ours])
    }
}

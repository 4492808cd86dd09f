//! `failover` (on etcd only: `--daemon-arg=--store=etcd`; not part of `all`): three daemons
//! on one prefix. `--restarts` times, the writer is killed (SIGKILL) while a client adds
//! through another daemon, retrying each 503; the figure is the time from the kill to the
//! first add acknowledged after it. The killed daemon then starts again, as a replica.

use std::time::{Duration, Instant};

use hyper::body::Bytes;
use hyper::{Method, StatusCode};

use crate::client::Http;
use crate::report::{Role, Row};
use crate::server::Server;

use super::fixture::wait_ready;
use super::Bench;

/// How many daemons share the prefix.
const DAEMONS: usize = 3;

/// The longest a failover may take before the scenario gives up on it.
const GIVE_UP: Duration = Duration::from_secs(60);

impl Bench {
    pub(super) async fn failover(&mut self) -> Result<Vec<Row>, String> {
        if !self.daemon.on_etcd() {
            return Err("failover needs --daemon-arg=--store=etcd".into());
        }
        let kills = self.settings.restarts.max(1);
        let mut daemons: Vec<(Server, std::path::PathBuf)> = Vec::new();
        for n in 0..DAEMONS {
            let dir = self.fresh_dir(&format!("failover-{n}"));
            let server = self.daemon.start(&dir, &dir.with_extension("log"))?;
            wait_ready(server.addr, "/readyz", Instant::now()).await?;
            daemons.push((server, dir));
        }
        let mut took_ms = Vec::new();
        for round in 0..kills {
            let writer = find_writer(&daemons).await?;
            let through = daemons[(writer + 1) % DAEMONS].0.addr;
            let (server, dir) = daemons.remove(writer);
            server.kill9();
            let killed = Instant::now();
            let mut http = Http::connect(through).await?;
            let mut n = 0u64;
            loop {
                let id = format!("failover-{round}-{n}");
                let body = Bytes::from(format!(
                    r#"[{{"id":"{id}","action":"MARK_BLOCKED","cause":"failover"}}]"#
                ));
                let answer = http
                    .send_keyed(Method::POST, "/blocklist/nodes", Some(body), Some(&id))
                    .await;
                match answer {
                    Ok((StatusCode::CREATED, _)) => break,
                    Ok((StatusCode::SERVICE_UNAVAILABLE, _)) => {}
                    Ok((status, body)) => {
                        return Err(format!(
                            "add {id} during the failover: {status} {}",
                            String::from_utf8_lossy(&body)
                        ))
                    }
                    Err(_) => http = Http::connect(through).await?,
                }
                if killed.elapsed() > GIVE_UP {
                    return Err(format!(
                        "no write acknowledged within {GIVE_UP:?} of the kill"
                    ));
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            took_ms.push(killed.elapsed().as_secs_f64() * 1000.0);
            let log = dir.with_extension(format!("round{round}.log"));
            let server = self.daemon.start(&dir, &log)?;
            wait_ready(server.addr, "/readyz", Instant::now()).await?;
            daemons.insert(writer, (server, dir));
        }
        let mut sorted = took_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let max = *sorted.last().expect("at least one kill");
        let lease_ms = self.daemon.lease_secs() as f64 * 1000.0;
        let mut ours = Row::new("failover", Role::Ours);
        ours.p50_ms = Some(sorted[sorted.len() / 2]);
        ours.p99_ms = Some(max);
        ours.p999_ms = Some(max);
        ours.extra.insert("failover_max_ms".into(), max);
        ours.target("≤ lease + 2 s", Some(max <= lease_ms + 2000.0));
        ours.add_note(&format!(
            "{DAEMONS} daemons, lease {:.0} s; {kills} × (SIGKILL of the writer, adds through \
             another daemon until one is acknowledged); p50 = median, p99/p999 = worst; ms: {}",
            lease_ms / 1000.0,
            took_ms
                .iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        Ok(vec![ours])
    }
}

/// The daemon whose `/readyz` says it is the writer, waiting for an election to end.
async fn find_writer(daemons: &[(Server, std::path::PathBuf)]) -> Result<usize, String> {
    let since = Instant::now();
    loop {
        for (n, (server, _)) in daemons.iter().enumerate() {
            if let Ok(mut http) = Http::connect(server.addr).await {
                if let Ok((StatusCode::OK, body)) = http.get("/readyz").await {
                    if String::from_utf8_lossy(&body).contains(r#""etcd":"writer""#) {
                        return Ok(n);
                    }
                }
            }
        }
        if since.elapsed() > GIVE_UP {
            return Err(format!("no daemon is the writer after {GIVE_UP:?}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

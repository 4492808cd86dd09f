//! Request bodies and bulk loading: how the bench fills a daemon with many items fast
//! (batches of up to 10,000 items, the daemon's `--max-batch` default, on a few connections).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use blocklistd::model::Kind;
use hyper::body::Bytes;
use hyper::StatusCode;

use crate::client::{expect_status, Http};

/// Items per bulk request: the daemon's default `--max-batch`.
pub const BULK_BATCH: usize = 10_000;

/// Concurrent bulk requests: enough to keep the committer busy while the next batch is
/// parsed, few enough to leave the second core to the daemon.
pub const BULK_CONNECTIONS: usize = 3;

/// One add element; `end` is an absolute endTimestamp (unix ms), `None` a 1-hour timeout.
pub fn push_item(body: &mut String, id: &str, cause: &str, end: Option<i64>, allow_merge: bool) {
    if !body.ends_with('[') {
        body.push(',');
    }
    let _ = write!(
        body,
        r#"{{"id":"{id}","action":"MARK_BLOCKED","cause":"{cause}""#
    );
    match end {
        Some(end) => {
            let _ = write!(body, r#","endTimestamp":{end}"#);
        }
        None => body.push_str(r#","timeout":3600000"#),
    }
    if allow_merge {
        body.push_str(r#","allowMerge":true"#);
    }
    body.push('}');
}

/// A single-item add body.
pub fn one_item(id: &str, cause: &str, allow_merge: bool) -> Bytes {
    let mut body = String::with_capacity(128);
    body.push('[');
    push_item(&mut body, id, cause, None, allow_merge);
    body.push(']');
    Bytes::from(body)
}

pub fn path(kind: Kind) -> String {
    format!("/blocklist/{}", kind.plural())
}

/// Which item `index` of a bulk load is: its kind, id and endTimestamp.
pub type ItemFn = Arc<dyn Fn(usize) -> (Kind, String, i64) + Send + Sync>;

pub struct Loaded {
    pub items: usize,
    pub skipped: usize,
    pub elapsed: Duration,
}

impl Loaded {
    pub fn items_per_s(&self) -> f64 {
        self.items as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Adds items `0..count` (as `item` describes them) in batches of [`BULK_BATCH`]
/// consecutive indexes that share a kind. Items whose end is already (nearly) past when
/// their batch is sent are skipped and counted, not sent: the daemon would refuse them.
pub async fn bulk_add(addr: SocketAddr, count: usize, item: ItemFn) -> Result<Loaded, String> {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..BULK_CONNECTIONS {
        let next = next.clone();
        let item = item.clone();
        tasks.push(tokio::spawn(async move {
            let mut http = Http::connect(addr).await?;
            let (mut loaded, mut skipped) = (0usize, 0usize);
            loop {
                let first = next.fetch_add(BULK_BATCH, Ordering::Relaxed);
                if first >= count {
                    return Ok::<_, String>((loaded, skipped));
                }
                let last = (first + BULK_BATCH).min(count);
                // A batch has one kind: split it where the kind changes.
                let mut batches: Vec<(Kind, String, usize)> = Vec::new();
                let soon = blocklistd::clock::now_ms() + 200;
                for index in first..last {
                    let (kind, id, end) = item(index);
                    if end <= soon {
                        skipped += 1;
                        continue;
                    }
                    if batches.last().is_none_or(|b| b.0 != kind) {
                        let mut body = String::with_capacity(120 * (last - index));
                        body.push('[');
                        batches.push((kind, body, 0));
                    }
                    let batch = batches.last_mut().expect("pushed above");
                    push_item(&mut batch.1, &id, "bench load", Some(end), false);
                    batch.2 += 1;
                }
                for (kind, mut body, n) in batches {
                    body.push(']');
                    expect_status(
                        http.post(&path(kind), Bytes::from(body)).await?,
                        &[StatusCode::CREATED],
                    )
                    .map_err(|e| format!("bulk add: {e}"))?;
                    loaded += n;
                }
            }
        }));
    }
    let (mut items, mut skipped) = (0, 0);
    for task in tasks {
        let (l, s) = task.await.map_err(|e| format!("loader task: {e}"))??;
        items += l;
        skipped += s;
    }
    Ok(Loaded {
        items,
        skipped,
        elapsed: started.elapsed(),
    })
}

/// What `PUT /taskmanagers` said when the bench registered task managers.
pub enum Registration {
    Done {
        count: usize,
        elapsed: Duration,
    },
    /// The endpoint does not exist yet (404/405): checks fall back to point reads.
    Unsupported(StatusCode),
}

/// Registers task managers `tm-0..count`, task manager `r` on node `node-{r % nodes}`.
pub async fn register(
    addr: SocketAddr,
    count: usize,
    nodes: usize,
) -> Result<Registration, String> {
    let started = Instant::now();
    let mut http = Http::connect(addr).await?;
    for first in (0..count).step_by(BULK_BATCH) {
        let mut body = String::from("[");
        for r in first..(first + BULK_BATCH).min(count) {
            if r > first {
                body.push(',');
            }
            let _ = write!(body, r#"{{"id":"tm-{r}","node":"node-{}"}}"#, r % nodes);
        }
        body.push(']');
        let (status, reply) = http.put("/taskmanagers", Bytes::from(body)).await?;
        match status {
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
                return Ok(Registration::Unsupported(status))
            }
            StatusCode::OK | StatusCode::CREATED => {}
            _ => {
                expect_status((status, reply), &[StatusCode::CREATED])
                    .map_err(|e| format!("PUT /taskmanagers: {e}"))?;
            }
        }
    }
    Ok(Registration::Done {
        count,
        elapsed: started.elapsed(),
    })
}

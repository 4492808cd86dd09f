//! HTTP load workers: the request a worker sends, the worker on its own connection, and
//! the result of an open-loop phase.

use std::net::SocketAddr;

use hyper::body::Bytes;
use hyper::{Method, StatusCode};

use crate::client::{expect_status, Http};
use crate::dataset;
use crate::load::{Phase, Worker};
use crate::report::Row;

/// One request a worker is about to send, and the statuses that count as success.
pub(super) struct Req {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) body: Option<Bytes>,
    pub(super) items: u64,
    pub(super) ok: &'static [StatusCode],
    /// Sent as `Idempotency-Key` when set.
    pub(super) idempotency_key: Option<String>,
}

/// A load worker on its own HTTP connection; `next` makes each request.
pub(super) struct HttpWorker {
    pub(super) http: Http,
    pub(super) next: Box<dyn FnMut() -> Req + Send>,
}

impl Worker for HttpWorker {
    async fn call(&mut self) -> Result<u64, String> {
        let req = (self.next)();
        expect_status(
            self.http
                .send_keyed(
                    req.method,
                    &req.path,
                    req.body,
                    req.idempotency_key.as_deref(),
                )
                .await?,
            req.ok,
        )?;
        Ok(req.items)
    }
}

pub(super) async fn http_workers<F>(
    addr: SocketAddr,
    n: usize,
    mut make: F,
) -> Result<Vec<HttpWorker>, String>
where
    F: FnMut(usize) -> Box<dyn FnMut() -> Req + Send>,
{
    let mut workers = Vec::with_capacity(n);
    for w in 0..n {
        workers.push(HttpWorker {
            http: Http::connect(addr).await?,
            next: make(w),
        });
    }
    Ok(workers)
}

/// Single-item adds of fresh ids `{prefix}-{worker}-{seq}` to `path`, expecting `ok`.
pub(super) fn fresh_adds(
    prefix: &'static str,
    path: &'static str,
    ok: &'static [StatusCode],
) -> impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send> {
    move |w| {
        let mut seq = 0u64;
        Box::new(move || {
            seq += 1;
            Req {
                method: Method::POST,
                path: path.to_owned(),
                body: Some(dataset::one_item(
                    &format!("{prefix}-{w}-{seq}"),
                    "bench",
                    false,
                )),
                items: 1,
                ok,
                idempotency_key: None,
            }
        })
    }
}

/// Adds of `items` fresh ids `{prefix}-{worker}-{seq}` per POST to `path`, expecting 201.
pub(super) fn fresh_batches(
    prefix: &'static str,
    path: &'static str,
    items: u64,
) -> impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send> {
    move |w| {
        let mut seq = 0u64;
        Box::new(move || {
            let mut body = String::with_capacity(120 * items as usize);
            body.push('[');
            for _ in 0..items {
                seq += 1;
                dataset::push_item(
                    &mut body,
                    &format!("{prefix}-{w}-{seq}"),
                    "bench",
                    None,
                    false,
                );
            }
            body.push(']');
            Req {
                method: Method::POST,
                path: path.to_owned(),
                body: Some(Bytes::from(body)),
                items,
                ok: &[StatusCode::CREATED],
                idempotency_key: None,
            }
        })
    }
}

/// `make`'s requests, each with a fresh `Idempotency-Key` (`{worker}-{seq}`), as a client
/// that retries safely sends them.
pub(super) fn keyed(
    mut make: impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send>,
) -> impl FnMut(usize) -> Box<dyn FnMut() -> Req + Send> {
    move |w| {
        let mut next = make(w);
        let mut seq = 0u64;
        Box::new(move || {
            seq += 1;
            let mut req = next();
            req.idempotency_key = Some(format!("bench-{w}-{seq}"));
            req
        })
    }
}

/// An open-loop phase's result.
pub(super) struct Paced {
    pub(super) rate: f64,
    pub(super) phase: Phase,
}

impl Paced {
    /// Adds the paced figures to `row`, with the p99 target checked at this load too.
    pub(super) fn annotate(&self, row: &mut Row, p99_target_ms: f64) {
        let p99 = self.phase.ms(0.99);
        row.extra
            .insert("paced50_ops_s".into(), self.phase.ops_per_s());
        row.extra
            .insert("paced50_p50_ms".into(), self.phase.ms(0.5));
        row.extra.insert("paced50_p99_ms".into(), p99);
        row.target(
            format!("p99 ≤{p99_target_ms} ms at 50% load"),
            Some(p99 <= p99_target_ms && self.phase.errors == 0),
        );
        if self.phase.ops_per_s() < self.rate * 0.95 {
            row.add_note(&format!(
                "the open-loop phase reached only {:.0} of {:.0} ops/s",
                self.phase.ops_per_s(),
                self.rate
            ));
        }
    }
}

//! Streamed listings: a [`Listing`] sent chunk by chunk as it is scanned, with
//! back-pressure, so that memory per lister is a few chunks however big the list and however
//! slow the client.
//!
//! ```text
//! handler: revision, first chunk (blocking pool) ──error──▶ the usual {"errors"} 5xx
//!    │ all in one chunk: wait until durable, send it whole (with a Content-Length)
//!    ▼
//! 200, chunked ◀── ChunkStream ◀── channel of one ◀── producer task:
//!                                                     wait for room
//!                                                     on the blocking pool: scan and send
//!                                                       chunks while the channel has room
//!                                                     last chunk: wait until durable first
//! ```

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use tokio::sync::mpsc::{self, error::TrySendError, OwnedPermit};
use tokio_stream::Stream;

use super::error::{self, ApiError};
use super::reply::with_revision;
use super::state::AppState;
use crate::listing::{self, Listing};
use crate::store::{Seen, Store, StoreError};

impl AppState {
    /// Answers with the listing `build` makes from the revision it reports, streamed.
    ///
    /// - The revision (the `X-Blocklist-Revision` header, and `build`'s argument for bodies
    ///   that carry it) is the one committed before the scan starts: a lower bound of what
    ///   the body shows — a scan already half sent cannot be retried as
    ///   [`Store::consistent_read`] does. Replaying the feed from it converges, since every
    ///   event carries the full state after its change.
    /// - The last chunk goes out only once every group whose transaction had begun when the
    ///   scan ended is durable: the body is complete only when nothing it shows can be lost;
    ///   a crash before that truncates it, which the client sees as an error.
    /// - An error in the first chunk is an ordinary error response. After it, the body is
    ///   aborted (hyper closes the connection without the final empty chunk, so the client
    ///   sees a failed body, never a well-formed short one) and the error is logged.
    /// - A listing that fits in one chunk is sent whole, with a `Content-Length`.
    pub(super) async fn streamed(
        &self,
        route: &'static str,
        content_type: &'static str,
        build: impl FnOnce(u64) -> Listing,
    ) -> error::Result<Response> {
        let revision = self.store.revision();
        let mut listing = build(revision);
        let (listing, first, end) = self
            .blocking(move |store| {
                // Small: most listings are small and fit in it (it grows for the others).
                let mut first = Vec::with_capacity(8 * 1024);
                let done = listing.next_chunk(store, &mut first)?;
                Ok((listing, first, done.then(|| store.scan_ended())))
            })
            .await?;
        let body = if let Some(seen) = end {
            self.store.settle_scan(seen).await?;
            Body::from(first)
        } else {
            let (chunks, receiver) = mpsc::channel(1);
            chunks
                .try_send(Chunk::More(Bytes::from(first)))
                .expect("a new channel has room for one");
            tokio::spawn(self.clone().produce(route, listing, chunks));
            Body::from_stream(ChunkStream {
                chunks: receiver,
                ended: false,
            })
        };
        Ok(with_revision(
            revision,
            ([(CONTENT_TYPE, content_type)], body),
        ))
    }

    /// Produces the chunks after the first into `chunks`; ends when the body is complete,
    /// fails, or the client goes away.
    async fn produce(self, route: &'static str, mut listing: Listing, chunks: mpsc::Sender<Chunk>) {
        loop {
            // Room first: nothing is scanned while the client has not taken the last chunk,
            // and a slow client holds no thread, only its channel.
            let Ok(room) = chunks.clone().reserve_owned().await else {
                return; // the client went away (or it was a HEAD)
            };
            let store = self.store.clone();
            let run = tokio::task::spawn_blocking(move || scan(&store, listing, room)).await;
            match run {
                Ok(Run::Paused(rest)) => listing = rest,
                Ok(Run::Gone) => return,
                Ok(Run::Last(room, chunk, seen)) => {
                    match self.store.settle_scan(seen).await {
                        Ok(()) => {
                            room.send(Chunk::Last(Bytes::from(chunk)));
                        }
                        Err(e) => {
                            tracing::error!(route, error = %e, "listing not durable; aborting the response");
                            room.send(Chunk::Failed(e.into()));
                        }
                    }
                    return;
                }
                Ok(Run::Failed(room, e)) => {
                    tracing::error!(route, error = %e, "listing failed mid-body; aborting the response");
                    room.send(Chunk::Failed(e.into()));
                    return;
                }
                Err(e) => {
                    // Dropping `chunks` without a last chunk aborts the body (`ChunkStream`).
                    tracing::error!(route, error = %e, "listing task failed mid-body; aborting the response");
                    return;
                }
            }
        }
    }
}

/// What the producer sends the body.
enum Chunk {
    More(Bytes),
    /// The final chunk: the body is complete after it.
    Last(Bytes),
    /// Abort the body.
    Failed(ApiError),
}

/// What one run of the producer on the blocking pool ended with.
enum Run {
    /// The channel is full (the client reads slower than the scan): wait for room.
    Paused(Listing),
    /// The client went away.
    Gone,
    /// The final chunk, to send once everything the scan may have seen is durable.
    Last(OwnedPermit<Chunk>, Vec<u8>, Seen),
    Failed(OwnedPermit<Chunk>, StoreError),
}

/// Scans and sends chunks for as long as the channel has room, so a client that keeps up
/// costs no hop between the blocking pool and the async workers per chunk.
fn scan(store: &Store, mut listing: Listing, mut room: OwnedPermit<Chunk>) -> Run {
    loop {
        let mut chunk = new_chunk();
        match listing.next_chunk(store, &mut chunk) {
            Err(e) => return Run::Failed(room, e),
            Ok(true) => return Run::Last(room, chunk, store.scan_ended()),
            Ok(false) => {}
        }
        room = match room
            .send(Chunk::More(Bytes::from(chunk)))
            .try_reserve_owned()
        {
            Ok(room) => room,
            Err(TrySendError::Full(_)) => return Run::Paused(listing),
            Err(TrySendError::Closed(_)) => return Run::Gone,
        };
    }
}

fn new_chunk() -> Vec<u8> {
    // A chunk ends after the element that crosses CHUNK_BYTES: room for that element.
    Vec::with_capacity(listing::CHUNK_BYTES + listing::CHUNK_BYTES / 4)
}

/// The body of a streamed listing. It ends after the last chunk; if the producer stops
/// without sending it (it panicked), the body fails rather than ending early, so a client
/// never takes a cut-off listing for a complete one.
struct ChunkStream {
    chunks: mpsc::Receiver<Chunk>,
    ended: bool,
}

impl Stream for ChunkStream {
    type Item = Result<Bytes, ApiError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let next = ready!(self.chunks.poll_recv(cx));
        self.ended = !matches!(next, Some(Chunk::More(_)));
        Poll::Ready(Some(match next {
            Some(Chunk::More(bytes) | Chunk::Last(bytes)) => Ok(bytes),
            Some(Chunk::Failed(e)) => Err(e),
            None => Err(ApiError::Store(StoreError::ListingStopped)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_stream::StreamExt;

    async fn body(chunks: Vec<Chunk>, close: bool) -> Vec<Result<Bytes, String>> {
        let (sender, receiver) = mpsc::channel(chunks.len().max(1));
        for chunk in chunks {
            sender.try_send(chunk).unwrap();
        }
        // Kept open unless `close`: then the stream must end by itself after the last chunk.
        let kept = (!close).then_some(sender);
        let out = ChunkStream {
            chunks: receiver,
            ended: false,
        }
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
        .await;
        drop(kept);
        out
    }

    #[tokio::test]
    async fn the_body_ends_after_the_last_chunk_and_fails_without_one() {
        let (a, b) = (Bytes::from_static(b"[1,"), Bytes::from_static(b"2]"));
        let complete = body(vec![Chunk::More(a.clone()), Chunk::Last(b.clone())], false).await;
        assert_eq!(complete, [Ok(a.clone()), Ok(b)]);

        let cut = body(vec![Chunk::More(a.clone())], true).await;
        assert_eq!(cut.len(), 2);
        assert_eq!(cut[0], Ok(a.clone()));
        assert!(
            cut[1].is_err(),
            "a producer gone without the last chunk fails the body"
        );

        let failed = body(
            vec![
                Chunk::More(a.clone()),
                Chunk::Failed(ApiError::Store(StoreError::Closed)),
            ],
            false,
        )
        .await;
        assert_eq!(failed.len(), 2);
        assert!(failed[1].is_err());
    }
}

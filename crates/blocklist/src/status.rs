//! What the client shows on stderr while it waits, and only when stderr is a terminal: a
//! spinner once a request has taken longer than [`PATIENCE`], and the state of `watch`'s
//! connection. Piped or redirected, stderr gets nothing from here, so scripts see only the
//! output and the error lines.

use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A request answered within this shows no spinner: most are, and a spinner that flashes
/// for a few milliseconds is noise.
pub const PATIENCE: Duration = Duration::from_millis(500);

/// How often the spinner turns, so that it moves while nothing arrives.
const TICK: Duration = Duration::from_millis(100);

/// A status line on stderr, or nothing when stderr is not a terminal. Cleared when dropped.
pub struct Status {
    bar: Option<ProgressBar>,
}

impl Status {
    /// A status line when stderr is a terminal; otherwise one that never shows.
    pub fn on_stderr() -> Status {
        let bar = std::io::stderr().is_terminal().then(|| {
            let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("a valid template");
            let bar =
                ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(style);
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(TICK);
            bar
        });
        Status { bar }
    }

    /// Shows `text`, restarting the time shown after it.
    pub fn set(&self, text: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(text);
            bar.reset_elapsed();
        }
    }

    /// Runs `print` with the status line out of the way, then draws it again below what
    /// was printed (stdout and stderr often share the terminal).
    pub fn suspend<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Awaits `work`; if it takes longer than [`PATIENCE`], shows `waiting for WHAT` with a
/// spinner and the time waited until it is done.
pub async fn while_slow<T>(what: impl FnOnce() -> String, work: impl Future<Output = T>) -> T {
    if !std::io::stderr().is_terminal() {
        return work.await;
    }
    let mut work = std::pin::pin!(work);
    tokio::select! {
        done = &mut work => return done,
        () = tokio::time::sleep(PATIENCE) => {}
    }
    let status = Status::on_stderr();
    status.set(format!("waiting for {}", what()));
    let done = work.await;
    drop(status);
    done
}

//! How far long offline work has got (`check`, `export`, `salvage`, `import`), on stderr:
//! a bar with counts, rate and ETA when stderr is a terminal, one summary line when it is
//! not (so scripts and CI logs stay clean), nothing with `--quiet`.
//!
//! The work reports through [`Progress`]: it names each stage as it starts, with the
//! stage's total when that is known without extra reading (the store's item counts, the
//! size of a file), and adds what it has done. It never prints and does not know where, or
//! whether, the report goes. [`Meter`] is the one implementation that shows anything; `()`
//! reports nowhere. Nothing here writes to stdout, which is the work's own (the data of
//! `export --out -`).

use std::fmt::Display;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What a stage counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes, shown as KiB, MiB, …
    Bytes,
    /// Things, shown as a number followed by this plural noun ("records", "entries").
    Count(&'static str),
}

/// What long work reports as it goes. Calls are cheap, but a loop over millions of
/// entries should still report in batches ([`Ticks`]).
pub trait Progress: Sync {
    /// A new stage begins: `name` says what it does ("reading items"), `total` how much
    /// there is to do, when known in advance.
    fn stage(&self, name: &'static str, unit: Unit, total: Option<u64>);
    /// `n` more of the current stage's units are done.
    fn advance(&self, n: u64);
    /// A stage with nothing to count, such as opening a database (sled's recovery of a
    /// long log) or closing it: shown as a spinner with the time it takes.
    fn wait(&self, name: &'static str) {
        let _ = name;
    }
}

/// Reports nowhere: for callers that show no progress (tests, the daemon itself).
impl Progress for () {
    fn stage(&self, _: &'static str, _: Unit, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
}

/// Counts single units and hands them to a [`Progress`] in batches of [`Ticks::BATCH`];
/// the rest when dropped.
pub struct Ticks<'a> {
    progress: &'a dyn Progress,
    pending: u64,
}

impl<'a> Ticks<'a> {
    pub const BATCH: u64 = 1024;

    pub fn new(progress: &'a dyn Progress) -> Ticks<'a> {
        Ticks {
            progress,
            pending: 0,
        }
    }

    /// One more unit done.
    pub fn tick(&mut self) {
        self.pending += 1;
        if self.pending == Self::BATCH {
            self.progress.advance(self.pending);
            self.pending = 0;
        }
    }
}

impl Drop for Ticks<'_> {
    fn drop(&mut self) {
        if self.pending > 0 {
            self.progress.advance(self.pending);
        }
    }
}

/// Where a [`Meter`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A bar (or a spinner, for a stage without a total) redrawn on stderr, cleared at the
    /// end and replaced by the summary line.
    Bar,
    /// Only the summary line, when the work is done.
    Line,
    /// Nothing.
    Quiet,
}

impl Output {
    /// A bar when stderr is a terminal, else the summary line; nothing when `quiet`.
    pub fn for_stderr(quiet: bool) -> Output {
        if quiet {
            Output::Quiet
        } else if std::io::stderr().is_terminal() {
            Output::Bar
        } else {
            Output::Line
        }
    }
}

/// The progress of one command, shown on stderr as [`Output`] says.
pub struct Meter {
    command: &'static str,
    output: Output,
    /// The current stage's bar, drawn only with [`Output::Bar`]. Each stage gets a new one,
    /// set up before it is shown, so that no frame mixes two stages.
    bar: Mutex<Option<ProgressBar>>,
    started: Instant,
    /// Units done over all stages so far.
    done: AtomicU64,
}

/// How often the bar redraws by itself, so the elapsed time and the spinner move while
/// the work waits on the disk.
const TICK: Duration = Duration::from_millis(100);

impl Meter {
    /// A meter for the command `command` ("import"), which prefixes the bar.
    pub fn new(command: &'static str, output: Output) -> Meter {
        let meter = Meter {
            command,
            output,
            bar: Mutex::new(None),
            started: Instant::now(),
            done: AtomicU64::new(0),
        };
        meter.wait("starting");
        meter
    }

    /// Units done over all stages so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Ends the report with one line (none with [`Output::Quiet`]): `summary`, then the time
    /// since the meter was made and the rate of `count` `unit`s in it.
    pub fn finish(self, summary: impl Display, count: u64, unit: Unit) {
        self.clear();
        if self.output == Output::Quiet {
            return;
        }
        eprintln!(
            "{summary}; took {}",
            timing(self.started.elapsed(), count, unit)
        );
    }

    /// Replaces the bar with one of `style` for the stage `name`, of `total` units.
    fn show(&self, name: &'static str, style: ProgressStyle, total: Option<u64>) {
        if self.output != Output::Bar {
            return;
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden())
            .with_style(style)
            .with_prefix(self.command)
            .with_message(name);
        let mut current = self.bar.lock().expect("not poisoned");
        if let Some(old) = current.take() {
            old.finish_and_clear();
        }
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(TICK);
        *current = Some(bar);
    }

    fn clear(&self) {
        if let Some(bar) = self.bar.lock().expect("not poisoned").take() {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Meter {
    fn stage(&self, name: &'static str, unit: Unit, total: Option<u64>) {
        self.show(name, style(unit, total.is_some()), total);
    }

    fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        if let Some(bar) = &*self.bar.lock().expect("not poisoned") {
            bar.inc(n);
        }
    }

    fn wait(&self, name: &'static str) {
        self.show(name, waiting(), None);
    }
}

impl Drop for Meter {
    /// Work that failed leaves no half-drawn bar above its error message.
    fn drop(&mut self) {
        self.clear();
    }
}

/// The spinner of [`Meter::wait`].
fn waiting() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})").expect("a valid template")
}

/// The bar of a stage: with its total, a bar with the rate and the ETA; without, a spinner
/// with the count and the rate.
fn style(unit: Unit, with_total: bool) -> ProgressStyle {
    let template = match (unit, with_total) {
        (Unit::Bytes, true) => "{prefix}: {msg} [{wide_bar}] {bytes}/{total_bytes}, \
                                {binary_bytes_per_sec}, ETA {eta}"
            .to_owned(),
        (Unit::Bytes, false) => {
            "{spinner} {prefix}: {msg}: {bytes}, {binary_bytes_per_sec}, {elapsed}".to_owned()
        }
        (Unit::Count(noun), true) => format!(
            "{{prefix}}: {{msg}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {noun}, \
             {{per_sec:0}}, ETA {{eta}}"
        ),
        (Unit::Count(noun), false) => {
            format!(
                "{{spinner}} {{prefix}}: {{msg}}: {{human_pos}} {noun}, {{per_sec:0}}, {{elapsed}}"
            )
        }
    };
    ProgressStyle::with_template(&template)
        .expect("a valid template")
        .progress_chars("=> ")
}

/// `1.3 s, 76923 records/s`: the time taken and the rate of `count` units in it.
fn timing(elapsed: Duration, count: u64, unit: Unit) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = count as f64 / secs.max(0.001);
    let rate = match unit {
        Unit::Bytes => format!("{:.1} MiB/s", rate / (1024.0 * 1024.0)),
        Unit::Count(noun) => format!("{rate:.0} {noun}/s"),
    };
    format!("{secs:.1} s, {rate}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_style_is_a_valid_template() {
        for unit in [Unit::Bytes, Unit::Count("records")] {
            for with_total in [true, false] {
                style(unit, with_total);
            }
        }
    }

    #[test]
    fn the_summary_gives_time_and_rate() {
        let t = timing(Duration::from_millis(2500), 5000, Unit::Count("records"));
        assert_eq!(t, "2.5 s, 2000 records/s");
        let t = timing(Duration::from_secs(2), 4 * 1024 * 1024, Unit::Bytes);
        assert_eq!(t, "2.0 s, 2.0 MiB/s");
        // Work too quick to time still gets a finite rate.
        let t = timing(Duration::ZERO, 3, Unit::Count("entries"));
        assert_eq!(t, "0.0 s, 3000 entries/s");
    }

    struct Recorder(Mutex<Vec<u64>>);

    impl Progress for Recorder {
        fn stage(&self, _: &'static str, _: Unit, _: Option<u64>) {}
        fn advance(&self, n: u64) {
            self.0.lock().unwrap().push(n);
        }
    }

    #[test]
    fn ticks_report_in_batches_and_the_rest_at_the_end() {
        let recorder = Recorder(Mutex::new(Vec::new()));
        {
            let mut ticks = Ticks::new(&recorder);
            for _ in 0..2 * Ticks::BATCH + 5 {
                ticks.tick();
            }
        }
        assert_eq!(*recorder.0.lock().unwrap(), [Ticks::BATCH, Ticks::BATCH, 5]);
    }

    #[test]
    fn a_quiet_meter_counts_and_prints_nothing() {
        let meter = Meter::new("test", Output::Quiet);
        meter.stage("counting", Unit::Count("entries"), Some(10));
        meter.advance(4);
        meter.advance(6);
        assert_eq!(meter.done(), 10);
        meter.finish("counted", 10, Unit::Count("entries"));
    }
}

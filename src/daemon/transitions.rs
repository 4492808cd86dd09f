//! The roles' transitions on an etcd prefix, as a pure function: where the daemon stands
//! ([`Phase`]) and what it just saw ([`Observed`]) give where it stands next and what it does
//! ([`Step`]). The loop in `roles.rs` only does the I/O each step names and reports what
//! came of it; every rule of who does what when lives here, and the table test below names
//! every pair.
//!
//! The rules: a failure before the first role serves stops the daemon (a daemon that
//! cannot start says so); once serving, etcd's failures are waited out (a replica keeps
//! serving while its takeover is retried; a writer stepping down retries its replica's
//! open), and anything else stops it. A writer whose key another daemon took, or whose
//! lease ended with nobody taking the key, steps down to a replica (which campaigns). A
//! stop ends whatever role is running.

/// Where the daemon stands among its roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Phase {
    /// Before the first role serves.
    Starting,
    /// Serving as a replica (another daemon writes), and campaigning for the writer key.
    Replica,
    /// Serving as the writer.
    Writer,
    /// A writer whose key another daemon took, opening its replica; the deposed writer's
    /// application serves (sending every request on) until the replica does.
    SteppingDown,
}

/// What the last step came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Observed {
    /// The daemon's first campaign: whether it won the writer key at once.
    Started { won: bool },
    /// The writer's store is open (the key held, the blocklist loaded) and serves.
    WriterServing,
    /// Opening the writer's store failed; `on_store`: the store failed (etcd unreachable
    /// while the log was read, say), rather than the daemon's own settings.
    WriterFailed { on_store: bool },
    /// The replica's store follows the prefix and serves.
    ReplicaServing,
    /// Opening the replica's store failed; `on_etcd`: etcd failed (it may come back).
    ReplicaFailed { on_etcd: bool },
    /// A wait before another try ended.
    Waited,
    /// The writer key is another daemon's now, or nobody's: this daemon's lease ended.
    KeyTaken,
    /// The daemon is stopping.
    Stopping,
}

/// What the daemon does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Step {
    /// Opens the writer's store: waits for the writer key (at once if won), loads the
    /// blocklist, serves the writer's application; a replica serving until then stops
    /// following once it does.
    OpenWriter,
    /// Opens the replica's store and serves it; a deposed writer's store then shuts down.
    OpenReplica,
    /// Holds the writer key until the daemon stops or another daemon takes the key.
    HoldKey,
    /// Gives the writer key up (a takeover that failed after winning it, so that another
    /// daemon may take over), then waits a moment.
    GiveUpKeyAndWait,
    /// Waits a moment before trying again.
    Wait,
    /// Stops: shuts down the writer's store if one is open.
    Stop,
    /// Stops with the failure just observed.
    Fail,
}

/// The next phase and step after `observed` in `phase`; `None` for a pair that cannot
/// happen (no step of `phase` reports `observed`).
pub(super) fn next(phase: Phase, observed: Observed) -> Option<(Phase, Step)> {
    use Observed as O;
    use Phase as P;
    Some(match (phase, observed) {
        (_, O::Stopping) => (phase, Step::Stop),
        // At the start.
        (P::Starting, O::Started { won: true }) => (P::Starting, Step::OpenWriter),
        (P::Starting, O::Started { won: false }) => (P::Starting, Step::OpenReplica),
        (P::Starting, O::WriterFailed { .. } | O::ReplicaFailed { .. }) => {
            (P::Starting, Step::Fail)
        }
        (P::Starting | P::Replica, O::WriterServing) => (P::Writer, Step::HoldKey),
        // A replica serving campaigns for the key; its takeover's etcd failures are waited
        // out, the replica serving on.
        (P::Starting | P::SteppingDown, O::ReplicaServing) | (P::Replica, O::Waited) => {
            (P::Replica, Step::OpenWriter)
        }
        (P::Replica, O::WriterFailed { on_store: true }) => (P::Replica, Step::GiveUpKeyAndWait),
        (P::Replica, O::WriterFailed { on_store: false }) => (P::Replica, Step::Fail),
        // The writer deposed opens its replica, waiting out etcd's failures.
        (P::Writer, O::KeyTaken) | (P::SteppingDown, O::Waited) => {
            (P::SteppingDown, Step::OpenReplica)
        }
        (P::SteppingDown, O::ReplicaFailed { on_etcd: true }) => (P::SteppingDown, Step::Wait),
        (P::SteppingDown, O::ReplicaFailed { on_etcd: false }) => (P::SteppingDown, Step::Fail),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PHASES: [Phase; 4] = [
        Phase::Starting,
        Phase::Replica,
        Phase::Writer,
        Phase::SteppingDown,
    ];

    const OBSERVED: [Observed; 11] = [
        Observed::Started { won: true },
        Observed::Started { won: false },
        Observed::WriterServing,
        Observed::WriterFailed { on_store: true },
        Observed::WriterFailed { on_store: false },
        Observed::ReplicaServing,
        Observed::ReplicaFailed { on_etcd: true },
        Observed::ReplicaFailed { on_etcd: false },
        Observed::Waited,
        Observed::KeyTaken,
        Observed::Stopping,
    ];

    /// A phase, an observation, and what follows them.
    type Row = (Phase, Observed, Option<(Phase, Step)>);

    /// Every pair of phase and observation with what follows; `None`: it cannot happen.
    /// The test below checks `next` against this table for all 44 pairs, so a transition
    /// changed, added or removed fails it.
    #[rustfmt::skip]
    fn table() -> Vec<Row> {
        use Observed as O;
        use Phase as P;
        use Step as S;
        vec![
            (P::Starting, O::Started { won: true }, Some((P::Starting, S::OpenWriter))),
            (P::Starting, O::Started { won: false }, Some((P::Starting, S::OpenReplica))),
            (P::Starting, O::WriterServing, Some((P::Writer, S::HoldKey))),
            (P::Starting, O::WriterFailed { on_store: true }, Some((P::Starting, S::Fail))),
            (P::Starting, O::WriterFailed { on_store: false }, Some((P::Starting, S::Fail))),
            (P::Starting, O::ReplicaServing, Some((P::Replica, S::OpenWriter))),
            (P::Starting, O::ReplicaFailed { on_etcd: true }, Some((P::Starting, S::Fail))),
            (P::Starting, O::ReplicaFailed { on_etcd: false }, Some((P::Starting, S::Fail))),
            (P::Starting, O::Waited, None),
            (P::Starting, O::KeyTaken, None),
            (P::Starting, O::Stopping, Some((P::Starting, S::Stop))),

            (P::Replica, O::Started { won: true }, None),
            (P::Replica, O::Started { won: false }, None),
            (P::Replica, O::WriterServing, Some((P::Writer, S::HoldKey))),
            (P::Replica, O::WriterFailed { on_store: true }, Some((P::Replica, S::GiveUpKeyAndWait))),
            (P::Replica, O::WriterFailed { on_store: false }, Some((P::Replica, S::Fail))),
            (P::Replica, O::ReplicaServing, None),
            (P::Replica, O::ReplicaFailed { on_etcd: true }, None),
            (P::Replica, O::ReplicaFailed { on_etcd: false }, None),
            (P::Replica, O::Waited, Some((P::Replica, S::OpenWriter))),
            (P::Replica, O::KeyTaken, None),
            (P::Replica, O::Stopping, Some((P::Replica, S::Stop))),

            (P::Writer, O::Started { won: true }, None),
            (P::Writer, O::Started { won: false }, None),
            (P::Writer, O::WriterServing, None),
            (P::Writer, O::WriterFailed { on_store: true }, None),
            (P::Writer, O::WriterFailed { on_store: false }, None),
            (P::Writer, O::ReplicaServing, None),
            (P::Writer, O::ReplicaFailed { on_etcd: true }, None),
            (P::Writer, O::ReplicaFailed { on_etcd: false }, None),
            (P::Writer, O::Waited, None),
            (P::Writer, O::KeyTaken, Some((P::SteppingDown, S::OpenReplica))),
            (P::Writer, O::Stopping, Some((P::Writer, S::Stop))),

            (P::SteppingDown, O::Started { won: true }, None),
            (P::SteppingDown, O::Started { won: false }, None),
            (P::SteppingDown, O::WriterServing, None),
            (P::SteppingDown, O::WriterFailed { on_store: true }, None),
            (P::SteppingDown, O::WriterFailed { on_store: false }, None),
            (P::SteppingDown, O::ReplicaServing, Some((P::Replica, S::OpenWriter))),
            (P::SteppingDown, O::ReplicaFailed { on_etcd: true }, Some((P::SteppingDown, S::Wait))),
            (P::SteppingDown, O::ReplicaFailed { on_etcd: false }, Some((P::SteppingDown, S::Fail))),
            (P::SteppingDown, O::Waited, Some((P::SteppingDown, S::OpenReplica))),
            (P::SteppingDown, O::KeyTaken, None),
            (P::SteppingDown, O::Stopping, Some((P::SteppingDown, S::Stop))),
        ]
    }

    #[test]
    fn every_transition_is_the_tables() {
        let table = table();
        // The table covers every pair once.
        assert_eq!(table.len(), PHASES.len() * OBSERVED.len());
        for phase in PHASES {
            for observed in OBSERVED {
                let rows: Vec<_> = table
                    .iter()
                    .filter(|(p, o, _)| *p == phase && *o == observed)
                    .collect();
                assert_eq!(rows.len(), 1, "{phase:?} × {observed:?} in the table");
                assert_eq!(
                    next(phase, observed),
                    rows[0].2,
                    "after {observed:?} in {phase:?}"
                );
            }
        }
    }

    /// Every step that does I/O reports only observations its phase allows: walking the
    /// machine from the start through every observation each step can report never meets
    /// an impossible pair, and every phase and step is reached.
    #[test]
    fn every_step_reports_only_what_its_phase_allows() {
        fn reports(step: Step) -> &'static [Observed] {
            use Observed as O;
            match step {
                Step::OpenWriter => &[
                    O::WriterServing,
                    O::WriterFailed { on_store: true },
                    O::WriterFailed { on_store: false },
                    O::Stopping,
                ],
                Step::OpenReplica => &[
                    O::ReplicaServing,
                    O::ReplicaFailed { on_etcd: true },
                    O::ReplicaFailed { on_etcd: false },
                    O::Stopping,
                ],
                Step::HoldKey => &[O::KeyTaken, O::Stopping],
                Step::GiveUpKeyAndWait | Step::Wait => &[O::Waited, O::Stopping],
                Step::Stop | Step::Fail => &[],
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut todo: Vec<(Phase, Observed)> = vec![
            (Phase::Starting, Observed::Started { won: true }),
            (Phase::Starting, Observed::Started { won: false }),
        ];
        while let Some((phase, observed)) = todo.pop() {
            let Some((phase, step)) = next(phase, observed) else {
                panic!("{observed:?} in {phase:?} has no transition");
            };
            if seen.insert((phase, step)) {
                todo.extend(reports(step).iter().map(|&o| (phase, o)));
            }
        }
        for phase in PHASES {
            assert!(seen.iter().any(|(p, _)| *p == phase), "{phase:?} reached");
        }
        for step in [
            Step::OpenWriter,
            Step::OpenReplica,
            Step::HoldKey,
            Step::GiveUpKeyAndWait,
            Step::Wait,
            Step::Stop,
            Step::Fail,
        ] {
            assert!(seen.iter().any(|(_, s)| *s == step), "{step:?} reached");
        }
    }
}

//! The checker's own tests, on hand-made histories.

use super::*;

fn far() -> std::time::Instant {
    std::time::Instant::now() + Duration::from_secs(60)
}

fn t(ms: f64) -> Duration {
    Duration::from_secs_f64(ms / 1000.0)
}

fn op(client: usize, incarnation: usize, call: Call, invoke: f64, end: End) -> Op {
    Op {
        client,
        incarnation,
        call,
        invoke: t(invoke),
        end,
    }
}

fn answered(at: f64, outcome: Outcome) -> End {
    End::Answered { at: t(at), outcome }
}

/// Cut off; bounded by its daemon's end in [`check`] and [`violations`].
fn cut() -> End {
    End::Cut {
        why: "connection cut".into(),
        by: Duration::MAX,
    }
}

/// The checker on `ops` of one daemon at a time, the daemons ending at `ends`.
fn check(ops: &[Op], ends: &[Duration]) -> bool {
    let mut ops = ops.to_vec();
    bound_by_daemon_ends(&mut ops, ends);
    super::check(&ops, far()).expect("decided in time")
}

/// The violations in `ops` of one daemon at a time, the daemons ending at `ends`.
fn violations(
    id: &str,
    ops: &[Op],
    ends: &[Duration],
    max: usize,
    deadline: std::time::Instant,
) -> Vec<Violation> {
    let mut ops = ops.to_vec();
    bound_by_daemon_ends(&mut ops, ends);
    super::violations(id, &ops, &daemon_ends(ends), max, deadline)
}

fn add(action: Action, cause: &str, merge: bool) -> Call {
    Call::Add {
        action,
        cause: cause.into(),
        merge,
    }
}

fn read(block: Option<(Action, &str)>) -> Outcome {
    Outcome::Read(block.map(|(a, c)| Block::new(a, c)))
}

use Action::{Evacuate, MarkBlocked};

#[test]
fn a_linearizable_history_is_accepted() {
    let ops = [
        op(
            0,
            0,
            add(MarkBlocked, "net", false),
            0.0,
            answered(3.0, Outcome::Created),
        ),
        // Concurrent with the add: it may read before or after it.
        op(
            1,
            0,
            Call::Get,
            1.0,
            answered(2.0, read(Some((MarkBlocked, "net")))),
        ),
        op(2, 0, Call::Check, 1.5, answered(2.5, read(None))),
        op(
            1,
            0,
            add(Evacuate, "disk", true),
            4.0,
            answered(6.0, Outcome::Merged(Block::new(Evacuate, "net,disk"))),
        ),
        op(
            2,
            0,
            add(MarkBlocked, "oom", false),
            4.5,
            answered(5.0, Outcome::Conflict),
        ),
        op(
            0,
            0,
            Call::Check,
            7.0,
            answered(8.0, read(Some((Evacuate, "net,disk")))),
        ),
        op(0, 0, Call::Delete, 9.0, answered(10.0, Outcome::Removed)),
        op(1, 0, Call::Delete, 9.5, answered(11.0, Outcome::NotFound)),
        op(2, 0, Call::Get, 12.0, answered(13.0, read(None))),
    ];
    assert!(check(&ops, &[t(100.0)]));
}

#[test]
fn a_read_of_what_the_kill_took_back_is_rejected() {
    let ops = cut_off_add_seen_then_gone();
    let ends = [t(6.9), t(300.0)];
    assert!(!check(&ops, &ends));
    let found = violations("tm-2", &ops, &ends, 10, far());
    assert_eq!(found.len(), 1);
    let report = &found[0].report;
    assert!(report.contains("194.9 ms"), "{report}");
    assert!(report.contains("d0 killed"), "{report}");
    assert!(report.contains(r#"GET → 200 EVACUATE "net""#), "{report}");
    assert!(found[0].across_fault);
    assert_eq!(found[0].faults_before, 1);
}

#[test]
fn a_witness_is_cut_down_to_the_ops_that_matter() {
    let mut ops = Vec::new();
    for n in 0..50 {
        let at = f64::from(n) * 10.0;
        ops.push(op(
            0,
            0,
            add(MarkBlocked, "oom", false),
            at,
            answered(at + 1.0, Outcome::Created),
        ));
        ops.push(op(
            1,
            0,
            Call::Get,
            at + 2.0,
            answered(at + 3.0, read(Some((MarkBlocked, "oom")))),
        ));
        ops.push(op(
            0,
            0,
            Call::Delete,
            at + 4.0,
            answered(at + 5.0, Outcome::Removed),
        ));
    }
    ops.push(op(0, 0, add(Evacuate, "net", true), 1000.0, cut()));
    ops.push(op(
        1,
        0,
        Call::Get,
        1000.4,
        answered(1001.7, read(Some((Evacuate, "net")))),
    ));
    ops.push(op(
        1,
        0,
        Call::Check,
        1001.8,
        answered(1002.0, read(Some((Evacuate, "net")))),
    ));
    ops.push(op(
        2,
        1,
        Call::Delete,
        1190.7,
        answered(1194.9, Outcome::NotFound),
    ));
    let ends = [t(1006.9), t(2000.0)];
    assert!(!check(&ops, &ends));
    let found = violations("tm-2", &ops, &ends, 10, far());
    assert_eq!(found.len(), 1);
    let report = &found[0].report;
    assert!(report.contains("whatever the item was"), "{report}");
    // The header, the cut-off add, one of the reads, the kill, the delete.
    assert_eq!(report.lines().count(), 5, "{report}");
}

#[test]
fn the_search_goes_on_after_a_violation() {
    let ops: Vec<Op> = cut_off_add_seen_then_gone()
        .into_iter()
        .chain([
            op(
                2,
                1,
                add(MarkBlocked, "oom", false),
                200.0,
                answered(201.0, Outcome::Created),
            ),
            // Reads going back in time, without a kill.
            op(
                0,
                1,
                add(MarkBlocked, "net", true),
                210.0,
                answered(215.0, Outcome::Merged(Block::new(MarkBlocked, "oom,net"))),
            ),
            op(
                1,
                1,
                Call::Get,
                211.0,
                answered(211.5, read(Some((MarkBlocked, "oom,net")))),
            ),
            op(
                1,
                1,
                Call::Check,
                212.0,
                answered(212.5, read(Some((MarkBlocked, "oom")))),
            ),
        ])
        .collect();
    let ends = [t(6.9), t(300.0)];
    let found = violations("tm-2", &ops, &ends, 10, far());
    assert_eq!(found.len(), 2);
    assert!(found[0].across_fault);
    assert!(!found[1].across_fault, "{}", found[1].report);
    assert!(found[1].report.contains("212.5 ms"), "{}", found[1].report);
}

#[test]
fn a_cut_off_op_may_have_taken_effect_or_not() {
    let ends = [t(5.0), t(100.0)];
    for seen in [Some((MarkBlocked, "net")), None] {
        let ops = [
            op(0, 0, add(MarkBlocked, "net", false), 0.0, cut()),
            op(1, 1, Call::Get, 10.0, answered(11.0, read(seen))),
        ];
        assert!(check(&ops, &ends), "{seen:?}");
    }
    // Taken back by the kill is fine too, as long as nobody saw it.
    let ops = [
        op(0, 0, add(MarkBlocked, "net", false), 0.0, cut()),
        op(
            1,
            1,
            add(MarkBlocked, "disk", false),
            10.0,
            answered(11.0, Outcome::Created),
        ),
        op(
            1,
            1,
            Call::Check,
            12.0,
            answered(13.0, read(Some((MarkBlocked, "disk")))),
        ),
    ];
    assert!(check(&ops, &ends));
}

#[test]
fn a_cut_off_op_does_not_take_effect_after_its_kill() {
    let ops = [
        op(0, 0, add(MarkBlocked, "net", false), 1.0, cut()),
        op(1, 1, Call::Get, 10.0, answered(11.0, read(None))),
        op(
            1,
            1,
            Call::Get,
            12.0,
            answered(13.0, read(Some((MarkBlocked, "net")))),
        ),
    ];
    assert!(!check(&ops, &[t(5.0), t(100.0)]));
    // Without the kill in between, it may have been applied late.
    assert!(check(&ops, &[t(100.0)]));
}

#[test]
fn an_acknowledged_write_is_seen_by_every_later_read() {
    let ops = [
        op(
            0,
            0,
            add(MarkBlocked, "net", false),
            0.0,
            answered(1.0, Outcome::Created),
        ),
        op(1, 0, Call::Get, 2.0, answered(3.0, read(None))),
    ];
    assert!(!check(&ops, &[t(100.0)]));
    // And a lost one is caught after the restart too.
    let ops = [
        op(
            0,
            0,
            add(MarkBlocked, "net", false),
            0.0,
            answered(1.0, Outcome::Created),
        ),
        op(1, 1, Call::Check, 20.0, answered(21.0, read(None))),
    ];
    assert!(!check(&ops, &[t(10.0), t(100.0)]));
}

#[test]
fn merges_must_show_the_merged_state() {
    let ops = [
        op(
            0,
            0,
            add(MarkBlocked, "net", true),
            0.0,
            answered(1.0, Outcome::Created),
        ),
        op(
            0,
            0,
            add(Evacuate, "disk", true),
            2.0,
            answered(3.0, Outcome::Merged(Block::new(Evacuate, "net,disk"))),
        ),
        op(
            0,
            0,
            add(MarkBlocked, "net", true),
            4.0,
            answered(5.0, Outcome::Merged(Block::new(Evacuate, "net,disk"))),
        ),
    ];
    assert!(check(&ops, &[t(100.0)]));
    let wrong = [
        ops[0].clone(),
        op(
            0,
            0,
            add(Evacuate, "disk", true),
            2.0,
            answered(3.0, Outcome::Merged(Block::new(Evacuate, "disk,net"))),
        ),
    ];
    assert!(!check(&wrong, &[t(100.0)]));
}

#[test]
fn cut_off_reads_are_ignored() {
    let ops = [
        op(0, 0, Call::Get, 0.0, cut()),
        op(1, 0, Call::Get, 0.5, answered(1.0, read(None))),
    ];
    assert!(check(&ops, &[t(5.0)]));
}

#[test]
fn a_long_history_checks_quickly() {
    // Four clients taking turns on one id for a long time: the memo keeps the search
    // linear in the history's length.
    let mut ops = Vec::new();
    let mut present = false;
    for n in 0..20_000 {
        let at = n as f64;
        let (call, outcome) = match n % 4 {
            0 if present => (Call::Delete, Outcome::Removed),
            0 => (add(MarkBlocked, "net", false), Outcome::Created),
            2 => (Call::Check, read(present.then_some((MarkBlocked, "net")))),
            _ => (Call::Get, read(present.then_some((MarkBlocked, "net")))),
        };
        if n % 4 == 0 {
            present = !present;
        }
        // Each overlaps the next op.
        ops.push(op(n % 4, 0, call, at, answered(at + 1.5, outcome)));
    }
    let started = std::time::Instant::now();
    assert!(check(&ops, &[t(1e9)]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_cut_off_op_that_may_linger_takes_effect_anywhere_in_its_window() {
    // A write cut off at a replica may still reach the writer: bounded by `by` alone,
    // not by any daemon's end.
    let lingering = |by: f64| End::Cut {
        why: "503".into(),
        by: t(by),
    };
    let ops = [
        op(0, 0, add(MarkBlocked, "net", false), 1.0, lingering(50.0)),
        op(1, 1, Call::Get, 35.0, answered(36.0, read(None))),
        op(
            1,
            1,
            Call::Get,
            40.0,
            answered(41.0, read(Some((MarkBlocked, "net")))),
        ),
    ];
    assert!(super::check(&ops, far()).unwrap());
    // Not after its bound.
    let late = [
        op(0, 0, add(MarkBlocked, "net", false), 1.0, lingering(30.0)),
        ops[1].clone(),
        ops[2].clone(),
    ];
    assert!(!super::check(&late, far()).unwrap());
}

#[test]
fn a_long_history_with_lingering_cut_off_ops_checks_quickly() {
    // As above, with every 50th op a write cut off that may take effect up to 400 ops
    // later (never, here): eight of them unplaced at any time.
    let mut ops = Vec::new();
    let mut present = false;
    for n in 0..20_000 {
        let at = n as f64;
        if n % 50 == 25 {
            let by = End::Cut {
                why: "503".into(),
                by: t(at + 400.0),
            };
            ops.push(op(5, 0, add(Evacuate, "disk", true), at + 0.5, by));
        }
        let (call, outcome) = match n % 4 {
            0 if present => (Call::Delete, Outcome::Removed),
            0 => (add(MarkBlocked, "net", false), Outcome::Created),
            2 => (Call::Check, read(present.then_some((MarkBlocked, "net")))),
            _ => (Call::Get, read(present.then_some((MarkBlocked, "net")))),
        };
        if n % 4 == 0 {
            present = !present;
        }
        ops.push(op(n % 4, 0, call, at, answered(at + 1.5, outcome)));
    }
    let started = std::time::Instant::now();
    assert!(super::check(&ops, far()).unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A read shows an add that the kill then takes back: not linearizable.
fn cut_off_add_seen_then_gone() -> [Op; 3] {
    [
        op(0, 0, add(Evacuate, "net", true), 0.0, cut()),
        op(
            1,
            0,
            Call::Get,
            0.4,
            answered(1.7, read(Some((Evacuate, "net")))),
        ),
        op(
            2,
            1,
            Call::Delete,
            190.7,
            answered(194.9, Outcome::NotFound),
        ),
    ]
}

/// How [`simulated_history`] loads one id.
struct Load {
    /// Clients sending writes and reads, half each, as the tests' writers do.
    writers: usize,
    /// Clients sending reads only.
    readers: usize,
    /// Ops each client sends, on this id or (`1 - 1/ids` of them) others.
    ops_each: usize,
    ids: u64,
    /// One write in `cut_every` gets no answer.
    cut_every: u64,
    /// How long after it was sent a cut-off write may still take effect, in ms (an op
    /// takes 0.2 to 6 ms).
    linger: f64,
}

/// A linearizable history of one id, as a replicated daemon under faults makes one: each
/// op takes effect at a moment inside its interval, in the order of those moments; a
/// cut-off write takes effect, or not, at any moment up to `linger` after it was sent.
fn simulated_history(seed: u64, load: &Load) -> Vec<Op> {
    let mut rng = crate::clients::Rng(seed);
    // Each op with when it takes effect (never: None); the outcomes are filled in below.
    let mut planned: Vec<(Option<f64>, Op)> = Vec::new();
    for client in 0..load.writers + load.readers {
        let mut at = rng.below(10) as f64;
        for _ in 0..load.ops_each {
            let effect = at + 0.1 + rng.below(30) as f64 / 10.0;
            let answer = effect + 0.1 + rng.below(30) as f64 / 10.0;
            let here = rng.below(load.ids) == 0;
            let call = crate::clients::random_call(&mut rng, client >= load.writers);
            if here && !call.is_read() && rng.below(load.cut_every) == 0 {
                let by = End::Cut {
                    why: "503".into(),
                    by: t(at + load.linger),
                };
                let effect = (rng.below(2) == 0).then(|| at + rng.below(load.linger as u64) as f64);
                planned.push((effect, op(client, 0, call, at, by)));
            } else if here {
                let end = answered(answer, Outcome::Unexpected("not yet".into()));
                planned.push((Some(effect), op(client, 0, call, at, end)));
            }
            at = answer + rng.below(20) as f64 / 10.0;
        }
    }
    planned.sort_by(|a, b| a.0.partial_cmp(&b.0).expect("no NaN"));
    let mut state = None;
    let mut ops = Vec::new();
    for (effect, mut op) in planned {
        if effect.is_some() {
            let (after, answer) = apply(&state, &op.call);
            state = after;
            if let End::Answered { outcome, .. } = &mut op.end {
                *outcome = answer;
            }
        }
        ops.push(op);
    }
    ops
}

#[test]
fn a_history_with_many_long_open_cut_off_writes_checks_quickly() {
    // About ten cut-off writes open at any time among six writers and six readers: the
    // shape of a run whose clients all wait on a paused replica, many times over.
    let load = Load {
        writers: 6,
        readers: 6,
        ops_each: 4_000,
        ids: 4,
        cut_every: 10,
        linger: 600.0,
    };
    for seed in [0, 3] {
        let ops = simulated_history(seed, &load);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        assert_eq!(super::check(&ops, deadline), Ok(true), "seed {seed}");
    }
}

#[test]
fn the_rules_for_cut_off_ops_lose_no_linearization() {
    // Short histories dense with cut-off writes, every one linearizable by construction:
    // a rule of the search that drops a needed branch rejects some of them.
    let load = Load {
        writers: 3,
        readers: 1,
        ops_each: 40,
        ids: 1,
        cut_every: 2,
        linger: 30.0,
    };
    for seed in 0..300 {
        let ops = simulated_history(seed, &load);
        assert_eq!(super::check(&ops, far()), Ok(true), "seed {seed}");
    }
}

//! A linearizability checker for the history of one task-manager id, against a sequential
//! model of one item: absent, or present with an action and a set of causes.
//!
//! The search is Wing and Gong's, with Lowe's memo of visited configurations (which ops are
//! linearized, and the model state they left): at each step any op may go next whose
//! invocation precedes the return of every op not yet linearized; a configuration seen
//! before is not explored again. A read that may go next and matches the state goes next
//! without trying other orders, which keeps read-heavy histories cheap.
//!
//! Cut-off ops make the search exponential in how many are open at once (each may take
//! effect at any step of its window, or never), so three dominance rules keep it small,
//! none of which loses a linearization: a cut-off op that never took effect stays open
//! until it stands in the way (leaving it open can do all that leaving it out can); one
//! whose effect would not change the state is not applied (that is leaving it out); of
//! identical cut-off ops, the one whose window ends first is applied first.
//!
//! Written here rather than taken from a library (stateright's `LinearizabilityTester`, say)
//! because of crash semantics those do not have: an op whose answer was cut off (by a
//! `kill -9`, a timeout, a 5xx) may have taken effect or not, but if it did, it took effect
//! by a time the test knows ([`End::Cut`]'s `by`: the kill of the one daemon that could
//! apply it, or a bound on how long a write can linger among replicas). It is modelled as
//! an op that returns then with an output nobody saw, and that the search may also leave
//! out altogether.
//!
//! [`violations`] cuts a failing history down to short witnesses a human can read.
//!
//! Ops on different ids are independent (each request touches one id), so a whole history
//! is linearizable when each id's is, and each id is checked on its own.

use std::collections::HashSet;
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The derive order is the strength order, as in the daemon: the stronger action wins a merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Action {
    MarkBlocked,
    Evacuate,
}

impl Action {
    pub fn wire(self) -> &'static str {
        match self {
            Action::MarkBlocked => "MARK_BLOCKED",
            Action::Evacuate => "MARK_BLOCKED_AND_EVACUATE_TASKS",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        [Action::MarkBlocked, Action::Evacuate]
            .into_iter()
            .find(|a| a.wire() == s)
    }

    fn short(self) -> &'static str {
        match self {
            Action::MarkBlocked => "MARK",
            Action::Evacuate => "EVACUATE",
        }
    }
}

/// A present item as the model sees it (its timestamps are not modelled: the test's items
/// are permanent, so time never changes what a read shows).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Block {
    pub action: Action,
    /// The causes joined by `,`, in arrival order.
    pub cause: String,
}

impl Block {
    pub fn new(action: Action, cause: &str) -> Block {
        Block {
            action,
            cause: cause.to_owned(),
        }
    }

    /// The FLIP-224 merge: the stronger action; the causes as a set in arrival order.
    fn merged(&self, action: Action, cause: &str) -> Block {
        let mut causes = self.cause.clone();
        for part in cause.split(',').filter(|p| !p.is_empty()) {
            if !self.cause.split(',').any(|c| c == part) {
                causes.push(',');
                causes.push_str(part);
            }
        }
        Block {
            action: self.action.max(action),
            cause: causes,
        }
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.action.short(), self.cause)
    }
}

/// What a client asked of the one id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// `POST /blocklist/taskmanagers` with one permanent item.
    Add {
        action: Action,
        cause: String,
        merge: bool,
    },
    /// `DELETE /blocklist/taskmanagers/{id}`.
    Delete,
    /// `GET /blocklist/taskmanagers/{id}`.
    Get,
    /// `GET /blocklist/check/taskmanagers/{id}` (the task manager is never registered, so
    /// only its own item counts).
    Check,
}

impl Call {
    pub fn is_read(&self) -> bool {
        matches!(self, Call::Get | Call::Check)
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Add {
                action,
                cause,
                merge,
            } => {
                write!(f, "POST add {} {cause:?}", action.short())?;
                if *merge {
                    write!(f, " allowMerge")?;
                }
                Ok(())
            }
            Call::Delete => write!(f, "DELETE"),
            Call::Get => write!(f, "GET"),
            Call::Check => write!(f, "GET check"),
        }
    }
}

/// What the daemon answered, reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// 201.
    Created,
    /// 202, with the merged item of its body.
    Merged(Block),
    /// 409.
    Conflict,
    /// DELETE 200.
    Removed,
    /// DELETE 404.
    NotFound,
    /// GET 200 / 404, or the check's own item (none when not blocked).
    Read(Option<Block>),
    /// Anything else (a status or body the API does not give for this call): never what
    /// the model predicts.
    Unexpected(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Created => write!(f, "201"),
            Outcome::Merged(b) => write!(f, "202 {b}"),
            Outcome::Conflict => write!(f, "409"),
            Outcome::Removed => write!(f, "200"),
            Outcome::NotFound => write!(f, "404"),
            Outcome::Read(Some(b)) => write!(f, "200 {b}"),
            Outcome::Read(None) => write!(f, "not blocked"),
            Outcome::Unexpected(what) => write!(f, "unexpected: {what}"),
        }
    }
}

/// How an op ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// The daemon answered at this time (since the run's base instant).
    Answered { at: Duration, outcome: Outcome },
    /// No usable answer (the connection was cut, the request timed out, or a 5xx): the op
    /// may have taken effect or not, but not after `by` (since the run's base instant).
    Cut { why: String, by: Duration },
}

/// Something the test did to the daemons (a kill, a pause, an etcd member's death), shown
/// among the ops of a witness.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    /// Since the run's base instant.
    pub at: Duration,
    pub what: String,
}

/// One request of one client on one id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    pub client: usize,
    /// Which daemon (0 = the first started) the client sent it to.
    pub incarnation: usize,
    pub call: Call,
    /// When the request was about to be sent, since the run's base instant.
    pub invoke: Duration,
    pub end: End,
}

/// The sequential specification: the next state and the answer of `call` on `state`.
#[expect(
    clippy::ref_option,
    reason = "the state is matched as a pair with the call"
)]
fn apply(state: &Option<Block>, call: &Call) -> (Option<Block>, Outcome) {
    match (call, state) {
        (Call::Add { action, cause, .. }, None) => {
            (Some(Block::new(*action, cause)), Outcome::Created)
        }
        (Call::Add { merge: false, .. }, Some(_)) => (state.clone(), Outcome::Conflict),
        (
            Call::Add {
                action,
                cause,
                merge: true,
            },
            Some(block),
        ) => {
            let merged = block.merged(*action, cause);
            (Some(merged.clone()), Outcome::Merged(merged))
        }
        (Call::Delete, Some(_)) => (None, Outcome::Removed),
        (Call::Delete, None) => (None, Outcome::NotFound),
        (Call::Get | Call::Check, _) => (state.clone(), Outcome::Read(state.clone())),
    }
}

/// An op as the search sees it: an interval, and the answer it must give (none: cut off).
struct Event<'a> {
    invoke: Duration,
    ret: Duration,
    call: &'a Call,
    outcome: Option<&'a Outcome>,
}

/// The time an op cut off ends by when one daemon at a time runs and only it applies ops:
/// the end (kill or stop), among `ends`, of the first daemon still running when it was
/// sent. That is the daemon it went to, even when the client still held a dead daemon's
/// address and the port had been reused; ops sent while no daemon ran were refused and
/// never recorded.
pub fn end_of_daemon(invoke: Duration, ends: &[Duration]) -> Duration {
    let i = ends.partition_point(|&end| end < invoke);
    ends.get(i).copied().unwrap_or(Duration::MAX)
}

/// The one-daemon crash model: each cut-off op of `ops` took effect, if at all, by the end
/// of its daemon ([`end_of_daemon`]).
pub fn bound_by_daemon_ends(ops: &mut [Op], ends: &[Duration]) {
    for op in ops {
        if let End::Cut { by, .. } = &mut op.end {
            *by = end_of_daemon(op.invoke, ends);
        }
    }
}

/// The daemons' ends as faults: each killed and restarted, the last stopped.
pub fn daemon_ends(ends: &[Duration]) -> Vec<Fault> {
    ends.iter()
        .enumerate()
        .map(|(n, &at)| {
            let how = if n + 1 == ends.len() {
                "stopped"
            } else {
                "killed (kill -9), restarted"
            };
            Fault {
                at,
                what: format!("daemon d{n} {how}"),
            }
        })
        .collect()
}

/// The search's input, sorted by invocation: the ops sent by `until`, those answered after
/// it counting as cut off. Cut-off reads are left out: they changed nothing and showed
/// nobody anything.
fn events<'a>(ops: &[&'a Op], until: Duration) -> Vec<Event<'a>> {
    let mut events: Vec<Event<'a>> = ops
        .iter()
        .filter(|op| op.invoke <= until)
        .filter_map(|op| match &op.end {
            End::Answered { at, outcome } if *at <= until => Some(Event {
                invoke: op.invoke,
                ret: *at,
                call: &op.call,
                outcome: Some(outcome),
            }),
            _ if op.call.is_read() => None,
            _ => Some(Event {
                invoke: op.invoke,
                ret: returned(op),
                call: &op.call,
                outcome: None,
            }),
        })
        .collect();
    events.sort_by_key(|e| e.invoke);
    events
}

/// Which events are linearized: those before `next` but the `holes` (sorted), none from
/// `next` on. Events are sorted by invocation and the first ones linearize first, so the
/// holes are the ops open at once, and the cut-off ops not yet placed (which may stay open
/// long: see [`End::Cut`]) — few, whatever the history's length.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Done {
    next: usize,
    holes: Vec<usize>,
}

impl Done {
    fn with(&self, i: usize) -> Done {
        let mut done = self.clone();
        if i < done.next {
            let at = done.holes.binary_search(&i).expect("not linearized yet");
            done.holes.remove(at);
        } else {
            done.holes.extend(done.next..i);
            done.next = i + 1;
        }
        done
    }

    /// The events not linearized yet, in order.
    fn open(&self, len: usize) -> impl Iterator<Item = usize> + '_ {
        self.holes.iter().copied().chain(self.next..len)
    }

    fn all(&self, len: usize) -> bool {
        self.next == len && self.holes.is_empty()
    }
}

/// A search ran past its deadline: the history is neither accepted nor rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfTime;

/// The states a linearization of the events can leave the item in, starting from any of
/// `initial`: all of them, or (with `first_only`) the first found. Empty when the events
/// are not linearizable from there.
fn final_states(
    events: &[Event<'_>],
    initial: &HashSet<Option<Block>>,
    first_only: bool,
    deadline: Instant,
) -> Result<HashSet<Option<Block>>, OutOfTime> {
    let mut finals = HashSet::new();
    let mut seen: HashSet<(Done, Option<Block>)> = HashSet::new();
    let mut stack = Vec::new();
    for state in initial {
        let start = (
            Done {
                next: 0,
                holes: Vec::new(),
            },
            state.clone(),
        );
        seen.insert(start.clone());
        stack.push(start);
    }
    let mut steps: u32 = 0;
    while let Some((done, state)) = stack.pop() {
        steps = steps.wrapping_add(1);
        if steps.is_multiple_of(4096) && Instant::now() > deadline {
            return Err(OutOfTime);
        }
        if done.all(events.len()) {
            finals.insert(state);
            if first_only {
                break;
            }
            continue;
        }
        // Every op still open must be linearized before any op invoked after it returned.
        // `reach` is the latest invocation among the ops that could go next if the cut-off
        // ops still open were left out (none: only they are open).
        let mut bound = Duration::MAX;
        let mut answered_bound = Duration::MAX;
        let mut open = Vec::new();
        let mut scanned = Vec::new();
        for i in done.open(events.len()) {
            let e = &events[i];
            if e.invoke > answered_bound {
                break;
            }
            scanned.push(e.invoke);
            if e.outcome.is_some() {
                answered_bound = answered_bound.min(e.ret);
            }
            if e.invoke <= bound {
                bound = bound.min(e.ret);
                open.push(i);
            }
        }
        let open: Vec<usize> = open
            .into_iter()
            .filter(|&i| events[i].invoke <= bound)
            .collect();
        let reach = (answered_bound < Duration::MAX)
            .then(|| scanned.into_iter().rfind(|&at| at <= answered_bound))
            .flatten();
        // A read that may go next and matches the state goes next: moving a read to the
        // front of any linearization keeps it one, so no other order need be tried.
        let now = open.iter().copied().find(|&i| {
            let e = &events[i];
            e.call.is_read() && e.outcome == Some(&Outcome::Read(state.clone()))
        });
        if let Some(i) = now {
            let config = (done.with(i), state);
            if seen.insert(config.clone()) {
                stack.push(config);
            }
            continue;
        }
        // The likeliest linearization goes first (the stack pops the last pushed): the ops
        // in the order they were answered, and a cut-off op's effect only when nothing else
        // fits. Any order is complete; this one finds a linearization without wandering
        // first through the subsets of the cut-off ops left open.
        let mut steps: Vec<(bool, Duration, usize, Option<Block>)> = Vec::new();
        for &i in &open {
            let e = &events[i];
            let (after, answer) = apply(&state, e.call);
            match e.outcome {
                Some(outcome) if *outcome == answer => steps.push((false, e.ret, i, after)),
                Some(_) => {}
                None => {
                    // It never took effect (or took effect without changing the state).
                    // Leaving it open dominates leaving it out, as long as it can be left
                    // out whenever it stands in the way: so it is left out only when an
                    // op that could otherwise go next was invoked after its time was up,
                    // or when only cut-off ops are left.
                    if reach.is_none_or(|at| at > e.ret) {
                        steps.push((true, e.ret, i, state.clone()));
                    }
                    // Of cut-off ops alike, the one whose time is up first takes effect:
                    // leaving open the one that may take effect later dominates.
                    let sooner_twin = open.iter().any(|&j| {
                        let twin = &events[j];
                        twin.outcome.is_none() && twin.call == e.call && (twin.ret, j) < (e.ret, i)
                    });
                    if after != state && !sooner_twin {
                        steps.push((true, e.ret, i, after));
                    }
                }
            }
        }
        steps.sort_by_key(|&(cut, ret, _, _)| std::cmp::Reverse((cut, ret)));
        for (_, _, i, after) in steps {
            let config = (done.with(i), after);
            if seen.insert(config.clone()) {
                stack.push(config);
            }
        }
    }
    Ok(finals)
}

/// Every state the item could be in given the ops' actions and causes (causes in any order
/// of any subset); just absent when there are too many causes to list.
fn any_state(ops: &[Op]) -> HashSet<Option<Block>> {
    let mut causes: Vec<&str> = Vec::new();
    for op in ops {
        if let Call::Add { cause, .. } = &op.call {
            for part in cause.split(',').filter(|p| !p.is_empty()) {
                if !causes.contains(&part) {
                    causes.push(part);
                }
            }
        }
    }
    let mut states = empty();
    if causes.len() > 4 {
        return states;
    }
    let mut sequences: Vec<Vec<&str>> = vec![Vec::new()];
    let mut all = Vec::new();
    while let Some(seq) = sequences.pop() {
        for cause in &causes {
            if !seq.contains(cause) {
                let mut longer = seq.clone();
                longer.push(cause);
                all.push(longer.join(","));
                sequences.push(longer);
            }
        }
    }
    for cause in all {
        for action in [Action::MarkBlocked, Action::Evacuate] {
            states.insert(Some(Block::new(action, &cause)));
        }
    }
    states
}

/// The item before any op: absent.
fn empty() -> HashSet<Option<Block>> {
    HashSet::from([None])
}

/// Whether this id's ops are linearizable, if that is known by `deadline`.
pub fn check(ops: &[Op], deadline: Instant) -> Result<bool, OutOfTime> {
    linearizable_from(ops, &empty(), deadline)
}

fn linearizable_from(
    ops: &[Op],
    initial: &HashSet<Option<Block>>,
    deadline: Instant,
) -> Result<bool, OutOfTime> {
    linearizable_until(ops, initial, Duration::MAX, deadline)
}

/// Whether the ops sent by `until` are linearizable, those answered after it counting as
/// cut off.
fn linearizable_until(
    ops: &[Op],
    initial: &HashSet<Option<Block>>,
    until: Duration,
    deadline: Instant,
) -> Result<bool, OutOfTime> {
    let refs: Vec<&Op> = ops.iter().collect();
    Ok(!final_states(&events(&refs, until), initial, true, deadline)?.is_empty())
}

/// When an op stops constraining others: its answer, or the latest it could take effect.
fn returned(op: &Op) -> Duration {
    match &op.end {
        End::Answered { at, .. } => *at,
        End::Cut { by, .. } => *by,
    }
}

/// The quiescent moments of ops sorted by invocation: the indices of the ops invoked after
/// every earlier op returned (and 0). The ops before such a moment and those from it on
/// linearize independently of each other, the state between them aside.
fn quiet_points(ops: &[Op]) -> Vec<usize> {
    let mut points = Vec::new();
    let mut last = Duration::ZERO;
    for (i, op) in ops.iter().enumerate() {
        if i == 0 || op.invoke > last {
            points.push(i);
        }
        last = last.max(returned(op));
    }
    points
}

/// One violation [`violations`] found.
pub struct Violation {
    /// How many faults came before the answer nothing explains.
    pub faults_before: usize,
    /// Whether the witness spans a fault.
    pub across_fault: bool,
    /// The witness, rendered.
    pub report: String,
}

/// The violations of one id's history in time order, each with a witness a human can read:
/// until `max` of each kind (across a fault, and without one) are found, or the history is
/// done, or it is past `deadline` (then those found by then).
///
/// The first is found from an absent item. After each, the search resumes at the first
/// quiescent moment after its answer, from any state of the item (which a violation leaves
/// unknown), so each one found is a violation of its own.
pub fn violations(
    id: &str,
    ops: &[Op],
    faults: &[Fault],
    max: usize,
    deadline: Instant,
) -> Vec<Violation> {
    let mut sorted: Vec<Op> = ops
        .iter()
        .filter(|op| !(op.call.is_read() && matches!(op.end, End::Cut { .. })))
        .cloned()
        .collect();
    sorted.sort_by_key(|op| op.invoke);
    let any = any_state(&sorted);
    let mut initial = empty();
    let mut rest = &sorted[..];
    let mut found: Vec<Violation> = Vec::new();
    let enough = |found: &[Violation], across: bool| {
        found.iter().filter(|v| v.across_fault == across).count() >= max
    };
    while !(enough(&found, true) && enough(&found, false)) {
        let Ok(Some((violation, culprit))) =
            first_violation(id, rest, faults, &initial, &any, deadline)
        else {
            break;
        };
        found.push(violation);
        let Some(next) = quiet_points(rest)
            .into_iter()
            .find(|&i| rest[i].invoke > culprit)
        else {
            break;
        };
        rest = &rest[next..];
        initial.clone_from(&any);
    }
    found
}

/// The first violation of `ops` (sorted by invocation, cut-off reads left out) from the
/// `initial` states, and the time of the answer nothing explains.
///
/// The witness is found only by steps that keep a linearizable history linearizable, so it
/// is not linearizable either: the shortest prefix that fails (what was sent by the time of
/// that answer; ops still open then count as cut off), from the last quiescent moment from
/// which it fails whatever the item's state, without the reads it can do without (a read
/// changes nothing, so leaving one out never spoils a linearization). When no moment fails
/// whatever the state (an acknowledged write lost long before, say), it is shown from the
/// last quiescent moment before the last fault ahead of the answer, with the states the
/// earlier ops allow.
fn first_violation(
    id: &str,
    ops: &[Op],
    faults: &[Fault],
    initial: &HashSet<Option<Block>>,
    any: &HashSet<Option<Block>>,
    deadline: Instant,
) -> Result<Option<(Violation, Duration)>, OutOfTime> {
    let fails = |ops: &[Op], initial: &HashSet<Option<Block>>| {
        linearizable_from(ops, initial, deadline).map(|ok| !ok)
    };
    if !fails(ops, initial)? {
        return Ok(None);
    }
    let mut answers: Vec<Duration> = ops
        .iter()
        .filter_map(|op| match &op.end {
            End::Answered { at, .. } => Some(*at),
            End::Cut { .. } => None,
        })
        .collect();
    answers.sort();
    let prefix = |until: Duration| -> Vec<Op> {
        ops.iter()
            .filter(|op| op.invoke <= until)
            .filter_map(|op| match &op.end {
                End::Answered { at, .. } if *at > until => (!op.call.is_read()).then(|| Op {
                    end: End::Cut {
                        why: "still open".into(),
                        by: *at,
                    },
                    ..op.clone()
                }),
                _ => Some(op.clone()),
            })
            .collect()
    };
    // The first answer after which the history fails: galloping, then bisecting, so the
    // cost follows how far the violation is rather than the history's length.
    let fails_by = |i: usize| linearizable_until(ops, initial, answers[i], deadline).map(|ok| !ok);
    let mut hi = 0;
    while hi + 1 < answers.len() && !fails_by(hi)? {
        hi = 2 * hi + 1;
    }
    hi = hi.min(answers.len() - 1);
    let mut lo = hi / 2;
    while lo < hi {
        let mid = usize::midpoint(lo, hi);
        if fails_by(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let culprit = answers[lo];
    let last_fault = faults.iter().map(|f| f.at).rfind(|&at| at < culprit);
    let spare_read =
        |op: &Op| op.call.is_read() && matches!(op.end, End::Answered { at, .. } if at < culprit);
    // The last quiescent moment from which the ops fail whatever the state. Failing from
    // one moment implies failing from every earlier one, so it is found by galloping back
    // from the end and bisecting.
    let universal = |ops: &[Op]| -> Result<Option<usize>, OutOfTime> {
        let points = quiet_points(ops);
        let fails_from = |k: usize| fails(&ops[points[k]..], any);
        let (mut step, mut passes) = (1, points.len());
        let mut failing = loop {
            let k = points.len().saturating_sub(step);
            if fails_from(k)? {
                break k;
            }
            if k == 0 {
                return Ok(None);
            }
            passes = k;
            step *= 2;
        };
        while passes - failing > 1 {
            let mid = usize::midpoint(failing, passes);
            if fails_from(mid)? {
                failing = mid;
            } else {
                passes = mid;
            }
        }
        Ok(Some(points[failing]))
    };
    // Leaves out the spare reads the witness fails without: in long runs first (most are
    // far from the violation and go together), then in ever shorter ones, down to one.
    let without_spare_reads =
        |witness: Vec<Op>, initial: &HashSet<Option<Block>>| -> Result<Vec<Op>, OutOfTime> {
            let mut keep = vec![true; witness.len()];
            let kept = |keep: &[bool]| -> Vec<Op> {
                witness
                    .iter()
                    .zip(keep)
                    .filter(|(_, &k)| k)
                    .map(|(op, _)| op.clone())
                    .collect()
            };
            let mut run = witness.iter().filter(|op| spare_read(op)).count();
            while run > 0 {
                let reads: Vec<usize> = (0..witness.len())
                    .filter(|&i| keep[i] && spare_read(&witness[i]))
                    .collect();
                for block in reads.chunks(run).rev() {
                    for &i in block {
                        keep[i] = false;
                    }
                    if !fails(&kept(&keep), initial)? {
                        for &i in block {
                            keep[i] = true;
                        }
                    }
                }
                run /= 2;
            }
            Ok(kept(&keep))
        };
    let whole = prefix(culprit);
    let (witness, split, allowed) = if let Some(split) = universal(&whole)? {
        let witness = without_spare_reads(whole[split..].to_vec(), any)?;
        let split = universal(&witness)?.unwrap_or(0);
        (witness, split, "whatever the item was".to_owned())
    } else {
        let witness = without_spare_reads(whole, initial)?;
        let until = last_fault.unwrap_or(culprit);
        let split = quiet_points(&witness)
            .into_iter()
            .rfind(|&i| witness[i].invoke <= until)
            .unwrap_or(0);
        let refs: Vec<&Op> = witness[..split].iter().collect();
        let mut states: Vec<String> =
            final_states(&events(&refs, Duration::MAX), initial, false, deadline)?
                .iter()
                .map(|s| s.as_ref().map_or("absent".to_owned(), Block::to_string))
                .collect();
        states.sort();
        let allowed = format!(
            "the {split} earlier ops leave the item {}",
            states.join(" or ")
        );
        (witness, split, allowed)
    };
    let quiet = witness[split].invoke;
    let shown: Vec<&Op> = witness[split..].iter().collect();
    let faults_before = faults.iter().filter(|f| f.at < culprit).count();
    let mut report = format!(
        "{id}: not linearizable after {faults_before} faults: nothing explains the answer at \
         {} ms. A witness from {} ms, when no op was open; {allowed}:\n",
        ms(culprit),
        ms(quiet),
    );
    report.push_str(&render(&shown, faults, quiet, culprit));
    let violation = Violation {
        faults_before,
        across_fault: faults.iter().any(|f| quiet < f.at && f.at < culprit),
        report,
    };
    Ok(Some((violation, culprit)))
}

/// Lines of ops sorted by invocation, with the faults between them.
pub fn render(ops: &[&Op], faults: &[Fault], from: Duration, until: Duration) -> String {
    let mut lines: Vec<(Duration, String)> = ops
        .iter()
        .map(|op| {
            let (ret, answer) = match &op.end {
                End::Answered { at, outcome } => (format!("{:>10}", ms(*at)), outcome.to_string()),
                End::Cut { why, by } => (
                    format!("{:>10}", "?"),
                    format!("no answer ({why}; took effect by {} ms, or never)", ms(*by)),
                ),
            };
            let line = format!(
                "[{:>10}, {ret}] c{} d{}  {} → {answer}",
                ms(op.invoke),
                op.client,
                op.incarnation,
                op.call
            );
            (op.invoke, line)
        })
        .collect();
    for fault in faults {
        if fault.at >= from && fault.at <= until {
            lines.push((fault.at, format!("{:>10} ms  {}", ms(fault.at), fault.what)));
        }
    }
    lines.sort_by_key(|(at, _)| *at);
    let mut out = String::new();
    for (_, line) in lines {
        out.push_str("    ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Milliseconds with one decimal.
pub fn ms(at: Duration) -> String {
    format!("{:.1}", at.as_secs_f64() * 1000.0)
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;

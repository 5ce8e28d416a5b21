//! Leader election under faults (issue 24): three candidates campaign for one lock key
//! (`reliability::leadership`), five observers follow it with `LOCK.OBSERVE`, and the
//! whole history is judged: fences increase across leaders, no two leaderships certainly
//! live at once, no older fenced work admitted after newer, every observation a state
//! the server really had, every observer answered once per change and ending on the last
//! leader, every long leadership seen by every observer, the server's log of the leaders'
//! work in fence order. Each fault is its own test: `kill -9` of the leader's process and
//! SIGSTOP of it past its lease (candidates are child processes of this test binary:
//! `candidate_process`), `kill -9` of the server and a restart from its AOF, and
//! `kill -9` of the primary with promotion of its replica (grants confirmed by `WAIT 1`,
//! as in `failover`). `an_election_checker_catches_*` show the checks can fail.

use std::collections::HashMap;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::failover::kill_primary_and_promote;
use crate::reliability::leadership::{
    self, Act, Answer, CandidateSpec, Client, Event, Figures, Shared, CHILD_ENV, KEY, LOG,
};
use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::{pick, seconds};
use crate::reliability::target::Target;
use testkit::*;

const OBSERVERS: usize = 5;
const OBSERVE_BLOCK_MS: i64 = 1_000;
/// Client ids: candidates from 0, observers from here, the final leader this one.
const FIRST_OBSERVER: usize = 1_000;
const FINAL_LEADER: usize = 999;

/// Not a test of its own: the body of a candidate process, which the election tests
/// start by running this binary with `--exact election::candidate_process --ignored`
/// and `CHILD_ENV` set. Without it, it does nothing.
#[test]
#[ignore = "a candidate process, started by the election tests"]
fn candidate_process() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        leadership::child_main(&spec);
    }
}

type Last = Arc<Mutex<Option<(i64, String)>>>;

/// Observer threads, each with its own connection, following their own target.
struct Observers {
    target: Arc<Target>,
    last: Vec<(usize, Last)>,
    threads: Vec<JoinHandle<()>>,
}

impl Observers {
    fn start(port: u16, history: &Shared) -> Self {
        let target = Arc::new(Target::new(port));
        let mut last = Vec::new();
        let mut threads = Vec::new();
        for id in FIRST_OBSERVER..FIRST_OBSERVER + OBSERVERS {
            let seen: Last = Arc::default();
            last.push((id, seen.clone()));
            let mut client = Client::new(id, target.clone(), Duration::from_secs(3), false);
            let mut sink = history.clone();
            threads.push(thread::spawn(move || {
                leadership::run_observer(&mut client, OBSERVE_BLOCK_MS, &mut sink, &seen);
            }));
        }
        Observers {
            target,
            last,
            threads,
        }
    }

    fn states(&self) -> Vec<(usize, Option<(i64, String)>)> {
        self.last
            .iter()
            .map(|(id, seen)| {
                (
                    *id,
                    seen.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                )
            })
            .collect()
    }

    fn finish(self) -> Vec<(usize, Option<(i64, String)>)> {
        self.target.stop();
        for thread in self.threads {
            thread.join().expect("observer panicked");
        }
        self.last
            .iter()
            .map(|(id, seen)| {
                (
                    *id,
                    seen.lock().unwrap_or_else(PoisonError::into_inner).clone(),
                )
            })
            .collect()
    }
}

/// One candidate process and the thread reading its events.
struct Process {
    /// Killed on drop (a failing test) and with the test process.
    child: testkit::Guarded,
    stdin: Option<ChildStdin>,
    reader: JoinHandle<Vec<Event>>,
}

/// Candidate processes against one server port; a killed one is replaced by a new one
/// (a new id).
struct Processes {
    port: u16,
    spec: CandidateSpec,
    history: Shared,
    running: HashMap<usize, Process>,
    next_id: usize,
}

impl Processes {
    fn start(port: u16, count: usize, spec: &CandidateSpec, history: &Shared) -> Self {
        let mut processes = Processes {
            port,
            spec: spec.clone(),
            history: history.clone(),
            running: HashMap::new(),
            next_id: 0,
        };
        for _ in 0..count {
            processes.spawn();
        }
        processes
    }

    fn spawn(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let exe = std::env::current_exe().expect("the test binary");
        let spec = leadership::child_spec(self.port, id, 0xe1ec_7000 + id as u64, &self.spec);
        let mut child = testkit::Guarded::spawn(
            Command::new(exe)
                .args(["election::candidate_process", "--exact", "--ignored"])
                .args(["--nocapture", "--test-threads", "1", "-q"])
                .env(CHILD_ENV, spec)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        )
        .expect("start a candidate process");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take();
        let reader = thread::spawn(move || leadership::read_child(stdout));
        self.running.insert(
            id,
            Process {
                child,
                stdin,
                reader,
            },
        );
    }

    fn pid(&self, id: usize) -> u32 {
        self.running[&id].child.id()
    }

    /// SIGKILL of candidate `id`; a new candidate takes its place.
    fn kill(&mut self, id: usize) {
        let mut process = self.running.remove(&id).expect("a running candidate");
        process.child.kill().expect("SIGKILL");
        let _ = process.child.wait();
        self.history
            .extend(process.reader.join().expect("reader panicked"));
        self.spawn();
    }

    /// Closes every candidate's stdin (they stop after their current command) and
    /// collects their events.
    fn finish(self) {
        for (_, mut process) in self.running {
            drop(process.stdin.take());
            let events = process.reader.join().expect("reader panicked");
            let _ = process.child.wait();
            self.history.extend(events);
        }
    }
}

/// Candidate threads in this process, on a target the fault driver can move.
struct Threads {
    target: Arc<Target>,
    threads: Vec<JoinHandle<()>>,
}

impl Threads {
    fn start(
        port: u16,
        count: usize,
        spec: &CandidateSpec,
        history: &Shared,
        confirm: bool,
    ) -> Self {
        let target = Arc::new(Target::new(port));
        let threads = (0..count)
            .map(|id| {
                let mut client = Client::new(id, target.clone(), Duration::from_secs(3), confirm);
                let mut sink = history.clone();
                let spec = spec.clone();
                thread::spawn(move || {
                    leadership::run_candidate(
                        &mut client,
                        &spec,
                        0xe1ec_7000 + id as u64,
                        &mut sink,
                    );
                })
            })
            .collect();
        Threads { target, threads }
    }

    fn finish(self) {
        self.target.stop();
        for thread in self.threads {
            thread.join().expect("candidate panicked");
        }
    }
}

/// The current leader by the server: (candidate id, fence), from its value `c<id>.<n>…`.
fn leader(con: &mut Connection) -> Option<(usize, i64)> {
    let (fence, value): (i64, Option<String>) = cmd("LOCK.OBSERVE").arg(KEY).query(con).ok()?;
    let id = value?.strip_prefix('c')?.split('.').next()?.parse().ok()?;
    (fence > 0).then_some((id, fence))
}

/// Waits for a leader whose fence is not `other`; (id, fence, when).
fn next_leader(con: &mut Connection, other: i64) -> (usize, i64, Instant) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((id, fence)) = leader(con).filter(|(_, fence)| *fence != other) {
            return (id, fence, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "no new leader after fence {other}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Ends a run whose candidates have stopped: a last leader takes the lock (after any
/// lease left behind ran out) and proclaims; every observer must come to that state.
/// Then the whole history is judged, with the server's log of the leaders' work.
/// `node` is the server's generation (failovers so far), as the clients' targets count.
fn conclude(
    port: u16,
    node: usize,
    history: &Shared,
    observers: Observers,
) -> (Vec<Event>, Vec<String>) {
    let target = Arc::new(Target::new(port));
    for _ in 0..node {
        target.move_to(port);
    }
    let mut last_leader = Client::new(FINAL_LEADER, target, Duration::from_secs(10), false);
    let mut sink = history.clone();
    let value = format!("c{FINAL_LEADER}.1");
    let act = Act::Campaign {
        ttl_ms: 60_000,
        block_ms: 5_000,
        value: value.clone(),
    };
    let granted = last_leader.send(act, &mut sink).map(|e| e.answer);
    let Some(Answer::Granted { token, .. }) = granted else {
        panic!("the last leader was not granted: {granted:?}");
    };
    let proclaim = Act::Proclaim {
        token,
        value: format!("{value}.p1"),
    };
    let proclaimed = last_leader.send(proclaim, &mut sink).map(|e| e.answer);
    assert_eq!(
        proclaimed,
        Some(Answer::Int(1)),
        "the last leader's proclaim"
    );
    let mut con = connect(port);
    let (fence, seen): (i64, Option<String>) = cmd("LOCK.OBSERVE")
        .arg(KEY)
        .query(&mut con)
        .expect("OBSERVE");
    let truth = (fence, seen.unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && !leadership::final_states(&observers.states(), &truth).is_empty()
    {
        thread::sleep(Duration::from_millis(5));
    }
    let last = observers.finish();
    let events = history.snapshot();
    let mut anomalies = leadership::check(&events);
    anomalies.extend(leadership::final_states(&last, &truth));
    let log: Vec<String> = cmd("LRANGE")
        .arg(LOG)
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .expect("LRANGE");
    anomalies.extend(leadership::log_in_order(&log));
    (events, anomalies)
}

struct LogOnPanic<'a>(&'a Server);
impl Drop for LogOnPanic<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("SERVER LOG:\n{}", self.0.log());
        }
    }
}

fn connect(port: u16) -> Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|client| client.get_connection())
        .expect("connect")
}

fn load(spec: &CandidateSpec, how: &str) -> String {
    format!(
        "3 candidates ({how}), {OBSERVERS} observers (BLOCK {OBSERVE_BLOCK_MS} ms); {}",
        spec.describe()
    )
}

fn percentile_ms(mut values: Vec<u128>, p: f64) -> u128 {
    values.sort_unstable();
    let at = ((values.len() as f64 - 1.0) * p).round() as usize;
    values.get(at).copied().unwrap_or(0)
}

#[test]
fn kill_9_of_the_leaders_process() {
    let server = Server::start();
    let spec = CandidateSpec::standard();
    let history = Shared::default();
    let observers = Observers::start(server.port, &history);
    let mut candidates = Processes::start(server.port, 3, &spec, &history);
    let mut con = server.connect();
    let _guard = LogOnPanic(&server);
    let rounds = pick(3, 12);
    let mut takeovers = Vec::new();
    for _ in 0..rounds {
        thread::sleep(Duration::from_millis(800));
        let (id, fence, _) = next_leader(&mut con, 0);
        let killed = Instant::now();
        candidates.kill(id);
        let (_, _, next) = next_leader(&mut con, fence);
        takeovers.push(next.duration_since(killed).as_millis());
    }
    thread::sleep(Duration::from_millis(800));
    candidates.finish();
    let (events, anomalies) = conclude(server.port, 0, &history, observers);
    let figures = Figures::of(&events);
    Summary {
        scenario: "election, leader kill -9",
        fault: format!("{rounds} x SIGKILL of the leader's process (a new candidate replaces it)"),
        load: load(&spec, "child processes"),
        ops: events.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{}; next leader after a kill (ms): max {} median {}",
            figures.describe(),
            takeovers.iter().max().copied().unwrap_or(0),
            percentile_ms(takeovers.clone(), 0.5)
        ),
    }
    .emit();
    assert_none("election under kill -9 of the leader", &anomalies);
    assert!(figures.leaderships > rounds, "{figures:?}");
    assert!(figures.proclaims > 0, "nobody proclaimed: {figures:?}");
}

#[test]
fn sigstop_of_the_leader_past_its_lease() {
    let server = Server::start();
    // Leaders compute longer between their deadline check and their write, so that most
    // pauses freeze one there (and it writes late, with its old fence).
    let spec = CandidateSpec {
        work_ms: (80, 150),
        ..CandidateSpec::standard()
    };
    let history = Shared::default();
    let observers = Observers::start(server.port, &history);
    let candidates = Processes::start(server.port, 3, &spec, &history);
    let mut con = server.connect();
    let rounds = pick(5, 12);
    let pause = Duration::from_millis(3 * spec.ttl_ms as u64);
    let mut replaced_during_pause = 0;
    for _ in 0..rounds {
        thread::sleep(Duration::from_millis(600));
        let (id, fence, _) = next_leader(&mut con, 0);
        let pid = candidates.pid(id);
        signal_process(pid, "-STOP");
        let stopped = Instant::now();
        let (_, _, next) = next_leader(&mut con, fence);
        if next.duration_since(stopped) < pause {
            replaced_during_pause += 1;
        }
        thread::sleep(pause.saturating_sub(stopped.elapsed()));
        signal_process(pid, "-CONT");
    }
    thread::sleep(Duration::from_millis(800));
    candidates.finish();
    let (events, anomalies) = conclude(server.port, 0, &history, observers);
    let figures = Figures::of(&events);
    Summary {
        scenario: "election, leader SIGSTOP",
        fault: format!(
            "{rounds} x SIGSTOP of the leader's process for {} ms (3 leases), then SIGCONT",
            pause.as_millis()
        ),
        load: load(&spec, "child processes"),
        ops: events.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{}; a new leader took over during {replaced_during_pause} of {rounds} pauses",
            figures.describe()
        ),
    }
    .emit();
    assert_none("election under SIGSTOP of the leader", &anomalies);
    assert!(
        figures.stale_refused > 0,
        "no paused leader's late work was refused: the pauses tested nothing ({figures:?})"
    );
}

#[test]
fn kill_9_and_restart_of_the_server_with_aof_always() {
    let mut server = Server::with_args(&aof_always("yes"));
    let spec = CandidateSpec::standard();
    let history = Shared::default();
    let observers = Observers::start(server.port, &history);
    let candidates = Processes::start(server.port, 3, &spec, &history);
    let rounds = pick(2, 8);
    let mut downtime = Vec::new();
    for _ in 0..rounds {
        thread::sleep(seconds(1, 2));
        let killed = Instant::now();
        server.kill();
        server.restart();
        downtime.push(killed.elapsed().as_millis());
    }
    thread::sleep(Duration::from_millis(800));
    candidates.finish();
    let (events, anomalies) = conclude(server.port, 0, &history, observers);
    let figures = Figures::of(&events);
    Summary {
        scenario: "election, server kill -9",
        fault: format!(
            "{rounds} x kill -9 of redis-server (AOF always), restarted (down {downtime:?} ms)"
        ),
        load: load(&spec, "child processes"),
        ops: events.len(),
        anomalies: anomalies.len(),
        notes: figures.describe(),
    }
    .emit();
    assert_none("election across server restarts", &anomalies);
    assert!(figures.leaderships > rounds, "{figures:?}");
    assert!(
        figures.unknown > 0,
        "no command was cut by a kill: {figures:?}"
    );
}

#[test]
fn kill_9_of_the_primary_and_promotion_of_its_replica() {
    let spec = CandidateSpec::standard();
    let history = Shared::default();
    let (mut primary, mut replica) = primary_and_replica();
    let observers = Observers::start(primary.port, &history);
    let candidates = Threads::start(primary.port, 3, &spec, &history, true);
    let rounds = pick(2, 4);
    for _ in 0..rounds {
        thread::sleep(seconds(1, 3));
        kill_primary_and_promote(&mut primary, &replica, &[], || {});
        candidates.target.move_to(replica.port);
        observers.target.move_to(replica.port);
        primary = replica;
        replica = Server::start();
        replica.replicate_from(&primary);
    }
    thread::sleep(Duration::from_millis(800));
    candidates.finish();
    let (events, anomalies) = conclude(primary.port, rounds, &history, observers);
    let figures = Figures::of(&events);
    let unconfirmed = events.iter().filter(|e| !e.confirmed).count();
    Summary {
        scenario: "election, failover",
        fault: format!("{rounds} x (replica frozen 300 ms, primary SIGKILL, REPLICAOF NO ONE)"),
        load: load(&spec, "threads, answers confirmed by WAIT 1"),
        ops: events.len(),
        anomalies: anomalies.len(),
        notes: format!(
            "{}; {unconfirmed} answers not confirmed by the replica",
            figures.describe()
        ),
    }
    .emit();
    assert_none("election across failovers", &anomalies);
    assert!(figures.leaderships > rounds, "{figures:?}");
    assert!(
        unconfirmed > 0,
        "the failovers put nothing at risk: {figures:?}"
    );
}

// ---- the checks can fail --------------------------------------------------------------

const MS: i64 = 1_000;

fn event(client: usize, act: Act, from_ms: i64, to_ms: i64, answer: Answer) -> Event {
    Event {
        client,
        act,
        invoked_us: from_ms * MS,
        completed_us: to_ms * MS,
        answer,
        node: 0,
        confirmed: true,
    }
}

fn campaign(client: usize, value: &str, at_ms: i64, token: &str, fence: i64) -> Event {
    let act = Act::Campaign {
        ttl_ms: 100,
        block_ms: 1_000,
        value: value.into(),
    };
    let answer = Answer::Granted {
        token: token.into(),
        fence,
    };
    event(client, act, at_ms, at_ms + 1, answer)
}

fn resign(client: usize, token: &str, at_ms: i64) -> Event {
    let act = Act::Resign {
        token: token.into(),
    };
    event(client, act, at_ms, at_ms + 1, Answer::Int(1))
}

fn observe(client: usize, known: (i64, &str), at_ms: i64, seen: (i64, Option<&str>)) -> Event {
    let act = Act::Observe {
        fence: known.0,
        value: known.1.into(),
        block_ms: 1_000,
    };
    let answer = Answer::Observed {
        fence: seen.0,
        value: seen.1.map(Into::into),
    };
    event(client, act, at_ms, at_ms + 1, answer)
}

fn work(client: usize, fence: i64, at_ms: i64, answer: Answer) -> Event {
    let act = Act::Work {
        fence,
        entry: format!("{fence}:c{client}:1"),
    };
    event(client, act, at_ms, at_ms + 1, answer)
}

/// Two leaders one after the other, each seen by the observer (client 9).
fn good_history() -> Vec<Event> {
    vec![
        observe(9, (0, ""), 0, (10, Some("c1.1"))),
        campaign(1, "c1.1", 0, "a", 10),
        work(1, 10, 5, Answer::Admitted),
        resign(1, "a", 20),
        observe(9, (10, "c1.1"), 20, (0, None)),
        campaign(2, "c2.1", 30, "b", 20),
        observe(9, (0, ""), 30, (20, Some("c2.1"))),
        work(2, 20, 35, Answer::Admitted),
        work(
            1,
            10,
            40,
            Answer::Stale("STALE fence is below the highest admitted (20)".into()),
        ),
    ]
}

#[test]
fn an_election_checker_passes_a_clean_history() {
    let anomalies = leadership::check(&good_history());
    assert!(anomalies.is_empty(), "{anomalies:?}");
    let last = [(9, Some((20, "c2.1".to_string())))];
    assert!(leadership::final_states(&last, &(20, "c2.1".into())).is_empty());
    let log = ["10:c1:1".to_string(), "20:c2:1".to_string()];
    assert!(leadership::log_in_order(&log).is_empty());
}

#[test]
fn an_election_checker_catches_two_leaders_at_once() {
    let mut history = good_history();
    // A third leader granted inside the second one's 100 ms lease.
    history.push(campaign(3, "c3.1", 50, "c", 30));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies.iter().any(|a| a.contains("holders at once")),
        "{anomalies:?}"
    );
}

#[test]
fn an_election_checker_catches_a_fence_that_went_down_across_leaders() {
    let mut history = good_history();
    history.push(campaign(3, "c3.1", 300, "c", 15));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies
            .iter()
            .any(|a| a.contains("fence did not increase")),
        "{anomalies:?}"
    );
}

#[test]
fn an_election_checker_catches_stale_observers() {
    // Asked after the second leader's grant was acknowledged, answered the first leader.
    let mut history = good_history();
    history.push(observe(8, (0, ""), 40, (10, Some("c1.1"))));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies
            .iter()
            .any(|a| a.contains("stale observation: fence 10 after fence 20")),
        "{anomalies:?}"
    );
    // "Free" while the second leader certainly held (30..131 ms).
    let mut history = good_history();
    history.push(observe(8, (20, "c2.1"), 40, (0, None)));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies
            .iter()
            .any(|a| a.contains("stale observation: free")),
        "{anomalies:?}"
    );
    // The leader's value from before a proclaim acknowledged before the question.
    let mut history = good_history();
    let proclaim = Act::Proclaim {
        token: "b".into(),
        value: "c2.1.p1".into(),
    };
    history.push(event(2, proclaim, 40, 41, Answer::Int(1)));
    history.push(observe(8, (0, ""), 45, (20, Some("c2.1"))));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies.iter().any(|a| a.contains("after proclaim 1")),
        "{anomalies:?}"
    );
    // An observer that ends on the first leader.
    let last = [(9, Some((10, "c1.1".to_string())))];
    assert_eq!(
        leadership::final_states(&last, &(20, "c2.1".into())).len(),
        1
    );
}

#[test]
fn an_election_checker_catches_double_answers_and_unreal_states() {
    let mut history = good_history();
    // Answered with what it already knew, then the same state again.
    history.push(observe(9, (20, "c2.1"), 40, (20, Some("c2.1"))));
    history.push(observe(7, (0, ""), 36, (20, Some("c2.1"))));
    history.push(observe(7, (0, ""), 37, (20, Some("c2.1"))));
    // A value nobody campaigned with, and a fence the campaign was not granted.
    history.push(observe(6, (0, ""), 38, (20, Some("c5.1"))));
    history.push(observe(5, (0, ""), 38, (21, Some("c2.1"))));
    let anomalies = leadership::check(&history);
    for expected in [
        "answered without a change",
        "answered twice with one state",
        "a value nobody campaigned with",
        "was granted fence 20, observed with 21",
    ] {
        assert!(
            anomalies.iter().any(|a| a.contains(expected)),
            "{expected}: {anomalies:?}"
        );
    }
}

#[test]
fn an_election_checker_catches_older_work_admitted_after_newer() {
    let mut history = good_history();
    history.push(work(1, 10, 50, Answer::Admitted));
    let anomalies = leadership::check(&history);
    assert!(
        anomalies
            .iter()
            .any(|a| a.contains("older fenced work admitted")),
        "{anomalies:?}"
    );
    let log = ["20:c2:1".to_string(), "10:c1:2".to_string()];
    assert_eq!(leadership::log_in_order(&log).len(), 1);
}

#[test]
fn an_election_checker_catches_an_observer_that_missed_a_long_leader() {
    // A leader certainly held 600 ms (refreshed), while the observer answered before
    // and after without ever seeing it.
    let history = vec![
        observe(9, (0, ""), 0, (0, None)),
        event(
            1,
            Act::Campaign {
                ttl_ms: 700,
                block_ms: 0,
                value: "c1.1".into(),
            },
            10,
            11,
            Answer::Granted {
                token: "a".into(),
                fence: 10,
            },
        ),
        resign(1, "a", 650),
        observe(9, (0, ""), 700, (20, Some("c2.1"))),
        campaign(2, "c2.1", 690, "b", 20),
    ];
    let anomalies = leadership::check(&history);
    assert!(
        anomalies.iter().any(|a| a.contains("never saw fence 10")),
        "{anomalies:?}"
    );
}

#[test]
fn candidate_events_survive_the_trip_through_a_pipe() {
    let history = good_history();
    for event in &history {
        let line = leadership::encode(event);
        let back = leadership::decode(&line).expect("decodes");
        assert_eq!(leadership::encode(&back), line);
        assert_eq!(back.answer, event.answer);
        assert_eq!(back.act, event.act);
    }
}

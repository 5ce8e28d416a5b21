//! What a command costs as a shared lock grows: per-holder commands (refresh, the
//! same-token retry, release, `LOCK.FENCE` and `LOCK.GUARD` with a token, `LOCK.INFO`,
//! a new holder) at 10,000 holders cost about what they cost at 10, and one release that
//! hands a lock to thousands of queued readers with chosen tokens costs about what it
//! costs with generated ones. Measured as the server's own time per call (`INFO
//! commandstats`), so the network does not count; the bounds leave room for a busy
//! machine and still catch a return to scanning (10,000 holders cost 30–90× before).
//! And an AOF without the RDB preamble loads a shared lock in O(n log n), and
//! `LOCK.INFO` counts thousands of waiters without walking them, a wait's deadlock
//! check does not walk thousands of one session's waits, and `LOCK.DONE` answers its
//! key's waiting duplicates without walking thousands of waits for other keys.
//!
//! These are claims about growth, not about speed: each compares a small and a large
//! state, both built first and then measured in alternating rounds, and takes the
//! least of the rounds on each side. A busy machine only ever adds time (a server
//! descheduled inside a command counts in its figure), and a moment of it lands in
//! one round, not in all of them; the least is the command's own cost. What a command
//! costs in absolute terms, and its whole curve, is the benchmark's to say
//! (`make bench`, scenario 6, `bench/src/measure/curves.rs`: the holders curve's
//! `RefreshHolder`, `ReacquireHolder`, `NewPermit` and `InfoSemaphore`, and the
//! waiters curve's `InfoQueue`, each with a growth target).

use std::time::{Duration, Instant};

use testkit::resp::RawClient;

use crate::reliability::scale::pick;
use testkit::*;

/// The server's mean time per call of `command`, in µs, since the last reset.
fn usec_per_call(con: &mut Connection, command: &str) -> f64 {
    let line = info_field(con, "commandstats", &format!("cmdstat_{command}"))
        .unwrap_or_else(|| panic!("no calls of {command}"));
    line.split(',')
        .find_map(|field| field.strip_prefix("usec_per_call="))
        .and_then(|value| value.parse().ok())
        .expect("usec_per_call")
}

/// Runs `argv` `times` times, pipelined.
fn repeat(con: &mut Connection, argv: &[String], times: usize) {
    let mut pipe = redis::pipe();
    for _ in 0..times {
        pipe.cmd(&argv[0]).arg(&argv[1..]).ignore();
    }
    let _: () = pipe.query(con).expect("pipeline");
}

/// `holders` readers of `rw` with the chosen tokens `reader-000000`…, pipelined in
/// rounds of 10,000.
fn readers(con: &mut Connection, holders: usize) {
    for chunk in (0..holders).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("LOCK.ACQUIRE")
                .arg("rw")
                .arg(600_000)
                .arg("SHARED")
                .arg("TOKEN")
                .arg(format!("reader-{i:06}"))
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
}

/// Rounds of each comparison: the least of them is compared (see the file's header).
const ROUNDS: usize = 5;
/// Calls of a command per round.
const CALLS: usize = 500;

/// Element-wise least of `rounds` runs of `round` on the small side and on the large,
/// alternating.
fn least_of_rounds<S, L>(
    rounds: usize,
    mut small: impl FnMut() -> S,
    mut large: impl FnMut() -> L,
) -> (Vec<f64>, Vec<f64>)
where
    S: IntoIterator<Item = f64>,
    L: IntoIterator<Item = f64>,
{
    let least = |best: &mut Vec<f64>, costs: Vec<f64>| {
        if best.is_empty() {
            *best = costs;
        } else {
            for (b, c) in best.iter_mut().zip(costs) {
                *b = b.min(c);
            }
        }
    };
    let (mut small_best, mut large_best) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        least(&mut small_best, small().into_iter().collect());
        least(&mut large_best, large().into_iter().collect());
    }
    (small_best, large_best)
}

/// A lock with `holders` chosen tokens, and the per-holder commands to time on it.
struct HolderCosts {
    _server: Server,
    con: Connection,
    commands: Vec<(&'static str, Vec<String>)>,
}

/// Names of the figures a `HolderCosts` round gives, in order.
const HOLDER_COSTS: [&str; 7] = [
    "lock.refresh",
    "lock.acquire",
    "lock.fence",
    "lock.guard",
    "lock.info",
    "lock.release",
    "lock.acquire (new holder)",
];

impl HolderCosts {
    fn build(holders: usize) -> Self {
        let server = Server::with_module_args(&[], &["max-holders", "100000"]);
        let mut con = server.connect();
        readers(&mut con, holders);
        // The newest holder: the far end of any scan in grant order.
        let last = format!("reader-{:06}", holders - 1);
        let argv = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let commands = vec![
            (
                "lock.refresh",
                argv(&["LOCK.REFRESH", "rw", &last, "600000"]),
            ),
            (
                "lock.acquire",
                argv(&["LOCK.ACQUIRE", "rw", "600000", "SHARED", "TOKEN", &last]),
            ),
            ("lock.fence", argv(&["LOCK.FENCE", "rw", &last])),
            (
                "lock.guard",
                argv(&["LOCK.GUARD", "rw", &last, "ECHO", "x"]),
            ),
            ("lock.info", argv(&["LOCK.INFO", "rw"])),
        ];
        HolderCosts {
            _server: server,
            con,
            commands,
        }
    }

    /// One round: the cost of each command of `HOLDER_COSTS`, in µs per call. Every
    /// round leaves the lock as it found it.
    fn round(&mut self) -> Vec<f64> {
        let con = &mut self.con;
        let mut costs = Vec::new();
        for (name, command) in &self.commands {
            let _: () = cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
            repeat(con, command, CALLS);
            costs.push(usec_per_call(con, name));
        }
        // A holder leaves and another comes, each with a chosen token (an even
        // number of times: `reader-000000` holds again at the end).
        let _: () = cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
        let mut pipe = redis::pipe();
        for i in 0..CALLS {
            let (leaving, coming) = if i % 2 == 0 {
                ("reader-000000", "extra")
            } else {
                ("extra", "reader-000000")
            };
            pipe.cmd("LOCK.RELEASE").arg("rw").arg(leaving).ignore();
            pipe.cmd("LOCK.ACQUIRE")
                .arg("rw")
                .arg(600_000)
                .arg("SHARED")
                .arg("TOKEN")
                .arg(coming)
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
        costs.push(usec_per_call(con, "lock.release"));
        costs.push(usec_per_call(con, "lock.acquire"));
        costs
    }
}

#[test]
fn per_holder_commands_cost_the_same_at_10_and_10000_holders() {
    let (mut small, mut large) = (HolderCosts::build(10), HolderCosts::build(10_000));
    let (at_10, at_10000) = least_of_rounds(ROUNDS, || small.round(), || large.round());
    for ((name, at_10), at_10000) in HOLDER_COSTS.iter().zip(at_10).zip(at_10000) {
        eprintln!("{name}: {at_10:.2} µs at 10 holders, {at_10000:.2} µs at 10,000");
        // A floor of 1 µs: below it the ratio is timer noise.
        assert!(
            at_10000 <= 5.0 * at_10.max(1.0),
            "{name}: {at_10000:.2} µs at 10,000 holders against {at_10:.2} µs at 10"
        );
    }
}

/// A lock that a writer holds and hands, with one `LOCK.RELEASE`, to `readers` queued
/// readers (with chosen or generated tokens), again each round.
struct Handoff {
    _server: Server,
    con: Connection,
    waiters: Vec<RawClient>,
    chosen_tokens: bool,
    /// The tokens the readers hold after a handoff, to release them with.
    held: Vec<String>,
}

impl Handoff {
    fn build(readers: usize, chosen_tokens: bool) -> Self {
        let server = Server::with_args(&["maxclients", "10100"]);
        let con = server.connect();
        let waiters = (0..readers)
            .map(|_| RawClient::connect(server.port))
            .collect();
        Handoff {
            _server: server,
            con,
            waiters,
            chosen_tokens,
            held: Vec::new(),
        }
    }

    /// Server time of the one `LOCK.RELEASE` that grants every queued reader, in ms.
    fn round(&mut self) -> [f64; 1] {
        let con = &mut self.con;
        // Last round's readers leave; the writer takes the lock.
        if !self.held.is_empty() {
            let mut pipe = redis::pipe();
            for token in self.held.drain(..) {
                pipe.cmd("LOCK.RELEASE").arg("rw").arg(token).ignore();
            }
            let _: () = pipe.query(con).unwrap();
        }
        let (writer, _) = acquire(con, "rw", 600_000, &[]).expect("the writer holds");
        for (i, waiter) in self.waiters.iter_mut().enumerate() {
            let token = format!("reader-{i:06}");
            let mut argv = vec!["LOCK.ACQUIRE", "rw", "600000", "SHARED"];
            if self.chosen_tokens {
                argv.extend(["TOKEN", &token]);
            }
            argv.extend(["BLOCK", "0"]);
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            waiter.send(&argv);
        }
        wait_for_waiters(con, "rw", i64::try_from(self.waiters.len()).unwrap());
        let _: () = cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
        assert_eq!(int(con, &["LOCK.RELEASE", "rw", &writer]), 1);
        let ms = usec_per_call(con, "lock.release") / 1_000.0;
        for waiter in &mut self.waiters {
            let reply = waiter.try_read_reply(Duration::from_secs(10));
            let (token, _) = reply
                .as_ref()
                .and_then(|r| r.grant())
                .expect("every reader granted");
            self.held.push(String::from_utf8_lossy(token).into_owned());
        }
        [ms]
    }
}

#[test]
fn a_handoff_to_thousands_of_readers_costs_no_more_with_chosen_tokens() {
    let readers = pick(3_000, 8_000);
    let mut generated = Handoff::build(readers, false);
    let mut chosen = Handoff::build(readers, true);
    let (generated, chosen) = least_of_rounds(3, || generated.round(), || chosen.round());
    let (generated, chosen) = (generated[0], chosen[0]);
    eprintln!("{readers} readers: {generated:.1} ms with generated tokens, {chosen:.1} ms chosen");
    assert!(
        chosen <= 3.0 * generated.max(1.0),
        "{chosen:.1} ms with chosen tokens against {generated:.1} ms generated"
    );
}

/// A server whose AOF, rewritten without the RDB preamble, holds a shared lock of
/// `holders` holders that replays as one `LOCK.APPLY` each.
struct AofLoad {
    server: Server,
}

impl AofLoad {
    fn build(holders: usize) -> Self {
        let args = [
            "appendonly",
            "yes",
            "aof-use-rdb-preamble",
            "no",
            "appendfsync",
            "no",
        ];
        let server = Server::with_module_args(&args, &["max-holders", "100000"]);
        let mut con = server.connect();
        readers(&mut con, holders);
        rewrite_aof(&mut con, Duration::from_secs(30));
        AofLoad { server }
    }

    /// Seconds to start again from the AOF (killed, so that nothing new is written).
    fn round(&mut self) -> [f64; 1] {
        self.server.kill();
        let started = Instant::now();
        self.server.restart();
        let mut con = self.server.connect();
        eventually(Duration::from_secs(60), "loaded", || {
            info_field(&mut con, "persistence", "loading").as_deref() == Some("0")
        });
        let seconds = started.elapsed().as_secs_f64();
        let held: Vec<Value> = cmd("LOCK.INFO").arg("rw").query(&mut con).unwrap();
        assert!(!held.is_empty(), "the lock came back");
        [seconds]
    }
}

#[test]
fn an_aof_without_preamble_loads_a_shared_lock_in_n_log_n() {
    let (mut small, mut large) = (AofLoad::build(4_000), AofLoad::build(40_000));
    let (small, large) = least_of_rounds(3, || small.round(), || large.round());
    let (small, large) = (small[0], large[0]);
    eprintln!("AOF load: {small:.3} s at 4,000 holders, {large:.3} s at 40,000");
    // Ten times the holders: ten times the time and a little, not a hundred (a server
    // start is part of the small figure, so the floor is 20 ms; scanning took 1.5 s).
    assert!(
        large <= 20.0 * small.max(0.02),
        "{large:.3} s at 40,000 against {small:.3} s at 4,000"
    );
}

/// A server with room for 10,000 clients whose `key` is held, and `waiters` clients
/// queued for it (`LOCK.ACQUIRE … BLOCK 0`, the i-th `SHARED` if `shared(i)`).
fn held_with_queue(
    key: &str,
    waiters: usize,
    shared: impl Fn(usize) -> bool,
) -> (Server, Connection, Vec<RawClient>) {
    let server = Server::with_args(&["maxclients", "10100"]);
    let mut con = server.connect();
    acquire(&mut con, key, 600_000, &[]).unwrap();
    let queued: Vec<RawClient> = (0..waiters)
        .map(|i| {
            let mut waiter = RawClient::connect(server.port);
            let mut argv = vec!["LOCK.ACQUIRE", key, "60000", "BLOCK", "0"];
            if shared(i) {
                argv.push("SHARED");
            }
            waiter.send(&argv.iter().map(|arg| arg.as_bytes()).collect::<Vec<_>>());
            waiter
        })
        .collect();
    wait_for_waiters(&mut con, key, i64::try_from(waiters).unwrap());
    (server, con, queued)
}

/// A lock with `waiters` queued (half of them shared), whose `LOCK.INFO` is timed.
struct InfoCost {
    server: Server,
    con: Connection,
    _queued: Vec<RawClient>,
}

impl InfoCost {
    fn build(waiters: usize) -> Self {
        let (server, con, queued) = held_with_queue("rw", waiters, |i| i % 2 == 0);
        InfoCost {
            server,
            con,
            _queued: queued,
        }
    }

    /// The server's CPU time per `LOCK.INFO`, in µs (its event loop included, the
    /// same at both sizes). CPU time: with thousands of clients connected, a busy
    /// machine stretched the command's wall time in every round (13.5 µs against 5).
    fn round(&mut self) -> [f64; 1] {
        let before = self.server.cpu_time();
        repeat(
            &mut self.con,
            &["LOCK.INFO".to_string(), "rw".to_string()],
            CALLS,
        );
        [(self.server.cpu_time() - before).as_secs_f64() * 1e6 / CALLS as f64]
    }
}

#[test]
fn lock_info_costs_the_same_at_10_and_thousands_of_waiters() {
    let many = pick(4_000, 8_000);
    let (mut small, mut large) = (InfoCost::build(10), InfoCost::build(many));
    let (few, lots) = least_of_rounds(ROUNDS, || small.round(), || large.round());
    let (few, lots) = (few[0], lots[0]);
    eprintln!("LOCK.INFO: {few:.2} µs with 10 waiters, {lots:.2} µs with {many}");
    // Walking the queue cost 2.8× at 4,000 waiters (14× at 15,000).
    assert!(
        lots <= 2.0 * few.max(1.0),
        "{lots:.2} µs with {many} waiters against {few:.2} µs with 10"
    );
}

/// A lock with `queue` waiters of one session, on which a wait begun (`LOCK.ACQUIRE …
/// BLOCK`, checked for a deadlock) is timed, by that session and by another owner.
struct WaitCost {
    server: Server,
    _queued: Vec<RawClient>,
}

impl WaitCost {
    fn build(queue: usize) -> Self {
        let server = Server::with_args(&["maxclients", "10100"]);
        let mut con = server.connect();
        acquire(&mut con, "k", 600_000, &["SESSION", "holder"]).unwrap();
        // Another owner that holds something, so its waits are searched.
        acquire(&mut con, "elsewhere", 600_000, &["SESSION", "another"]).unwrap();
        let queued: Vec<RawClient> = (0..queue)
            .map(|_| {
                let mut waiter = RawClient::connect(server.port);
                let argv = [
                    "LOCK.ACQUIRE",
                    "k",
                    "60000",
                    "SESSION",
                    "worker",
                    "BLOCK",
                    "0",
                ];
                waiter.send(&argv.map(str::as_bytes));
                waiter
            })
            .collect();
        wait_for_waiters(&mut con, "k", i64::try_from(queue).unwrap());
        WaitCost {
            server,
            _queued: queued,
        }
    }

    /// One round: µs of the server's CPU per wait begun (and ended by its 1 ms
    /// timeout) by the same session, then by another owner. CPU time, not the
    /// command's wall time: another owner's check walks the session's waits for
    /// milliseconds at this size, longer than the scheduler lets the server run on a
    /// busy machine, where wall time stretched it threefold in every round. The
    /// server's event loop is part of the figure, the same at both sizes.
    fn round(&mut self) -> [f64; 2] {
        ["worker", "another"].map(|session| {
            let mut waiter = RawClient::connect(self.server.port);
            let argv = [
                "LOCK.ACQUIRE",
                "k",
                "60000",
                "SESSION",
                session,
                "BLOCK",
                "1",
            ];
            const CALLS: u32 = 50;
            let before = self.server.cpu_time();
            for _ in 0..CALLS {
                assert!(waiter.call(&argv.map(str::as_bytes)).is_nil());
            }
            (self.server.cpu_time() - before).as_secs_f64() * 1e6 / f64::from(CALLS)
        })
    }
}

#[test]
fn a_waits_deadlock_check_costs_the_same_at_10_and_thousands_of_one_sessions_waiters() {
    let many = pick(4_000, 8_000);
    let (mut small, mut large) = (WaitCost::build(10), WaitCost::build(many));
    let (few, lots) = least_of_rounds(ROUNDS, || small.round(), || large.round());
    let ((few_same, few_other), (lots_same, lots_other)) = ((few[0], few[1]), (lots[0], lots[1]));
    eprintln!(
        "a wait begun: {few_same:.2}/{few_other:.2} µs (same session/another) with 10 \
         waiters, {lots_same:.2}/{lots_other:.2} µs with {many}"
    );
    assert!(
        // Linear would be some 1,000 µs here (as another owner's is): thrice is noise.
        lots_same <= 3.0 * few_same.max(5.0),
        "the same session's wait: {lots_same:.2} µs with {many} waiters, {few_same:.2} with 10"
    );
    // Another owner reaches the session once and passes each of its waits in the queue
    // once (0.3–0.8 µs a wait here): linear, where looking at every wait for each of
    // them was 16 ms at 4,000 (4 µs a wait).
    let per_wait = (lots_other - few_other) / many as f64;
    assert!(
        per_wait <= 2.5,
        "another owner's wait: {lots_other:.2} µs with {many} waiters of one session"
    );
}

/// A server with `waiters` clients queued for another key, on which run-once cycles
/// (`LOCK.ONCE` of a fresh key, then its `LOCK.DONE`) are timed: answering the
/// duplicates of the key done must look at that key's waits, not at every wait.
struct DoneCost {
    server: Server,
    con: Connection,
    cycles: usize,
    _queued: Vec<RawClient>,
}

impl DoneCost {
    fn build(waiters: usize) -> Self {
        let (server, con, queued) = held_with_queue("elsewhere", waiters, |_| false);
        DoneCost {
            server,
            con,
            cycles: 0,
            _queued: queued,
        }
    }

    /// The server's CPU time per cycle, in µs (CPU time: thousands of connected
    /// clients make the wall time of a busy machine's server stretch, as for
    /// `InfoCost`), each cycle a claim with a chosen token and its `DONE`, pipelined.
    fn round(&mut self) -> [f64; 1] {
        let mut pipe = redis::pipe();
        for _ in 0..CALLS {
            self.cycles += 1;
            let key = format!("order:{}", self.cycles);
            pipe.cmd("LOCK.ONCE")
                .arg(&key)
                .arg(60_000)
                .arg("KEEP")
                .arg(60_000)
                .arg("TOKEN")
                .arg("run")
                .ignore();
            pipe.cmd("LOCK.DONE").arg(&key).arg("run").arg("paid");
        }
        let before = self.server.cpu_time();
        let stored: Vec<i64> = pipe.query(&mut self.con).expect("pipeline");
        let cost = (self.server.cpu_time() - before).as_secs_f64() * 1e6 / CALLS as f64;
        assert!(stored.iter().all(|&s| s == 1), "every run stored");
        [cost]
    }
}

#[test]
fn done_costs_the_same_beside_10_and_thousands_of_waiters_for_other_keys() {
    let many = pick(4_000, 10_000);
    let (mut small, mut large) = (DoneCost::build(10), DoneCost::build(many));
    let (few, lots) = least_of_rounds(ROUNDS, || small.round(), || large.round());
    let (few, lots) = (few[0], lots[0]);
    eprintln!("LOCK.ONCE + LOCK.DONE: {few:.2} µs beside 10 waiters, {lots:.2} µs beside {many}");
    // Walking every wait of the server at each DONE cost several times as much at
    // 4,000 waiters.
    assert!(
        lots <= 2.0 * few.max(1.0),
        "{lots:.2} µs beside {many} waiters against {few:.2} µs beside 10"
    );
}

/// `LOCK.TOP COUNT 1` costs at most a quarter of listing all `held` keys, in either
/// order (the same keys opened and ranked, plus their reply: a `COUNT 1` that opened
/// every key cost 80% of the full listing or more).
fn count_1_costs_a_fraction_of_every_key(con: &mut Connection, held: usize) {
    for by in ["waiters", "held"] {
        let (best_one, best_every) = lock_top_costs(con, held, by);
        assert!(
            best_one <= 0.25 * best_every,
            "BY {by}: COUNT 1 {best_one:.0} µs against {best_every:.0} µs for all {held}"
        );
    }
}

/// `LOCK.ACQUIRE {prefix}:{i}` for `i` below `count`, 10,000 a pipeline.
fn acquire_many(con: &mut Connection, prefix: &str, count: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("LOCK.ACQUIRE")
                .arg(format!("{prefix}:{i:06}"))
                .arg(600_000)
                .ignore();
        }
        let _: () = pipe.query(con).unwrap();
    }
}

/// Sets the fence clock an hour ahead of the server's (as a fence loaded or replicated
/// from a server whose clock runs ahead would): fences then count up by one a grant.
fn fence_clock_an_hour_ahead(con: &mut Connection) {
    let (seconds, micros): (i64, i64) = cmd("TIME").query(con).unwrap();
    let _: () = cmd("LOCK.CLOCK")
        .arg(seconds * 1_000_000 + micros + 3_600_000_000)
        .arg(0)
        .query(con)
        .unwrap();
}

/// `LOCK.TOP COUNT 1` (and `COUNT all`) costs, least of the rounds, in either order.
fn lock_top_costs(con: &mut Connection, held: usize, by: &str) -> (f64, f64) {
    let argv = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let all = held.to_string();
    let one = argv(&["LOCK.TOP", "COUNT", "1", "BY", by]);
    let every = argv(&["LOCK.TOP", "COUNT", &all, "BY", by]);
    let listed: Vec<Value> = cmd("LOCK.TOP").arg(&every[1..]).query(con).unwrap();
    assert_eq!(listed.len(), held);
    let mut cost = |command: &[String], calls: usize| {
        let _: () = cmd("CONFIG").arg("RESETSTAT").query(con).unwrap();
        repeat(con, command, calls);
        usec_per_call(con, "lock.top")
    };
    let (mut best_one, mut best_every) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        best_one = best_one.min(cost(&one, 20));
        best_every = best_every.min(cost(&every, 3));
    }
    eprintln!("LOCK.TOP BY {by}: COUNT 1 {best_one:.0} µs, COUNT {held} {best_every:.0} µs");
    (best_one, best_every)
}

/// `LOCK.TOP COUNT 1` among thousands of held keys looks at a key or two, not at every
/// held key: it costs a small fraction of listing them all (the same keys opened and
/// ranked, plus their reply), in either order. Before, every held key was opened and
/// the whole list sorted whatever the `COUNT` (COUNT 1 cost 80% of the full listing).
#[test]
fn lock_top_count_1_costs_a_fraction_of_listing_every_held_key() {
    let held = pick(4_000, 10_000);
    let server = Server::start();
    let mut con = server.connect();
    acquire_many(&mut con, "held", held);
    count_1_costs_a_fraction_of_every_key(&mut con, held);
}

/// The same after the fence clock jumped ahead of the wall clock (a fence loaded or
/// replicated from a server whose clock runs ahead; here `LOCK.CLOCK`): every grant's
/// fence is then ahead, its start kept apart, and `COUNT 1` still looks at a key or two.
/// Before, each call opened every key whose fence was ahead (~0.25 s at 100,000 locks).
#[test]
fn lock_top_count_1_stays_cheap_with_the_fence_clock_ahead() {
    let held = pick(4_000, 10_000);
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    acquire_many(&mut con, "ahead", held);
    count_1_costs_a_fraction_of_every_key(&mut con, held);
}

/// The same after those locks were loaded (`DEBUG RELOAD`) with the fence clock ahead:
/// every one counts from the load, so all their starts are one, and `COUNT 1` still
/// looks at a key or two (ties are listed by name, and read so). Before, each call
/// opened every loaded key (~0.3 s at 100,000 locks).
#[test]
fn lock_top_count_1_stays_cheap_after_a_load_with_the_fence_clock_ahead() {
    let held = pick(4_000, 10_000);
    let server = Server::start();
    let mut con = server.connect();
    fence_clock_an_hour_ahead(&mut con);
    acquire_many(&mut con, "loaded", held);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    count_1_costs_a_fraction_of_every_key(&mut con, held);
}

/// The same among thousands of shared locks whose oldest holders left (every lock's
/// first holder older than every remaining one): `COUNT 1` still looks at a key or two,
/// not at every lock whose first holder it once knew. Before, each call opened every
/// key (17–74 ms at 10,000–20,000 locks).
#[test]
fn lock_top_count_1_stays_cheap_after_the_oldest_shared_holders_left() {
    let held = pick(4_000, 10_000);
    let server = Server::start();
    let mut con = server.connect();
    let keys: Vec<usize> = (0..held).collect();
    for holder in ["first", "second"] {
        for chunk in keys.chunks(10_000) {
            let mut pipe = redis::pipe();
            for i in chunk {
                pipe.cmd("LOCK.ACQUIRE")
                    .arg(format!("shared:{i:06}"))
                    .arg(600_000)
                    .arg("SHARED")
                    .arg("TOKEN")
                    .arg(format!("{holder}-{i:06}"))
                    .ignore();
            }
            let _: () = pipe.query(&mut con).unwrap();
        }
    }
    for chunk in keys.chunks(10_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("LOCK.RELEASE")
                .arg(format!("shared:{i:06}"))
                .arg(format!("first-{i:06}"))
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    count_1_costs_a_fraction_of_every_key(&mut con, held);
}

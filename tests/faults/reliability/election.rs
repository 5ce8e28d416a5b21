//! Leader election on one lock key, recorded for the history checker.
//!
//! Candidates campaign with `LOCK.ACQUIRE election ttl BLOCK t VALUE c<id>.<n>`, and
//! while they lead they do their leader work through `LOCK.FENCED election:mark fence
//! RPUSH election:log …` (so a deposed leader's late work is refused by the mark, and
//! the log on the server shows the order the work was admitted in), refresh their lease,
//! proclaim now and then (`LOCK.PROCLAIM election token c<id>.<n>.p<m>`) and resign.
//! A leader believes it leads only until `ttl` after it *sent* the grant or its last
//! confirmed refresh, by its own monotonic clock. Between that check and its write it
//! "computes" for a while: a process frozen there (SIGSTOP, a GC pause) writes late,
//! with its old fence, and must be refused. Observers loop `LOCK.OBSERVE election fence
//! value BLOCK t`, each with what it last saw.
//!
//! Every command is an `Event`: what was asked, when it was sent and answered (wall-clock
//! µs, the server's clock), and what came back. The same events travel from candidate
//! processes (`child_main`, run as a child of the test binary) as lines on their stdout
//! (`encode` / `decode`): a process killed with SIGKILL leaves its last command sent and
//! unanswered, which the parent records as unknown.
//!
//! `check` judges a history: the campaigns, refreshes and resignations become the
//! suite's own `Op`s, judged by `checker` as any holding is (what the server granted and
//! when the lease could have ended, not what a paused leader believed): fences increase,
//! no two leaderships certainly live at once, no refresh revives a lapsed lease. On top:
//! no fenced work with an older fence admitted after a newer one, every observed
//! `[fence, value]` one the server really had at some moment of the observation (not a
//! leader already succeeded when it was asked, not an older value of a proclaimed leader,
//! not "free" while a leadership certainly lasted), no observer answered without a change
//! or twice with the same leader state, every long leadership seen by every observer
//! live at the time; `final_states` and `log_in_order` complete it.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{ErrorKind, Value};

use super::belief::SLACK_US;
use super::checker;
use super::history::{now_us, Mode, Op, Outcome, Request};
use super::holding::Holding;
use super::target::{Link, Target};

/// The election's lock key, the fence mark of the leader's work, and its log.
pub const KEY: &str = "election";
pub const MARK: &str = "election:mark";
pub const LOG: &str = "election:log";

/// What was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    /// `LOCK.ACQUIRE election ttl BLOCK block VALUE value`.
    Campaign {
        ttl_ms: i64,
        block_ms: i64,
        value: String,
    },
    /// `LOCK.REFRESH election token ttl`.
    Refresh { token: String, ttl_ms: i64 },
    /// `LOCK.PROCLAIM election token value`.
    Proclaim { token: String, value: String },
    /// `LOCK.FENCED election:mark fence RPUSH election:log entry`.
    Work { fence: i64, entry: String },
    /// `LOCK.RELEASE election token`.
    Resign { token: String },
    /// `LOCK.OBSERVE election fence value BLOCK block`.
    Observe {
        fence: i64,
        value: String,
        block_ms: i64,
    },
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Granted {
        token: String,
        fence: i64,
    },
    /// A campaign's or an observation's timeout.
    Nil,
    /// The 1 / 0 of a refresh, proclaim or resignation.
    Int(i64),
    /// Fenced work the mark let through.
    Admitted,
    /// Fenced work the mark refused (`STALE …`).
    Stale(String),
    Observed {
        fence: i64,
        value: Option<String>,
    },
    /// An error reply: nothing happened.
    Failed(String),
    /// No reply: sent, then the connection broke (or the process died).
    Unknown(String),
}

#[derive(Debug, Clone)]
pub struct Event {
    pub client: usize,
    pub act: Act,
    pub invoked_us: i64,
    pub completed_us: i64,
    pub answer: Answer,
    /// Which server generation answered (bumped at every failover).
    pub node: usize,
    /// False when the answer was positive but `WAIT 1` did not confirm a replica has it.
    pub confirmed: bool,
}

impl Event {
    /// The `[fence, value]` an observation answered, nil read as "".
    pub fn observed(&self) -> Option<(i64, &str)> {
        match &self.answer {
            Answer::Observed { fence, value } => Some((*fence, value.as_deref().unwrap_or(""))),
            _ => None,
        }
    }

    fn is_observe(&self) -> bool {
        matches!(self.act, Act::Observe { .. })
    }

    /// A grant a replica confirmed (where confirmation was asked).
    fn acked_grant(&self) -> Option<(i64, &str)> {
        match (&self.act, &self.answer, self.confirmed) {
            (Act::Campaign { .. }, Answer::Granted { fence, token }, true) => {
                Some((*fence, token.as_str()))
            }
            _ => None,
        }
    }
}

/// Where events go: a shared history in the test process, or stdout in a candidate
/// process (which also announces each command before sending it).
pub trait Sink {
    fn invoking(&mut self, _client: usize, _act: &Act, _at_us: i64) {}
    fn record(&mut self, event: Event);
}

/// The test process's history, shared by its threads.
#[derive(Clone, Default)]
pub struct Shared(pub Arc<Mutex<Vec<Event>>>);

impl Shared {
    pub fn snapshot(&self) -> Vec<Event> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn extend(&self, events: Vec<Event>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(events);
    }
}

impl Sink for Shared {
    fn record(&mut self, event: Event) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }
}

/// One connection's client: sends to the target's current server, records each
/// command; a broken connection makes the answer unknown and is replaced next time.
pub struct Client {
    pub id: usize,
    target: Arc<Target>,
    con: Link,
    read_timeout: Duration,
    confirm: bool,
}

impl Client {
    pub fn new(id: usize, target: Arc<Target>, read_timeout: Duration, confirm: bool) -> Self {
        Client {
            id,
            target,
            con: None,
            read_timeout,
            confirm,
        }
    }

    pub fn stopping(&self) -> bool {
        self.target.stopping()
    }

    /// Sends `act` and records it; `None` when it was not sent (stopping, or no server
    /// accepts connections right now).
    pub fn send(&mut self, act: Act, sink: &mut dyn Sink) -> Option<Event> {
        if !self.target.pass() {
            return None;
        }
        let node = self.connect()?;
        let (con, _, _) = self.con.as_mut()?;
        let command = command_for(&act);
        let invoked_us = now_us();
        sink.invoking(self.id, &act, invoked_us);
        let answer = classify(&act, command.query::<Value>(con));
        let positive = matches!(
            answer,
            Answer::Granted { .. } | Answer::Int(1) | Answer::Admitted
        );
        let mut confirmed = true;
        let mut broken = matches!(answer, Answer::Unknown(_));
        if self.confirm && positive {
            let acked = redis::cmd("WAIT").arg(1).arg(250).query::<i64>(con);
            confirmed = acked.as_ref().is_ok_and(|n| *n >= 1);
            broken |= acked.is_err_and(|e| !matches!(e.kind(), ErrorKind::Server(_)));
        }
        broken |= matches!(&answer, Answer::Failed(text)
            if text.contains("READONLY") || text.contains("UNBLOCKED") || text.contains("LOADING"));
        if broken {
            self.con = None;
        }
        let event = Event {
            client: self.id,
            act,
            invoked_us,
            completed_us: now_us(),
            answer,
            node,
            confirmed,
        };
        sink.record(event.clone());
        Some(event)
    }

    fn connect(&mut self) -> Option<usize> {
        self.target.connect(&mut self.con, self.read_timeout)
    }
}

fn command_for(act: &Act) -> redis::Cmd {
    let mut c;
    match act {
        Act::Campaign {
            ttl_ms,
            block_ms,
            value,
        } => {
            c = redis::cmd("LOCK.ACQUIRE");
            c.arg(KEY)
                .arg(*ttl_ms)
                .arg("BLOCK")
                .arg(*block_ms)
                .arg("VALUE")
                .arg(value);
        }
        Act::Refresh { token, ttl_ms } => {
            c = redis::cmd("LOCK.REFRESH");
            c.arg(KEY).arg(token).arg(*ttl_ms);
        }
        Act::Proclaim { token, value } => {
            c = redis::cmd("LOCK.PROCLAIM");
            c.arg(KEY).arg(token).arg(value);
        }
        Act::Work { fence, entry } => {
            c = redis::cmd("LOCK.FENCED");
            c.arg(MARK).arg(*fence).arg("RPUSH").arg(LOG).arg(entry);
        }
        Act::Resign { token } => {
            c = redis::cmd("LOCK.RELEASE");
            c.arg(KEY).arg(token);
        }
        Act::Observe {
            fence,
            value,
            block_ms,
        } => {
            c = redis::cmd("LOCK.OBSERVE");
            c.arg(KEY)
                .arg(*fence)
                .arg(value)
                .arg("BLOCK")
                .arg(*block_ms);
        }
    }
    c
}

fn classify(act: &Act, reply: redis::RedisResult<Value>) -> Answer {
    let unexpected = |what: &dyn std::fmt::Debug| Answer::Failed(format!("unexpected {what:?}"));
    let bulk = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match reply {
        Ok(Value::Nil) if matches!(act, Act::Campaign { .. } | Act::Observe { .. }) => Answer::Nil,
        Ok(Value::Int(n)) if matches!(act, Act::Work { .. }) => {
            if n > 0 {
                Answer::Admitted
            } else {
                unexpected(&n)
            }
        }
        Ok(Value::Int(n))
            if matches!(
                act,
                Act::Refresh { .. } | Act::Proclaim { .. } | Act::Resign { .. }
            ) && (n == 0 || n == 1) =>
        {
            Answer::Int(n)
        }
        Ok(Value::Array(items)) => match (act, items.as_slice()) {
            (Act::Campaign { .. }, [Value::BulkString(token), Value::Int(fence)]) => {
                Answer::Granted {
                    token: bulk(token),
                    fence: *fence,
                }
            }
            (Act::Observe { .. }, [Value::Int(fence), Value::BulkString(value)]) => {
                Answer::Observed {
                    fence: *fence,
                    value: Some(bulk(value)),
                }
            }
            (Act::Observe { .. }, [Value::Int(fence), Value::Nil]) => Answer::Observed {
                fence: *fence,
                value: None,
            },
            (_, other) => unexpected(&other),
        },
        Ok(other) => unexpected(&other),
        Err(error) if error.code() == Some("STALE") => Answer::Stale(error.to_string()),
        Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
            Answer::Failed(error.to_string())
        }
        Err(error) => Answer::Unknown(error.to_string()),
    }
}

/// How a candidate campaigns and leads.
#[derive(Clone, Debug)]
pub struct CandidateSpec {
    pub ttl_ms: i64,
    pub block_ms: i64,
    /// How long a leader leads before it resigns (ms, inclusive range).
    pub lead_ms: (i64, i64),
    /// The "computation" between the leader's check of its own deadline and its write.
    pub work_ms: (i64, i64),
    /// Share of work rounds followed by a proclaim.
    pub proclaim_fraction: f64,
}

impl CandidateSpec {
    pub fn standard() -> Self {
        CandidateSpec {
            ttl_ms: 300,
            block_ms: 1_000,
            lead_ms: (300, 1_200),
            work_ms: (20, 60),
            proclaim_fraction: 0.2,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "ttl {} ms, BLOCK {} ms, lead {}-{} ms then resign, work {}-{} ms between deadline check and fenced write, {:.0}% of rounds proclaim",
            self.ttl_ms,
            self.block_ms,
            self.lead_ms.0,
            self.lead_ms.1,
            self.work_ms.0,
            self.work_ms.1,
            self.proclaim_fraction * 100.0
        )
    }
}

fn sleep_ms(ms: i64) {
    thread::sleep(Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
}

/// Campaigns until the client's target stops.
pub fn run_candidate(client: &mut Client, spec: &CandidateSpec, seed: u64, sink: &mut dyn Sink) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut campaign = 0;
    while !client.stopping() {
        campaign += 1;
        let value = format!("c{}.{campaign}", client.id);
        let sent = Instant::now();
        let act = Act::Campaign {
            ttl_ms: spec.ttl_ms,
            block_ms: spec.block_ms,
            value: value.clone(),
        };
        let Some(event) = client.send(act, sink) else {
            continue;
        };
        match event.answer {
            Answer::Granted { token, fence } if event.confirmed => {
                lead(client, spec, &mut rng, sink, (&token, fence, &value), sent);
            }
            Answer::Granted { token, .. } => {
                // Not confirmed by a replica: not a leadership to rely on.
                let _ = client.send(Act::Resign { token }, sink);
            }
            Answer::Nil => {}
            _ => sleep_ms(20),
        }
    }
}

fn lead(
    client: &mut Client,
    spec: &CandidateSpec,
    rng: &mut StdRng,
    sink: &mut dyn Sink,
    (token, fence, value): (&str, i64, &str),
    sent: Instant,
) {
    let ttl = Duration::from_millis(u64::try_from(spec.ttl_ms).unwrap_or(0));
    let mut deadline = sent + ttl;
    // A grant after a wait may have begun its lease long after the campaign was sent:
    // all the leader knows is `sent + ttl`, so it confirms its lease at once.
    if !refresh(client, spec, token, sink, &mut deadline) {
        return;
    }
    let until = Instant::now()
        + Duration::from_millis(
            u64::try_from(rng.gen_range(spec.lead_ms.0..=spec.lead_ms.1)).unwrap_or(0),
        );
    let mut proclaims = 0;
    let mut round = 0;
    while !client.stopping() && Instant::now() < deadline {
        round += 1;
        // Computing: a process frozen here writes late, with its old fence.
        sleep_ms(rng.gen_range(spec.work_ms.0..=spec.work_ms.1));
        let entry = format!("{fence}:c{}:{round}", client.id);
        if let Some(event) = client.send(Act::Work { fence, entry }, sink) {
            if matches!(event.answer, Answer::Stale(_)) {
                return;
            }
        }
        if rng.gen_bool(spec.proclaim_fraction) {
            proclaims += 1;
            let act = Act::Proclaim {
                token: token.into(),
                value: format!("{value}.p{proclaims}"),
            };
            if client
                .send(act, sink)
                .is_some_and(|e| e.answer == Answer::Int(0))
            {
                return;
            }
        }
        if Instant::now() >= until {
            let _ = client.send(
                Act::Resign {
                    token: token.into(),
                },
                sink,
            );
            return;
        }
        if !refresh(client, spec, token, sink, &mut deadline) {
            return;
        }
    }
}

/// Refreshes the lease; moves `deadline` to `ttl` after the refresh was sent when it is
/// confirmed. False when the server said the lease is gone.
fn refresh(
    client: &mut Client,
    spec: &CandidateSpec,
    token: &str,
    sink: &mut dyn Sink,
    deadline: &mut Instant,
) -> bool {
    let sent = Instant::now();
    let act = Act::Refresh {
        token: token.into(),
        ttl_ms: spec.ttl_ms,
    };
    match client.send(act, sink) {
        Some(event) if event.answer == Answer::Int(1) && event.confirmed => {
            *deadline = sent + Duration::from_millis(u64::try_from(spec.ttl_ms).unwrap_or(0));
            true
        }
        Some(event) => event.answer != Answer::Int(0),
        None => true,
    }
}

/// Observes until the client's target stops; `last` holds what it last saw.
pub fn run_observer(
    client: &mut Client,
    block_ms: i64,
    sink: &mut dyn Sink,
    last: &Mutex<Option<(i64, String)>>,
) {
    while !client.stopping() {
        let known = last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or((0, String::new()));
        let act = Act::Observe {
            fence: known.0,
            value: known.1,
            block_ms,
        };
        let Some(event) = client.send(act, sink) else {
            continue;
        };
        match event.observed() {
            Some((fence, value)) => {
                *last.lock().unwrap_or_else(PoisonError::into_inner) = Some((fence, value.into()));
            }
            None if !matches!(event.answer, Answer::Nil) => sleep_ms(10),
            None => {}
        }
    }
}

// ---- candidate processes ------------------------------------------------------------

/// The environment variable that makes the test binary's `candidate_process` test a
/// candidate: `port id seed` and the spec's numbers.
pub const CHILD_ENV: &str = "FENCELOCK_ELECTION_CANDIDATE";
const TAG: &str = "ELECTION";

/// A candidate process's body: campaigns against `port` until its stdin closes, each
/// command announced and recorded on stdout.
pub fn child_main(spec_line: &str) {
    let numbers: Vec<i64> = spec_line
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    let [port, id, seed, ttl_ms, block_ms, lead0, lead1, work0, work1, proclaim_pct] = numbers[..]
    else {
        panic!("bad {CHILD_ENV}: {spec_line}");
    };
    let spec = CandidateSpec {
        ttl_ms,
        block_ms,
        lead_ms: (lead0, lead1),
        work_ms: (work0, work1),
        proclaim_fraction: proclaim_pct as f64 / 100.0,
    };
    let target = Arc::new(Target::new(u16::try_from(port).expect("port")));
    let stopper = target.clone();
    thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        stopper.stop();
    });
    let id = usize::try_from(id).expect("id");
    let mut client = Client::new(id, target, Duration::from_secs(3), false);
    run_candidate(&mut client, &spec, seed as u64, &mut Stdout);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{TAG}\tend");
    let _ = out.flush();
}

/// The `CHILD_ENV` value for a candidate `id` against `port`.
pub fn child_spec(port: u16, id: usize, seed: u64, spec: &CandidateSpec) -> String {
    format!(
        "{port} {id} {} {} {} {} {} {} {} {}",
        seed % (i64::MAX as u64),
        spec.ttl_ms,
        spec.block_ms,
        spec.lead_ms.0,
        spec.lead_ms.1,
        spec.work_ms.0,
        spec.work_ms.1,
        (spec.proclaim_fraction * 100.0).round() as i64
    )
}

struct Stdout;

impl Sink for Stdout {
    fn invoking(&mut self, client: usize, act: &Act, at_us: i64) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{TAG}\tinvoke\t{client}\t{at_us}\t{}", encode_act(act));
        let _ = out.flush();
    }

    fn record(&mut self, event: Event) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{TAG}\tevent\t{}", encode(&event));
        let _ = out.flush();
    }
}

fn clean(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

fn encode_act(act: &Act) -> String {
    match act {
        Act::Campaign {
            ttl_ms,
            block_ms,
            value,
        } => format!("campaign\t{ttl_ms}\t{block_ms}\t{value}"),
        Act::Refresh { token, ttl_ms } => format!("refresh\t{token}\t{ttl_ms}"),
        Act::Proclaim { token, value } => format!("proclaim\t{token}\t{value}"),
        Act::Work { fence, entry } => format!("work\t{fence}\t{entry}"),
        Act::Resign { token } => format!("resign\t{token}"),
        Act::Observe {
            fence,
            value,
            block_ms,
        } => format!("observe\t{fence}\t{value}\t{block_ms}"),
    }
}

fn encode_answer(answer: &Answer) -> String {
    match answer {
        Answer::Granted { token, fence } => format!("granted\t{token}\t{fence}"),
        Answer::Nil => "nil".into(),
        Answer::Int(n) => format!("int\t{n}"),
        Answer::Admitted => "admitted".into(),
        Answer::Stale(text) => format!("stale\t{}", clean(text)),
        Answer::Observed { fence, value } => match value {
            Some(value) => format!("observed\t{fence}\tsome\t{value}"),
            None => format!("observed\t{fence}\tnone\t"),
        },
        Answer::Failed(text) => format!("failed\t{}", clean(text)),
        Answer::Unknown(text) => format!("unknown\t{}", clean(text)),
    }
}

/// One event as tab-separated fields.
pub fn encode(event: &Event) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
        event.client,
        event.invoked_us,
        event.completed_us,
        event.node,
        u8::from(event.confirmed),
        encode_act(&event.act),
        encode_answer(&event.answer)
    )
}

fn next<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Option<&'a str> {
    fields.next()
}

fn number<'a, T: std::str::FromStr>(fields: &mut impl Iterator<Item = &'a str>) -> Option<T> {
    next(fields)?.parse().ok()
}

fn decode_act<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Option<Act> {
    Some(match next(fields)? {
        "campaign" => Act::Campaign {
            ttl_ms: number(fields)?,
            block_ms: number(fields)?,
            value: next(fields)?.into(),
        },
        "refresh" => Act::Refresh {
            token: next(fields)?.into(),
            ttl_ms: number(fields)?,
        },
        "proclaim" => Act::Proclaim {
            token: next(fields)?.into(),
            value: next(fields)?.into(),
        },
        "work" => Act::Work {
            fence: number(fields)?,
            entry: next(fields)?.into(),
        },
        "resign" => Act::Resign {
            token: next(fields)?.into(),
        },
        "observe" => Act::Observe {
            fence: number(fields)?,
            value: next(fields)?.into(),
            block_ms: number(fields)?,
        },
        _ => return None,
    })
}

fn decode_answer<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Option<Answer> {
    Some(match next(fields)? {
        "granted" => Answer::Granted {
            token: next(fields)?.into(),
            fence: number(fields)?,
        },
        "nil" => Answer::Nil,
        "int" => Answer::Int(number(fields)?),
        "admitted" => Answer::Admitted,
        "stale" => Answer::Stale(next(fields)?.into()),
        "observed" => {
            let fence = number(fields)?;
            let some = next(fields)? == "some";
            let value = next(fields)?;
            Answer::Observed {
                fence,
                value: some.then(|| value.into()),
            }
        }
        "failed" => Answer::Failed(next(fields)?.into()),
        "unknown" => Answer::Unknown(next(fields)?.into()),
        _ => return None,
    })
}

/// The event `encode` wrote.
pub fn decode(line: &str) -> Option<Event> {
    let mut fields = line.split('\t');
    Some(Event {
        client: number(&mut fields)?,
        invoked_us: number(&mut fields)?,
        completed_us: number(&mut fields)?,
        node: number(&mut fields)?,
        confirmed: next(&mut fields)? == "1",
        act: decode_act(&mut fields)?,
        answer: decode_answer(&mut fields)?,
    })
}

/// Reads a candidate process's stdout until it ends: its events, and for a command it
/// announced but never answered (the process was killed), an unknown event ending when
/// the output ended.
pub fn read_child(stdout: impl Read) -> Vec<Event> {
    let mut events = Vec::new();
    let mut pending: Option<(usize, i64, Act)> = None;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let Some(rest) = line.strip_prefix(TAG).and_then(|r| r.strip_prefix('\t')) else {
            continue;
        };
        if let Some(event) = rest.strip_prefix("event\t") {
            let event = decode(event).unwrap_or_else(|| panic!("undecodable event: {event}"));
            pending = None;
            events.push(event);
        } else if let Some(invoke) = rest.strip_prefix("invoke\t") {
            let mut fields = invoke.split('\t');
            let parsed = (|| {
                let client = number(&mut fields)?;
                let at = number(&mut fields)?;
                Some((client, at, decode_act(&mut fields)?))
            })();
            pending = Some(parsed.unwrap_or_else(|| panic!("undecodable invoke: {invoke}")));
        }
    }
    if let Some((client, invoked_us, act)) = pending {
        events.push(Event {
            client,
            act,
            invoked_us,
            completed_us: now_us(),
            answer: Answer::Unknown("the process died".into()),
            node: 0,
            confirmed: true,
        });
    }
    events
}

// ---- the checks ---------------------------------------------------------------------

fn describe(event: &Event) -> String {
    format!(
        "client {} {:?} at {}..{} us -> {:?} (node {}{})",
        event.client,
        event.act,
        event.invoked_us,
        event.completed_us,
        event.answer,
        event.node,
        if event.confirmed { "" } else { ", unconfirmed" }
    )
}

/// The campaigns, refreshes and resignations as the suite's lock operations on `KEY`.
pub fn as_ops(events: &[Event]) -> Vec<Op> {
    events
        .iter()
        .filter_map(|event| {
            let request = match &event.act {
                Act::Campaign {
                    ttl_ms, block_ms, ..
                } => Request::Acquire {
                    ttl_ms: *ttl_ms,
                    block_ms: Some(*block_ms),
                    mode: Mode::Exclusive,
                },
                Act::Refresh { token, ttl_ms } => Request::Refresh {
                    token: token.clone(),
                    ttl_ms: *ttl_ms,
                },
                Act::Resign { token } => Request::Release {
                    token: token.clone(),
                },
                _ => return None,
            };
            let outcome = match &event.answer {
                Answer::Granted { token, fence } => Outcome::Granted {
                    token: token.clone(),
                    fence: *fence,
                },
                Answer::Nil => Outcome::Busy,
                Answer::Int(n) => Outcome::Done(*n == 1),
                Answer::Failed(text) | Answer::Stale(text) => Outcome::Failed(text.clone()),
                Answer::Unknown(text) => Outcome::Unknown(text.clone()),
                other => Outcome::Failed(format!("unexpected {other:?}")),
            };
            Some(Op {
                client: event.client,
                key: KEY.into(),
                request,
                invoked_us: event.invoked_us,
                completed_us: event.completed_us,
                outcome,
                node: event.node,
                confirmed: event.confirmed,
            })
        })
        .collect()
}

/// Every check of a history, as sentences naming the events involved.
pub fn check(events: &[Event]) -> Vec<String> {
    let ops = as_ops(events);
    let mut anomalies = checker::malformed_replies(&ops);
    anomalies.extend(checker::fences_increase(&ops));
    anomalies.extend(checker::holder_limits(&ops));
    anomalies.extend(checker::no_revival(&ops));
    anomalies.extend(checker::later_nodes_fence_higher(&ops));
    anomalies.extend(refused(events));
    anomalies.extend(work_in_order(events));
    anomalies.extend(observed_real(events));
    anomalies.extend(observers_not_stale(events, &ops));
    anomalies.extend(observers_answer_changes(events));
    anomalies.extend(leaders_seen(events, &ops, LONG_LEADERSHIP_US));
    anomalies
}

/// Error replies that blame the request or show a broken reply: none may come.
pub fn refused(events: &[Event]) -> Vec<String> {
    const BLAMING: [&str; 6] = [
        "unexpected",
        "syntax",
        "WRONGMODE",
        "WRONGTYPE",
        "invalid",
        "too many",
    ];
    events
        .iter()
        .filter(|e| {
            matches!(&e.answer, Answer::Failed(text) if BLAMING.iter().any(|b| text.contains(b)))
        })
        .map(|e| format!("refused or malformed: {}", describe(e)))
        .collect()
}

/// No fenced work with an older fence admitted after one with a newer fence was.
pub fn work_in_order(events: &[Event]) -> Vec<String> {
    let mut admitted: Vec<(&Event, i64)> = events
        .iter()
        .filter(|e| e.answer == Answer::Admitted && e.confirmed)
        .filter_map(|e| match e.act {
            Act::Work { fence, .. } => Some((e, fence)),
            _ => None,
        })
        .collect();
    let mut by_completion = admitted.clone();
    by_completion.sort_by_key(|(e, _)| e.completed_us);
    admitted.sort_by_key(|(e, _)| e.invoked_us);
    let mut anomalies = Vec::new();
    let mut done = 0;
    let mut highest: Option<(&Event, i64)> = None;
    for (work, fence) in admitted {
        while done < by_completion.len() && by_completion[done].0.completed_us < work.invoked_us {
            if highest.is_none_or(|(_, h)| by_completion[done].1 > h) {
                highest = Some(by_completion[done]);
            }
            done += 1;
        }
        if let Some((newer, _)) = highest.filter(|(_, h)| *h > fence) {
            anomalies.push(format!(
                "older fenced work admitted after newer: {} after {}",
                describe(work),
                describe(newer)
            ));
        }
    }
    anomalies
}

/// The fences in the leader's log on the server (`LRANGE election:log 0 -1`, entries
/// `fence:client:round`) never go down.
pub fn log_in_order(entries: &[String]) -> Vec<String> {
    let fences: Vec<i64> = entries
        .iter()
        .filter_map(|e| e.split(':').next()?.parse().ok())
        .collect();
    fences
        .windows(2)
        .enumerate()
        .filter(|(_, pair)| pair[1] < pair[0])
        .map(|(at, pair)| {
            format!(
                "the log admitted fence {} after {} (entries {} and {})",
                pair[1],
                pair[0],
                at,
                at + 1
            )
        })
        .collect()
}

/// A value's campaign (`c<id>.<n>`) and its proclaim number (0 for the campaign's own).
fn value_parts(value: &str) -> (&str, usize) {
    match value.rsplit_once(".p") {
        Some((campaign, n)) => match n.parse() {
            Ok(n) => (campaign, n),
            Err(_) => (value, 0),
        },
        None => (value, 0),
    }
}

/// Every observed leader is one that was granted (or whose campaign's answer was lost)
/// with that fence, and every observed value one its leader asked for; "free" carries
/// no value.
pub fn observed_real(events: &[Event]) -> Vec<String> {
    let campaigns: HashMap<&str, &Event> = events
        .iter()
        .filter_map(|e| match &e.act {
            Act::Campaign { value, .. } => Some((value.as_str(), e)),
            _ => None,
        })
        .collect();
    let proclaims: HashMap<&str, &Event> = events
        .iter()
        .filter_map(|e| match &e.act {
            Act::Proclaim { value, .. } => Some((value.as_str(), e)),
            _ => None,
        })
        .collect();
    let mut anomalies = Vec::new();
    for event in events {
        let Answer::Observed { fence, value } = &event.answer else {
            continue;
        };
        let wrong = match (fence, value.as_deref()) {
            (0, None) => None,
            (0, Some(_)) => Some("a free lock with a value".to_string()),
            (_, None | Some("")) => Some("a leader without its value".to_string()),
            (fence, Some(value)) => {
                let (campaign, proclaimed) = value_parts(value);
                match campaigns.get(campaign).map(|c| &c.answer) {
                    None => Some(format!("a value nobody campaigned with: {value}")),
                    Some(Answer::Granted { fence: granted, .. }) if granted != fence => Some(
                        format!("{value} was granted fence {granted}, observed with {fence}"),
                    ),
                    Some(Answer::Granted { .. } | Answer::Unknown(_)) => None,
                    Some(other) => Some(format!("{value}'s campaign was answered {other:?}")),
                }
                .or_else(|| {
                    (proclaimed > 0)
                        .then(|| match proclaims.get(value).map(|p| &p.answer) {
                            None => Some(format!("{value} was never proclaimed")),
                            Some(Answer::Int(0) | Answer::Failed(_)) => {
                                Some(format!("{value} was proclaimed and refused"))
                            }
                            Some(_) => None,
                        })
                        .flatten()
                })
            }
        };
        if let Some(wrong) = wrong {
            anomalies.push(format!("observer saw {wrong}: {}", describe(event)));
        }
    }
    anomalies
}

/// No observation answered with a state already gone before it was sent: a leader
/// succeeded by an acknowledged grant completed before, an older value of a leader whose
/// later proclaim was acknowledged before, or "free" while a leadership was certainly
/// held from before it was sent until after it was answered.
pub fn observers_not_stale(events: &[Event], ops: &[Op]) -> Vec<String> {
    let grants: Vec<(i64, &str, i64)> = events
        .iter()
        .filter_map(|e| {
            let (fence, token) = e.acked_grant()?;
            Some((fence, token, e.completed_us))
        })
        .collect();
    let fence_of: HashMap<&str, i64> = grants.iter().map(|(f, t, _)| (*t, *f)).collect();
    // Acknowledged proclaims: (fence, proclaim number, completed).
    let proclaims: Vec<(i64, usize, i64)> = events
        .iter()
        .filter(|e| e.answer == Answer::Int(1) && e.confirmed)
        .filter_map(|e| match &e.act {
            Act::Proclaim { token, value } => Some((
                *fence_of.get(token.as_str())?,
                value_parts(value).1,
                e.completed_us,
            )),
            _ => None,
        })
        .collect();
    let ops_of_key: Vec<&Op> = ops.iter().collect();
    let held: Vec<(i64, i64, &Op)> = ops
        .iter()
        .filter(|op| op.fence().is_some() && op.acked_yes())
        .map(|grant| {
            let (from, until) = Holding::new(grant, &ops_of_key).certainly_held();
            (from, until, grant)
        })
        .collect();
    let mut anomalies = Vec::new();
    for event in events {
        let Some((fence, value)) = event.observed() else {
            continue;
        };
        let sent = event.invoked_us;
        let stale = if fence == 0 {
            held.iter()
                .find(|(from, until, _)| *from < sent && until - SLACK_US > event.completed_us)
                .map(|(_, until, grant)| {
                    format!(
                        "free while fence {} was certainly held until {until} us",
                        grant.fence().unwrap_or(0)
                    )
                })
        } else if let Some((newer, _, at)) = grants
            .iter()
            .find(|(newer, _, at)| *newer > fence && *at < sent)
        {
            Some(format!(
                "fence {fence} after fence {newer} was granted at {at} us"
            ))
        } else {
            let seen = value_parts(value).1;
            proclaims
                .iter()
                .find(|(f, n, at)| *f == fence && *n > seen && *at < sent)
                .map(|(_, n, at)| format!("{value} after proclaim {n} was acknowledged at {at} us"))
        };
        if let Some(stale) = stale {
            anomalies.push(format!("stale observation: {stale}: {}", describe(event)));
        }
    }
    anomalies
}

/// Each observer is answered only when the state differs from what it sent, and never
/// twice with the same leader state (fences only grow and values are never reused, so
/// a leader state comes once).
pub fn observers_answer_changes(events: &[Event]) -> Vec<String> {
    let mut seen: HashMap<usize, HashSet<(i64, String)>> = HashMap::new();
    let mut anomalies = Vec::new();
    for event in events.iter().filter(|e| e.is_observe()) {
        let (
            Some((fence, value)),
            Act::Observe {
                fence: f, value: v, ..
            },
        ) = (event.observed(), &event.act)
        else {
            continue;
        };
        if fence == *f && value == v {
            anomalies.push(format!(
                "observer answered without a change: {}",
                describe(event)
            ));
        }
        if fence != 0
            && !seen
                .entry(event.client)
                .or_default()
                .insert((fence, value.into()))
        {
            anomalies.push(format!(
                "observer answered twice with one state: {}",
                describe(event)
            ));
        }
    }
    anomalies
}

/// A leadership certainly held at least this long must be seen by every observer that
/// was answering throughout it.
pub const LONG_LEADERSHIP_US: i64 = 500_000;

/// Every leadership certainly held for `long_us` or more, entirely while an observer was
/// answering (between its first and last answers), was seen by that observer.
pub fn leaders_seen(events: &[Event], ops: &[Op], long_us: i64) -> Vec<String> {
    let mut observers: HashMap<usize, (i64, i64, HashSet<i64>)> = HashMap::new();
    for event in events.iter().filter(|e| e.is_observe()) {
        if let Some((fence, _)) = event.observed() {
            let entry = observers.entry(event.client).or_insert((
                event.completed_us,
                event.completed_us,
                HashSet::new(),
            ));
            entry.0 = entry.0.min(event.completed_us);
            entry.1 = entry.1.max(event.completed_us);
            entry.2.insert(fence);
        }
    }
    let ops_of_key: Vec<&Op> = ops.iter().collect();
    let mut anomalies = Vec::new();
    for grant in ops
        .iter()
        .filter(|op| op.fence().is_some() && op.acked_yes())
    {
        let (from, until) = Holding::new(grant, &ops_of_key).certainly_held();
        if until - from < long_us {
            continue;
        }
        let fence = grant.fence().unwrap_or(0);
        for (observer, (first, last, fences)) in &observers {
            if *first <= from && until <= *last && !fences.contains(&fence) {
                anomalies.push(format!(
                    "observer {observer} never saw fence {fence}, certainly held {from}..{until} us"
                ));
            }
        }
    }
    anomalies
}

/// Each observer's last answer against the server's state at the end.
pub fn final_states(last: &[(usize, Option<(i64, String)>)], truth: &(i64, String)) -> Vec<String> {
    last.iter()
        .filter(|(_, seen)| seen.as_ref() != Some(truth))
        .map(|(observer, seen)| {
            format!("observer {observer} ends on {seen:?}, the leader is {truth:?}")
        })
        .collect()
}

/// The figures of a run.
#[derive(Debug, Default)]
pub struct Figures {
    pub leaderships: usize,
    pub unknown: usize,
    pub admitted: usize,
    pub stale_refused: usize,
    pub proclaims: usize,
    pub observations: usize,
    /// (observer, leadership) pairs where the observer saw the leadership, of all.
    pub leaders_seen: (usize, usize),
}

impl Figures {
    pub fn of(events: &[Event]) -> Self {
        let leaders: HashSet<i64> = events
            .iter()
            .filter_map(|e| Some(e.acked_grant()?.0))
            .collect();
        let mut seen: HashMap<usize, HashSet<i64>> = HashMap::new();
        for event in events {
            if let Some((fence, _)) = event.observed().filter(|(f, _)| leaders.contains(f)) {
                seen.entry(event.client).or_default().insert(fence);
            }
        }
        Figures {
            leaderships: leaders.len(),
            unknown: events
                .iter()
                .filter(|e| matches!(e.answer, Answer::Unknown(_)))
                .count(),
            admitted: events
                .iter()
                .filter(|e| e.answer == Answer::Admitted)
                .count(),
            stale_refused: events
                .iter()
                .filter(|e| matches!(e.answer, Answer::Stale(_)))
                .count(),
            proclaims: events
                .iter()
                .filter(|e| matches!(e.act, Act::Proclaim { .. }) && e.answer == Answer::Int(1))
                .count(),
            observations: events.iter().filter(|e| e.observed().is_some()).count(),
            leaders_seen: (
                seen.values().map(HashSet::len).sum(),
                seen.len() * leaders.len(),
            ),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "{} leaderships, {} unknown outcomes; fenced work admitted {}, stale work refused {}; {} proclaims; {} observer answers, leaderships seen by observers {} of {}",
            self.leaderships,
            self.unknown,
            self.admitted,
            self.stale_refused,
            self.proclaims,
            self.observations,
            self.leaders_seen.0,
            self.leaders_seen.1
        )
    }
}

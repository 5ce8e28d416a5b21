//! Candidate processes: a child of the test binary campaigns and writes each event as a
//! line on its stdout (`encode` / `decode`), so a candidate killed with SIGKILL leaves
//! its last command sent and unanswered, which the parent records as unknown.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::*;
use crate::reliability::history::now_us;
use crate::reliability::target::Target;

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

//! The two roles of an election run: a candidate campaigns, leads (fenced work, refreshes,
//! proclamations) and resigns; an observer follows the leader with `LOCK.OBSERVE`.

use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

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

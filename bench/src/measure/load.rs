//! The load driver: N connections, one thread each, every connection keeping up to
//! `depth` steps in flight (1 = unpipelined). What is sent is described by a
//! `Recipe`: an operation is one or more steps, each step may depend on the reply
//! to the one before (the token of a grant, whether `SET NX` succeeded). A step is one
//! command, or several sent in one write (`Command::width`: the four `LOCK.ACQUIRE`s
//! a client pipelines for four keys), which counts as one step in flight. A run does a
//! fixed number of operations per connection and is timed from a common start to the
//! last connection's finish. Built on testkit's RESP encoder and parser, with nothing
//! else per command (no client library): the generator must stay cheaper than the
//! server it loads.

use std::collections::VecDeque;
use std::io;
use std::sync::Barrier;
use std::time::Instant;

use testkit::resp::{Conn, Reply};

use crate::measure::operation::{Keys, Op, Outcome, CONN_STRIDE};
use crate::measure::recipes::Recipe;

/// What a run did: operations completed, operations that found their key taken, and
/// the wall-clock time from the common start to the last connection's end.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub ops: u64,
    pub busy: u64,
    pub seconds: f64,
}

impl Run {
    pub fn per_second(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }
}

/// Runs `ops_per_conn` operations on each of `conns` connections.
pub fn run(
    port: u16,
    conns: usize,
    depth: usize,
    ops_per_conn: u64,
    recipe: &Recipe,
) -> io::Result<Run> {
    let connections = (0..conns)
        .map(|_| Conn::connect(port))
        .collect::<io::Result<Vec<_>>>()?;
    let barrier = Barrier::new(conns + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = connections
            .into_iter()
            .enumerate()
            .map(|(index, conn)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut session = Session::new(recipe, index, ops_per_conn);
                    barrier.wait();
                    let result = session.drive(conn, depth);
                    let end = Instant::now();
                    result.and_then(|()| session.publish_granted())?;
                    Ok((session.completed, session.busy, end))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut total = Run {
            ops: 0,
            busy: 0,
            seconds: 0.0,
        };
        let mut first_error = None;
        for worker in workers {
            match worker.join() {
                Ok(Ok((completed, busy, end))) => {
                    total.ops += completed;
                    total.busy += busy;
                    total.seconds = total
                        .seconds
                        .max(end.saturating_duration_since(start).as_secs_f64());
                }
                Ok(Err(error)) => {
                    first_error.get_or_insert(error);
                }
                Err(_) => {
                    first_error.get_or_insert(io::Error::other("a load thread panicked"));
                }
            }
        }
        first_error.map_or(Ok(total), Err)
    })
}

/// One connection's share of a run.
struct Session<'a> {
    recipe: &'a Recipe,
    conn: usize,
    to_start: u64,
    sequence: u64,
    ready: VecDeque<Op>,
    in_flight: VecDeque<Op>,
    completed: u64,
    busy: u64,
    rng: u64,
    /// The tokens granted so far, by key place, where the recipe keeps them
    /// (`Command::records_tokens`): published into `recipe.held` at the end.
    granted: Vec<Vec<u8>>,
}

impl<'a> Session<'a> {
    fn new(recipe: &'a Recipe, conn: usize, ops: u64) -> Self {
        Self {
            recipe,
            conn,
            to_start: ops,
            sequence: 0,
            ready: VecDeque::new(),
            in_flight: VecDeque::new(),
            completed: 0,
            busy: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ (conn as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
            granted: Vec::new(),
        }
    }

    /// Hands the tokens this connection was granted to the recipe's `HeldTokens`, for
    /// the timed run that follows the set-up (a recipe that keeps none has none).
    fn publish_granted(&mut self) -> io::Result<()> {
        if !self.recipe.command.records_tokens() {
            return Ok(());
        }
        let granted = std::mem::take(&mut self.granted);
        if self.recipe.held.publish(self.conn, granted) {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "connection {}: nowhere to keep the tokens granted",
                self.conn
            )))
        }
    }

    fn record_granted(&mut self, op: &mut Op) {
        let place = usize::try_from(op.key % CONN_STRIDE).unwrap_or(usize::MAX);
        if place >= self.granted.len() {
            self.granted.resize(place + 1, Vec::new());
        }
        self.granted[place] = std::mem::take(&mut op.token);
    }

    fn next_key(&mut self) -> u64 {
        let base = self.conn as u64 * CONN_STRIDE;
        let sequence = self.sequence;
        self.sequence += 1;
        match self.recipe.command.keys() {
            Keys::Fresh => base + sequence,
            Keys::Cycle(n) => base + sequence % n.max(1),
            Keys::Random(n) => {
                // xorshift64*: cheap, and only has to spread keys.
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
            }
        }
    }

    /// Writes up to `depth` steps: next steps of answered operations first, then new
    /// operations. Returns how many commands were written (replies to read).
    fn fill(&mut self, depth: usize, out: &mut Vec<u8>) -> usize {
        let (mut steps, mut written) = (0, 0);
        while steps < depth {
            let op = if let Some(op) = self.ready.pop_front() {
                op
            } else if self.to_start > 0 {
                self.to_start -= 1;
                Op {
                    id: self.sequence,
                    key: self.next_key(),
                    step: 0,
                    part: 0,
                    token: Vec::new(),
                }
            } else {
                break;
            };
            self.recipe.command(self.conn, &op, out);
            written += self.recipe.command.width(op.step);
            self.in_flight.push_back(op);
            steps += 1;
        }
        written
    }

    fn on_reply(&mut self, reply: Reply) -> io::Result<()> {
        let op = self
            .in_flight
            .front_mut()
            .ok_or_else(|| io::Error::other("reply without a request"))?;
        let outcome = self.recipe.reply(op, reply);
        let width = self.recipe.command.width(op.step);
        let more = usize::from(op.part) + 1 < width;
        match outcome {
            // A hit with more replies of the same step to come: wait for them.
            Outcome::Next | Outcome::Done if more => {
                op.part += 1;
                return Ok(());
            }
            // A step of several commands is all hits or a failed run: dropping it
            // halfway would leave its other replies unread.
            Outcome::Busy if width > 1 => {
                return Err(io::Error::other(format!(
                    "key #{} busy in a step of {width} commands",
                    op.key
                )))
            }
            _ => {}
        }
        let Some(mut op) = self.in_flight.pop_front() else {
            return Err(io::Error::other("reply without a request"));
        };
        op.part = 0;
        match outcome {
            Outcome::Next => {
                op.step += 1;
                self.ready.push_back(op);
            }
            Outcome::Done => {
                if self.recipe.command.records_tokens() {
                    self.record_granted(&mut op);
                }
                self.completed += 1;
            }
            Outcome::Busy => {
                self.busy += 1;
                self.to_start += 1;
            }
            Outcome::Unexpected(what) => {
                return Err(io::Error::other(format!(
                    "unexpected reply at step {} of key #{}: {what}",
                    op.step, op.key
                )))
            }
        }
        Ok(())
    }

    fn drive(&mut self, mut conn: Conn, depth: usize) -> io::Result<()> {
        let mut out = Vec::with_capacity(depth * 96);
        loop {
            out.clear();
            let sent = self.fill(depth, &mut out);
            if sent == 0 {
                return Ok(());
            }
            conn.send(&out)?;
            for _ in 0..sent {
                let reply = conn.read_reply()?;
                self.on_reply(reply)?;
            }
        }
    }
}

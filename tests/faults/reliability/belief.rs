//! What the history proves of the holdings of sessions (the session clients of
//! `session`): the session side of `holding`. A session holding is never refreshed; one
//! `LOCK.KEEPALIVE` of its session moves all of its session's leases at once.
//!
//! **What the client believes.** A holding is believed from its grant's reply until the
//! first of: its holder sent a release of it or a close of its session (whatever came
//! back); its deadline passed, `ttl` after the acquire was sent or after the latest
//! keepalive that was *sent* while it was believed and *confirmed* covering it; or a
//! keepalive answered fewer holdings than the session may have on the server (then all it
//! believed is lost from that keepalive's send). A keepalive confirms covering when its
//! answer is at least the number of holdings the session may have on the server when it
//! ran: those believed, plus those not *settled* (an acquire whose reply was lost, a
//! holding given up but whose release was not answered, a lease not certainly over). The
//! clients send a session's commands one at a time, so nothing of the session is in
//! flight beside a keepalive: the session's holdings on the server are among those
//! counted, and an answer as large as their number proves each believed one was kept.
//! Under `WAIT` (failover) a keepalive confirms, and an answer settles, only once a
//! replica confirmed it. The client keeps the same books with its monotonic clock; the
//! checks judge these, derived from the history alone.
//!
//! **What the server can have done.** A lease's *floor*, the earliest end the server can
//! have given it, is the belief's deadline in whole milliseconds (the server read its
//! clock after the send). Its *ceiling*, the latest, starts at the grant's reply plus
//! `ttl` and grows with every keepalive that may have reached it while it could still be
//! live (one answered 0 reached nothing; an unanswered one removes the ceiling). A
//! holding with a lock-delay whose holder sent nothing that could end it before its
//! ceiling certainly ran out: its key (its room, when shared) stays taken by nobody until
//! at least the floor plus the delay.
//!
//! The judgements that cannot be wrong whatever a crash lost (`revivals`), and those that
//! hold only where nothing acknowledged is lost (`losses`, `overcounts`, and the
//! beliefs and quarantines the sweeps of `checker` judge), are kept apart.

use std::collections::HashMap;

use super::history::{Op, Outcome, Request};

/// Slack for millisecond rounding between the two sides' clock readings.
pub const SLACK_US: i64 = 2_000;

/// Why a belief ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its deadline passed without a keepalive confirming it.
    RanOut,
    /// Its holder sent a release.
    Released,
    /// Its holder sent a close of the session.
    Closed,
    /// A keepalive answered fewer holdings than the session may have.
    Lost,
}

/// One acknowledged grant of a session, as its client believed it.
#[derive(Clone, Debug)]
pub struct Believed<'a> {
    pub grant: &'a Op,
    /// When the client stopped believing (Unix us), and why.
    pub until_us: i64,
    pub ended: Ended,
    /// The earliest end of the lease the server can have given it (us).
    pub floor_us: i64,
    /// The latest end it can have given it (us); `None`: no bound.
    pub ceiling_us: Option<i64>,
    /// When its holder first sent a release or close that may have ended it.
    pub end_sent_us: Option<i64>,
    /// When the keepalives that confirmed it were sent.
    pub kept_at_us: Vec<i64>,
}

impl Believed<'_> {
    /// The end of the quarantine its lease certainly ran into (us): the floor plus the
    /// lock-delay, when it had one and its holder sent nothing that could have ended it
    /// before the ceiling.
    pub fn quarantined_until_us(&self) -> Option<i64> {
        let delay = self.grant.lock_delay_ms();
        let ceiling = self.ceiling_us?;
        let ran_out = self
            .end_sent_us
            .is_none_or(|sent| sent > ceiling + SLACK_US);
        (delay > 0 && ran_out).then_some(self.floor_us + delay * 1_000)
    }
}

/// Any grant of a session that may have taken effect (acknowledged or not), as the
/// history leaves it.
#[derive(Clone, Debug)]
pub struct Known<'a> {
    pub grant: &'a Op,
    /// The latest end of its lease (us); `None`: no bound.
    pub ceiling_us: Option<i64>,
    /// A release or close of it was answered (and confirmed): it left the server.
    pub settled: bool,
}

/// The judgement of every session in a history.
#[derive(Default)]
pub struct Sessions<'a> {
    pub believed: Vec<Believed<'a>>,
    pub known: Vec<Known<'a>>,
    /// Whatever a crash lost: a release of a holding answered 1 after its lease
    /// certainly ended; a keepalive or close that answered more holdings than can still
    /// have been live, released or not.
    pub revivals: Vec<String>,
    /// Only where nothing acknowledged is lost: a holding believed, certainly within its
    /// lease when a command ran, that the command did not find.
    pub losses: Vec<String>,
    /// Only where nothing acknowledged is lost: more holdings counted than the session
    /// had unsettled (beyond what `revivals` reports).
    pub overcounts: Vec<String>,
    /// Commands of one session that were in flight together: the clients broke the rule
    /// the beliefs rest on (a harness defect, reported as an anomaly all the same).
    pub interleaved: Vec<String>,
    pub keepalives: usize,
    pub confirmed: usize,
    pub short: usize,
    pub closes: usize,
}

/// What the history shows of one holding, believed or not.
struct Track<'a> {
    grant: &'a Op,
    /// While believed: the deadline (us, the floor).
    deadline_us: Option<i64>,
    belief: Option<Believed<'a>>,
    ceiling_us: Option<i64>,
    /// A release or close that answered (and was confirmed) took it off the server.
    settled: bool,
    end_sent_us: Option<i64>,
}

impl Track<'_> {
    /// Its lease can still be live at `at_us`.
    fn may_live_at(&self, at_us: i64) -> bool {
        self.ceiling_us.is_none_or(|c| c + SLACK_US >= at_us)
    }

    /// Believed, and its lease certainly lasts beyond `at_us`.
    fn surely_live_at(&self, at_us: i64) -> bool {
        self.deadline_us.is_some_and(|d| d > at_us + SLACK_US)
    }

    fn end_belief(&mut self, at_us: i64, ended: Ended) {
        if let (Some(deadline), Some(belief)) = (self.deadline_us.take(), self.belief.as_mut()) {
            belief.until_us = at_us.min(deadline);
            belief.ended = ended;
            belief.floor_us = deadline;
        }
    }

    fn sent_end(&mut self, at_us: i64) {
        self.end_sent_us = Some(self.end_sent_us.map_or(at_us, |s| s.min(at_us)));
    }
}

/// The floor (us) of a lease of `ttl_ms` asked at `invoked_us`.
fn floor_us(invoked_us: i64, ttl_ms: i64) -> i64 {
    (invoked_us / 1_000 + ttl_ms) * 1_000
}

/// The ceiling (us) of a lease of `ttl_ms` answered at `completed_us`: live through
/// the whole millisecond of its deadline.
fn ceiling_us(completed_us: i64, ttl_ms: i64) -> i64 {
    (completed_us / 1_000 + ttl_ms + 1) * 1_000
}

fn describe(op: &Op) -> String {
    format!(
        "client {} {:?} on {:?} at {}..{} us -> {:?} (node {}{})",
        op.client,
        op.request,
        op.key,
        op.invoked_us,
        op.completed_us,
        op.outcome,
        op.node,
        if op.confirmed { "" } else { ", unconfirmed" }
    )
}

/// The ops of each session, in the order sent: its acquires, keepalives and closes, and
/// the releases of its tokens.
fn by_session(ops: &[Op]) -> HashMap<&str, Vec<&Op>> {
    let token_session: HashMap<&str, &str> = ops
        .iter()
        .filter_map(|op| match &op.request {
            Request::SessionAcquire { session, token, .. } => {
                Some((token.as_str(), session.as_str()))
            }
            _ => None,
        })
        .collect();
    let mut sessions: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in ops {
        let session = match &op.request {
            Request::Release { token } => token_session.get(token.as_str()).copied(),
            _ => op.session(),
        };
        if let Some(session) = session {
            sessions.entry(session).or_default().push(op);
        }
    }
    for ops in sessions.values_mut() {
        ops.sort_by_key(|op| op.invoked_us);
    }
    sessions
}

impl<'a> Sessions<'a> {
    /// Judges every session of `ops`.
    pub fn of(ops: &'a [Op]) -> Self {
        let mut judged = Sessions::default();
        let mut sessions: Vec<(&str, Vec<&Op>)> = by_session(ops).into_iter().collect();
        sessions.sort_by_key(|(name, _)| *name);
        for (name, ops) in sessions {
            judged.session(name, &ops);
        }
        judged
    }

    fn session(&mut self, name: &str, ops: &[&'a Op]) {
        for pair in ops.windows(2) {
            if pair[1].invoked_us < pair[0].completed_us {
                self.interleaved.push(format!(
                    "session {name}: {} sent while {} was in flight",
                    describe(pair[1]),
                    describe(pair[0])
                ));
            }
        }
        let mut tracks: Vec<Track<'a>> = Vec::new();
        let mut by_token: HashMap<&str, usize> = HashMap::new();
        for &op in ops {
            let at = op.invoked_us;
            for track in tracks.iter_mut() {
                if track.deadline_us.is_some_and(|d| d <= at) {
                    track.end_belief(at, Ended::RanOut);
                }
            }
            match &op.request {
                Request::SessionAcquire { token, ttl_ms, .. } => {
                    let ceiling = match op.outcome {
                        Outcome::Granted { .. } => Some(ceiling_us(op.completed_us, *ttl_ms)),
                        Outcome::Unknown(_) => None,
                        _ => continue,
                    };
                    let believed = op.acked_yes();
                    let deadline = floor_us(at, *ttl_ms);
                    by_token.insert(token.as_str(), tracks.len());
                    tracks.push(Track {
                        grant: op,
                        deadline_us: believed.then_some(deadline),
                        belief: believed.then(|| Believed {
                            grant: op,
                            until_us: deadline,
                            ended: Ended::RanOut,
                            floor_us: deadline,
                            ceiling_us: None,
                            end_sent_us: None,
                            kept_at_us: Vec::new(),
                        }),
                        ceiling_us: ceiling,
                        settled: false,
                        end_sent_us: None,
                    });
                }
                Request::Release { token } => {
                    let Some(track) = by_token.get(token.as_str()).map(|&i| &mut tracks[i]) else {
                        continue;
                    };
                    if matches!(op.outcome, Outcome::Done(true)) && !track.may_live_at(at) {
                        self.revivals.push(format!(
                            "session {name}: released after its lease certainly ended at {:?} us: {} (grant {})",
                            track.ceiling_us,
                            describe(op),
                            describe(track.grant)
                        ));
                    }
                    if matches!(op.outcome, Outcome::Done(false))
                        && track.surely_live_at(op.completed_us)
                    {
                        self.losses.push(format!(
                            "session {name}: a believed holding, its lease lasting until at least {:?} us, was not found: {} (grant {})",
                            track.deadline_us,
                            describe(op),
                            describe(track.grant)
                        ));
                    }
                    track.end_belief(at, Ended::Released);
                    track.sent_end(at);
                    if matches!(op.outcome, Outcome::Done(_)) && op.confirmed {
                        track.settled = true;
                    }
                }
                Request::KeepAlive { ttl_ms, .. } => {
                    self.keepalives += 1;
                    let answered = op.count();
                    self.judge_count(name, op, &tracks);
                    let unsettled = tracks
                        .iter()
                        .filter(|t| !t.settled && t.may_live_at(at))
                        .count();
                    match answered {
                        Some(n) if n >= unsettled as i64 && op.confirmed => {
                            self.confirmed += 1;
                            for track in tracks.iter_mut() {
                                if let (Some(deadline), Some(belief)) =
                                    (track.deadline_us.as_mut(), track.belief.as_mut())
                                {
                                    *deadline = (*deadline).max(floor_us(at, *ttl_ms));
                                    belief.kept_at_us.push(at);
                                }
                            }
                        }
                        Some(n) if n < unsettled as i64 => {
                            self.short += 1;
                            for track in tracks.iter_mut() {
                                track.end_belief(at, Ended::Lost);
                            }
                        }
                        _ => {}
                    }
                    let reached = match op.outcome {
                        Outcome::Count(n) if n >= 1 => {
                            Some(Some(ceiling_us(op.completed_us, *ttl_ms)))
                        }
                        Outcome::Unknown(_) => Some(None),
                        _ => None,
                    };
                    if let Some(ceiling) = reached {
                        for track in tracks.iter_mut().filter(|t| t.may_live_at(at)) {
                            track.ceiling_us = match (track.ceiling_us, ceiling) {
                                (Some(old), Some(new)) => Some(old.max(new)),
                                _ => None,
                            };
                        }
                    }
                }
                Request::Close { .. } => {
                    self.closes += 1;
                    self.judge_count(name, op, &tracks);
                    for track in tracks.iter_mut().filter(|t| !t.settled) {
                        track.end_belief(at, Ended::Closed);
                        track.sent_end(at);
                        if op.count().is_some() && op.confirmed {
                            track.settled = true;
                        }
                    }
                }
                Request::Acquire { .. } | Request::AcquireAll { .. } | Request::Refresh { .. } => {}
            }
        }
        for mut track in tracks {
            if let Some(deadline) = track.deadline_us {
                track.end_belief(deadline, Ended::RanOut);
            }
            self.known.push(Known {
                grant: track.grant,
                ceiling_us: track.ceiling_us,
                settled: track.settled,
            });
            if let Some(mut belief) = track.belief {
                belief.ceiling_us = track.ceiling_us;
                belief.end_sent_us = track.end_sent_us;
                self.believed.push(belief);
            }
        }
    }

    /// A keepalive's or close's count against what the session can have had: no more
    /// than the holdings whose leases may still be live (released or not: a crash may
    /// have brought a released one back), and, where nothing is lost, no more than the
    /// unsettled ones and no fewer than those believed and certainly live.
    fn judge_count(&mut self, name: &str, op: &Op, tracks: &[Track]) {
        let Some(n) = op.count() else { return };
        let at = op.invoked_us;
        let may_live = tracks.iter().filter(|t| t.may_live_at(at)).count() as i64;
        let unsettled = tracks
            .iter()
            .filter(|t| !t.settled && t.may_live_at(at))
            .count() as i64;
        let surely = tracks
            .iter()
            .filter(|t| t.surely_live_at(op.completed_us))
            .count() as i64;
        if n > may_live {
            self.revivals.push(format!(
                "session {name}: counted {n} holdings where at most {may_live} can still have been live: {}",
                describe(op)
            ));
        } else if n > unsettled {
            self.overcounts.push(format!(
                "session {name}: counted {n} holdings where {unsettled} were not settled: {}",
                describe(op)
            ));
        }
        if n < surely {
            self.losses.push(format!(
                "session {name}: counted {n} holdings where {surely} were believed and certainly live: {}",
                describe(op)
            ));
        }
    }

    /// The believed holdings that ran into a certain quarantine, with its end (us).
    pub fn quarantines(&self) -> impl Iterator<Item = (&Believed<'a>, i64)> + '_ {
        self.believed
            .iter()
            .filter_map(|b| b.quarantined_until_us().map(|until| (b, until)))
    }

    /// How the beliefs ended, for the notes.
    pub fn endings(&self) -> String {
        let count = |ended| self.believed.iter().filter(|b| b.ended == ended).count();
        let kept = self
            .believed
            .iter()
            .filter(|b| !b.kept_at_us.is_empty())
            .count();
        format!(
            "{} session holdings ({kept} kept alive by a keepalive): released {}, closed {}, ran out {}, lost {}; keepalives {} ({} confirmed, {} short), closes {}",
            self.believed.len(),
            count(Ended::Released),
            count(Ended::Closed),
            count(Ended::RanOut),
            count(Ended::Lost),
            self.keepalives,
            self.confirmed,
            self.short,
            self.closes
        )
    }
}

//! The sessions' part of the report (scenario 7): a table of `LOCK.KEEPALIVE` against
//! the same holdings refreshed one pipelined `LOCK.REFRESH` each, per session size
//! (server CPU of each, their ratio, the cost per holding, and the ratio in the
//! commands' own time), a table of bytes per held lock without a session, in one
//! session and with a session each, and the targets for both: a keepalive of
//! 1,000 holdings below 1,000 pipelined refreshes in server CPU, linear in the
//! holdings (per holding at 10,000 at most 2× per holding at 100: the cost curves'
//! bound on growth, applied per holding), and a lock with a session at most 48 B above
//! one without, its share of the session index included.

use crate::report::common::{cell, fixed, group_digits, target, times, Table, Want};
use crate::report::section::Section;
use crate::results::sessions::SessionsResult;
use crate::results::Target;

/// The session size the keepalive-against-refreshes target is judged at.
pub const RATIO_AT: u64 = 1_000;
/// The sizes linearity is judged between: per holding at the larger ÷ at the smaller.
pub const LINEAR_FROM: u64 = 100;
pub const LINEAR_TO: u64 = 10_000;
/// Most a keepalive's cost per holding may grow from `LINEAR_FROM` to `LINEAR_TO`.
const LINEAR_GROWTH: f64 = 2.0;
/// Most a lock with a session may cost above one without, index included (bytes).
pub const SESSION_BYTES: f64 = 48.0;

fn ratio_name() -> String {
    format!(
        "sessions, {} holdings: server CPU of one LOCK.KEEPALIVE ÷ {} pipelined LOCK.REFRESH",
        group_digits(RATIO_AT),
        group_digits(RATIO_AT)
    )
}

fn linear_name() -> String {
    format!(
        "sessions: LOCK.KEEPALIVE server CPU per holding, {} ÷ {} holdings (linear)",
        group_digits(LINEAR_TO),
        group_digits(LINEAR_FROM)
    )
}

const ONE_SESSION_NAME: &str =
    "sessions, memory: a lock in one session of all, above a lock without (index included)";
const OWN_SESSIONS_NAME: &str =
    "sessions, memory: a lock in a session of its own, above a lock without (index included)";

/// Every target of the sessions, listed whether or not this run measured it.
pub fn targets(sessions: Option<&SessionsResult>) -> Vec<Target> {
    let ratio = sessions.and_then(|s| s.point(RATIO_AT)).map(|p| p.ratio());
    let linear = sessions.and_then(|s| {
        let from = s.point(LINEAR_FROM)?.keepalive_per_holding();
        let to = s.point(LINEAR_TO)?.keepalive_per_holding();
        Some(to.iter().zip(&from).map(|(to, from)| to / from).collect())
    });
    let memory = sessions.map(|s| &s.memory);
    vec![
        target(ratio_name(), Want::Below(1.0), "×", ratio),
        target(linear_name(), Want::AtMost(LINEAR_GROWTH), "×", linear),
        target(
            ONE_SESSION_NAME.into(),
            Want::AtMost(SESSION_BYTES),
            " B",
            memory
                .filter(|m| !m.plain_held.is_empty())
                .map(|m| m.one_session_extra()),
        ),
        target(
            OWN_SESSIONS_NAME.into(),
            Want::AtMost(SESSION_BYTES),
            " B",
            memory
                .filter(|m| !m.plain_held.is_empty())
                .map(|m| m.own_sessions_extra()),
        ),
    ]
}

pub fn keepalive_table(sessions: &SessionsResult) -> Table {
    let mut table = Table::new(&[
        "holdings in the session",
        "LOCK.KEEPALIVE µs",
        "as many pipelined LOCK.REFRESH µs",
        "keepalive ÷ refreshes",
        "LOCK.KEEPALIVE µs per holding",
        "LOCK.REFRESH µs each",
        "in-command time: keepalive ÷ refreshes",
    ]);
    for p in &sessions.points {
        table.row(vec![
            group_digits(p.holdings),
            cell(&p.keepalive_us, 2),
            cell(&p.refreshes_us, 2),
            times(&p.ratio()),
            cell(&p.keepalive_per_holding(), 3),
            cell(&p.refresh_per_holding(), 3),
            times(&p.command_ratio()),
        ]);
    }
    table
}

pub fn memory_table(sessions: &SessionsResult) -> Table {
    let m = &sessions.memory;
    let n = group_digits(m.holdings);
    let mut table = Table::new(&["memory", "bytes: median [min–max]"]);
    let rows = [
        (
            "per held lock: no session".to_string(),
            m.plain_held.clone(),
        ),
        (
            format!("per held lock: one session of {n} locks"),
            m.one_session_held.clone(),
        ),
        (
            format!("per held lock: a session each ({n} sessions of one lock)"),
            m.own_sessions_held.clone(),
        ),
        (
            format!("one session, above no session (≤ {SESSION_BYTES} B wanted)"),
            m.one_session_extra(),
        ),
        (
            format!("a session each, above no session (≤ {SESSION_BYTES} B wanted)"),
            m.own_sessions_extra(),
        ),
        (
            "left per released lock: no session".into(),
            m.plain_left.clone(),
        ),
        (
            "left per released lock: one session".into(),
            m.one_session_left.clone(),
        ),
        (
            "left per released lock: a session each".into(),
            m.own_sessions_left.clone(),
        ),
    ];
    for (what, samples) in rows {
        table.row(vec![what, cell(&samples, 1)]);
    }
    table
}

fn notes(sessions: &SessionsResult) -> Vec<String> {
    let calls: Vec<String> = sessions
        .points
        .iter()
        .map(|p| format!("{} at {}", group_digits(p.calls), group_digits(p.holdings)))
        .collect();
    let idle: Vec<String> = sessions
        .idle_cpu_share
        .iter()
        .map(|x| format!("{}%", fixed(1)(x * 100.0)))
        .collect();
    vec![
        format!(
            "One session holding every lock (exclusive, server tokens, {}-minute leases). \
             Server CPU of the event loop (/proc/<pid>/schedstat) per LOCK.KEEPALIVE \
             ({} in flight) and per round of as many LOCK.REFRESH as the session has \
             holdings, on the same locks, each round sent whole as one pipeline; median \
             [min–max] over repetitions in alternating order, each ratio taken within a \
             repetition. Per measurement {} keepalives (and as many rounds of \
             refreshes), at least {} leases moved each; the idle server's share of a CPU ({}) taken off pro \
             rata of each run's wall time. In-command time is INFO commandstats' (inside the \
             command: not reading, parsing or replying). Persistence off and no replica, \
             as in every scenario: what each moved lease propagates is written nowhere, \
             for either.",
            sessions.lease_ms / 60_000,
            sessions.depth,
            calls.join(", "),
            group_digits(sessions.renewals),
            idle.join(" / ")
        ),
        format!(
            "Memory: used_memory delta over {} held locks, read once stable on an idle \
             connection (as scenario 4), without a session, in one session, and with a \
             session each; 32-hex-character session names; then left per lock once each \
             is released with LOCK.RELEASE.",
            group_digits(sessions.memory.holdings)
        ),
    ]
}

/// The section (in report.md, docs/performance.md's figures and on stdout).
pub fn section(sessions: Option<&SessionsResult>) -> Section {
    let Some(sessions) = sessions else {
        return Section::not_measured("the sessions");
    };
    notes(sessions)
        .into_iter()
        .fold(Section::new(), Section::remark)
        .heading(
            "LOCK.KEEPALIVE against pipelined LOCK.REFRESH (server CPU µs)",
            "LOCK.KEEPALIVE AGAINST PIPELINED LOCK.REFRESH (server CPU µs)",
        )
        .table(keepalive_table(sessions))
        .heading(
            "Memory per held lock, with and without a session",
            "MEMORY PER HELD LOCK, WITH AND WITHOUT A SESSION",
        )
        .table(memory_table(sessions))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::report::section::Format;
    use crate::results::sessions::{KeepalivePoint, SessionMemory};

    /// A run of every size, with the spread a real one has.
    pub fn example() -> SessionsResult {
        let point = |holdings: u64, keepalive: f64, refresh_each: f64| KeepalivePoint {
            holdings,
            calls: 200_000u64.div_ceil(holdings).max(50),
            keepalive_us: vec![keepalive, keepalive * 1.1, keepalive * 0.9],
            refreshes_us: vec![refresh_each * holdings as f64; 3],
            keepalive_command_us: vec![keepalive * 0.8; 3],
            refreshes_command_us: vec![refresh_each * 0.5 * holdings as f64; 3],
        };
        SessionsResult {
            lease_ms: 600_000,
            renewals: 200_000,
            depth: 32,
            points: vec![
                point(1, 1.5, 1.0),
                point(100, 40.0, 1.0),
                point(1_000, 400.0, 1.0),
                point(10_000, 4_500.0, 1.0),
            ],
            memory: SessionMemory {
                holdings: 10_000,
                plain_held: vec![170.0, 170.0, 170.5],
                one_session_held: vec![210.0, 211.0, 211.0],
                own_sessions_held: vec![400.0, 401.0, 399.0],
                plain_left: vec![0.0; 3],
                one_session_left: vec![0.0; 3],
                own_sessions_left: vec![100.0; 3],
            },
            idle_cpu_share: vec![0.002, f64::NAN, 0.002, 0.002],
        }
    }

    /// Each target judged on the median of its per-repetition figures; none dropped
    /// when the run did not measure the sessions.
    #[test]
    fn targets_are_judged_and_listed_when_not_measured() {
        let run = example();
        let targets = targets(Some(&run));
        let judged = |name: &str| targets.iter().find(|t| t.name == name).unwrap();
        let ratio = judged(&ratio_name());
        assert_eq!(ratio.wanted, "< 1×");
        assert!((ratio.measured.median - 0.4).abs() < 1e-9);
        assert_eq!(ratio.met, Some(true));
        // 4,500 / 10,000 per holding ÷ 40 / 100: 1.125.
        let linear = judged(&linear_name());
        assert!((linear.measured.median - 1.125).abs() < 1e-9);
        assert_eq!(linear.met, Some(true));
        let one = judged(ONE_SESSION_NAME);
        assert!((one.measured.median - 40.5).abs() < 1e-9);
        assert_eq!((one.wanted.as_str(), one.met), ("≤ 48 B", Some(true)));
        assert_eq!(judged(OWN_SESSIONS_NAME).met, Some(false));
        let none = super::targets(None);
        assert_eq!(none.len(), targets.len());
        assert!(none.iter().all(|t| t.met.is_none()));
    }

    #[test]
    fn sessions_read_back_from_json_and_render() {
        let run = example();
        let json = serde_json::to_string(&run).unwrap();
        let back: SessionsResult = serde_json::from_str(&json).unwrap();
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
        assert!(back.idle_cpu_share[1].is_nan());
        let page = section(Some(&back)).render(Format::Markdown);
        assert!(page.contains("| 1,000 | 400.00 [360.00–440.00] | 1000.00 [1000.00–1000.00] | 0.400× [0.360×–0.440×] |"), "{page}");
        assert!(
            page.contains("| one session, above no session (≤ 48 B wanted) | 40.5 [40.0–41.0] |"),
            "{page}"
        );
        assert!(section(Some(&back)).render(Format::Text).contains("10,000"));
        assert!(section(None)
            .render(Format::Markdown)
            .contains("Not measured"));
    }
}

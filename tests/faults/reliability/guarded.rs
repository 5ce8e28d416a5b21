//! A counter in Redis that every holder increments through `LOCK.GUARD`: read under the
//! guard when its hold starts, written back plus one under the guard when it ends, as an
//! application protects data that lives in Redis. No stale write may be admitted: the
//! final counts add up to at least the acknowledged writes (an admitted stale write
//! would overwrite a newer value and lose an update) and to at most the acknowledged
//! plus the unknown ones (a write whose reply was lost may have applied).
//!
//! Each write is logged with the value it wrote and when it was sent, so that a crash
//! can be judged too: the counters a restarted server shows are compared with the
//! acknowledged writes the killed process answered (`lost_in_crash`), and within one
//! server process two acknowledged writes of the same value betray a stale write even
//! where crashes lost others (`stale_within_processes`).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use redis::{Connection, ErrorKind, Value};

use super::client::Sent;
use super::durability::Loss;

/// The counter guarded by the lock `key`.
pub fn counter_key(key: &str) -> String {
    format!("{key}:guarded")
}

/// `LOCK.GUARD key token <inner…>` as a command.
pub fn guard(key: &str, token: &str, inner: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd("LOCK.GUARD");
    command.arg(key).arg(token).arg(inner);
    command
}

/// How a guarded write came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    Acked,
    /// Answered, but `WAIT 1` did not confirm a replica has it: a failover may lose it.
    Unconfirmed,
    /// NOTHELD (the lease ran out while the holder slept), READONLY, …: not applied.
    Refused,
    /// No reply: it may have applied.
    Unknown,
}

/// One guarded `SET` of a counter.
#[derive(Clone, Debug)]
pub struct GuardedWrite {
    /// The lock key (the counter is `counter_key(key)`).
    pub key: String,
    pub value: i64,
    pub invoked_us: i64,
    pub completed_us: i64,
    pub outcome: Written,
}

/// Every guarded write of a run.
#[derive(Default, Debug)]
pub struct GuardedCounts {
    writes: Mutex<Vec<GuardedWrite>>,
}

impl GuardedCounts {
    /// Logs the write of `value` to `key`'s counter and how it came out.
    pub fn record(&self, key: &str, value: i64, sent: &Sent) {
        let outcome = match &sent.reply {
            Ok(_) if sent.confirmed => Written::Acked,
            Ok(_) => Written::Unconfirmed,
            Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                Written::Refused
            }
            Err(_) => Written::Unknown,
        };
        self.lock().push(GuardedWrite {
            key: key.into(),
            value,
            invoked_us: sent.invoked_us,
            completed_us: sent.completed_us,
            outcome,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<GuardedWrite>> {
        self.writes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the log so far.
    pub fn writes(&self) -> Vec<GuardedWrite> {
        self.lock().clone()
    }

    pub fn count(&self, outcome: Written) -> i64 {
        self.lock().iter().filter(|w| w.outcome == outcome).count() as i64
    }

    pub fn acked(&self) -> i64 {
        self.count(Written::Acked)
    }

    pub fn refused(&self) -> i64 {
        self.count(Written::Refused)
    }

    /// Writes that may or may not be in the counters: unanswered or unconfirmed.
    pub fn maybe(&self) -> i64 {
        self.count(Written::Unknown) + self.count(Written::Unconfirmed)
    }

    /// Anomalies, given the counters' final values summed over every key: every
    /// acknowledged write must be in them, and nothing beyond what was sent.
    pub fn check(&self, final_total: i64) -> Vec<String> {
        let acked = self.acked();
        let mut anomalies = Vec::new();
        if final_total < acked {
            anomalies.push(format!(
                "guarded counters total {final_total} < {acked} acknowledged writes: a stale write was admitted or an acknowledged one lost"
            ));
        }
        anomalies.extend(self.beyond_sent(final_total));
        anomalies
    }

    /// What holds even where acknowledged writes may be lost: the counters add up to no
    /// more than the writes that may have applied, and some write was acknowledged.
    pub fn beyond_sent(&self, final_total: i64) -> Vec<String> {
        let (acked, maybe) = (self.acked(), self.maybe());
        let mut anomalies = Vec::new();
        if final_total > acked + maybe {
            anomalies.push(format!(
                "guarded counters total {final_total} > {acked} acknowledged + {maybe} unknown writes"
            ));
        }
        if acked == 0 {
            anomalies.push("no guarded write was acknowledged: the run proved nothing".into());
        }
        anomalies
    }

    /// Acknowledged writes a restarted server does not show. `restored` holds each
    /// counter as read after the restart (at `observed_us`, before load resumed); the
    /// killed process answered every write sent between `since_us` (when the process
    /// before it was gone, 0 for the first) and `killed_us` (when it was gone), and its
    /// writes of a key went up from the value it restored, so those above the value now
    /// restored are lost. A key written after `killed_us` but before the reading may
    /// show a write of the new process (a client that passed the gate before it closed):
    /// it is skipped.
    pub fn lost_in_crash(
        &self,
        restored: &HashMap<String, i64>,
        since_us: i64,
        (crash_us, killed_us, observed_us): (i64, i64, i64),
    ) -> Vec<Loss> {
        let writes = self.writes();
        let disturbed: HashSet<&str> = writes
            .iter()
            .filter(|w| w.invoked_us >= killed_us && w.invoked_us <= observed_us)
            .map(|w| w.key.as_str())
            .collect();
        writes
            .iter()
            .filter(|w| w.outcome == Written::Acked)
            .filter(|w| w.invoked_us > since_us && w.invoked_us < killed_us)
            .filter(|w| !disturbed.contains(w.key.as_str()))
            .filter(|w| restored.get(&w.key).is_some_and(|&now| w.value > now))
            .map(|w| Loss {
                what: format!(
                    "{}: acknowledged guarded write of {} lost (the counter is now {:?})",
                    w.key,
                    w.value,
                    restored.get(&w.key)
                ),
                window_us: (crash_us - w.completed_us).max(0),
            })
            .collect()
    }

    /// Two acknowledged writes of the same value to one counter by one server process:
    /// both holders read the same value, so one of them was stale when admitted. Crashes
    /// end processes at `killed_us` (sorted); writes are attributed by when they were
    /// sent (a write sent before a kill finished went to the process killed, one sent
    /// after to a later one). Across processes a value may repeat legitimately: a crash
    /// lost the first write and a later holder read the older value again.
    pub fn stale_within_processes(&self, killed_us: &[i64]) -> Vec<String> {
        let mut seen: HashMap<(String, usize, i64), GuardedWrite> = HashMap::new();
        let mut anomalies = Vec::new();
        for write in self
            .writes()
            .into_iter()
            .filter(|w| w.outcome == Written::Acked)
        {
            let process = killed_us.partition_point(|&killed| killed < write.invoked_us);
            let slot = (write.key.clone(), process, write.value);
            if let Some(first) = seen.get(&slot) {
                anomalies.push(format!(
                    "{}: value {} written twice by server process {process}, a stale write admitted: {first:?} and {write:?}",
                    write.key, write.value
                ));
            } else {
                seen.insert(slot, write);
            }
        }
        anomalies
    }

    /// The guarded figures for a scenario's notes.
    pub fn describe(&self, final_total: i64) -> String {
        let unconfirmed = self.count(Written::Unconfirmed);
        let unconfirmed = if unconfirmed > 0 {
            format!(", {unconfirmed} answered but unconfirmed by a replica")
        } else {
            String::new()
        };
        format!(
            "guarded writes {} acknowledged{unconfirmed}, {} unknown, {} refused, counters total {final_total}",
            self.acked(),
            self.count(Written::Unknown),
            self.refused()
        )
    }
}

/// The counters of `keys`, by lock key (0 where never written).
pub fn counters(con: &mut Connection, keys: &[String]) -> HashMap<String, i64> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("GET").arg(counter_key(key));
    }
    let values: Vec<Option<i64>> = pipe.query(con).expect("GET counters");
    keys.iter()
        .cloned()
        .zip(values.into_iter().map(|value| value.unwrap_or(0)))
        .collect()
}

/// The counters' values summed over the run's keys.
pub fn final_total(con: &mut Connection, keys: &[String]) -> i64 {
    counters(con, keys).values().sum()
}

/// The value a guarded `GET` of a counter answered, if it answered one.
pub fn read_value(sent: Sent) -> Option<i64> {
    match sent.reply {
        Ok(Value::Nil) => Some(0),
        Ok(value) => redis::from_redis_value::<i64>(value).ok(),
        Err(_) => None,
    }
}

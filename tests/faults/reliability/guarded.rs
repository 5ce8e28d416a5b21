//! A counter in Redis that every holder increments through `LOCK.GUARD`: read under the
//! guard when its hold starts, written back plus one under the guard when it ends, as an
//! application protects data that lives in Redis. No stale write may be admitted: the
//! final counts add up to at least the acknowledged writes (an admitted stale write
//! would overwrite a newer value and lose an update) and to at most the acknowledged
//! plus the unknown ones (a write whose reply was lost may have applied).

use std::sync::atomic::{AtomicI64, Ordering};

use redis::{Connection, ErrorKind, Value};

/// The counter guarded by the lock `key`.
pub fn counter_key(key: &str) -> String {
    format!("{key}:guarded")
}

/// What the guarded writes of a run came to.
#[derive(Default, Debug)]
pub struct GuardedCounts {
    acked: AtomicI64,
    refused: AtomicI64,
    unknown: AtomicI64,
}

/// `LOCK.GUARD key token <inner…>` as a command.
pub fn guard(key: &str, token: &str, inner: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd("LOCK.GUARD");
    command.arg(key).arg(token).arg(inner);
    command
}

impl GuardedCounts {
    /// Counts the reply of a guarded write.
    pub fn record(&self, reply: &redis::RedisResult<Value>) {
        let counter = match reply {
            Ok(_) => &self.acked,
            // NOTHELD (the lease ran out while the holder slept), READONLY, …: refused.
            Err(error) if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) => {
                &self.refused
            }
            Err(_) => &self.unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self) -> i64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Anomalies, given the counters' final values summed over every key.
    pub fn check(&self, final_total: i64) -> Vec<String> {
        let acked = self.acked.load(Ordering::Relaxed);
        let unknown = self.unknown.load(Ordering::Relaxed);
        let mut anomalies = Vec::new();
        if final_total < acked {
            anomalies.push(format!(
                "guarded counters total {final_total} < {acked} acknowledged writes: a stale write was admitted"
            ));
        }
        if final_total > acked + unknown {
            anomalies.push(format!(
                "guarded counters total {final_total} > {acked} acknowledged + {unknown} unknown writes"
            ));
        }
        if acked == 0 {
            anomalies.push("no guarded write was acknowledged: the run proved nothing".into());
        }
        anomalies
    }
}

/// The counters' values summed over the run's keys.
pub fn final_total(con: &mut Connection, keys: &[String]) -> i64 {
    keys.iter()
        .map(|key| {
            redis::cmd("GET")
                .arg(counter_key(key))
                .query::<Option<i64>>(con)
                .expect("GET counter")
                .unwrap_or(0)
        })
        .sum()
}

//! The watchers of scenario 9, many connections in one `Crowd`: observers blocked in
//! `LOCK.OBSERVE key fence value BLOCK 0`, and the hand-rolled way's subscribers
//! (`SUBSCRIBE channel`), each with a second connection for its `GET` where asked.
//! Joined in batches below the listen backlog, each batch confirmed before the next.

use std::io;
use std::time::{Duration, Instant};

use testkit::resp::{encode, Conn, Reply};

use crate::measure::curves::crowd::Crowd;
use crate::measure::curves::LEASE;
use crate::measure::lua::leader_value;
use crate::measure::server::info_field;

/// The leader key, and the hand-rolled way's channel.
pub const KEY: &[u8] = b"election:leader";
pub const CHANNEL: &[u8] = b"election:leader:changed";
/// The token of the leader's holdings (22 characters, as the other scenarios').
pub const TOKEN: &[u8] = b"election-token-0000001";
/// Connections added between two checks (fewer than the listen backlog).
const BATCH: u64 = 400;

/// What an observer knows: the holder's fence and value (`0 ""` for a free key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Known {
    pub fence: i64,
    pub value: Vec<u8>,
}

impl Known {
    pub const FREE: Known = Known {
        fence: 0,
        value: Vec::new(),
    };

    /// `[fence, value]` of `LOCK.OBSERVE` (nil known as "").
    pub fn of(reply: &Reply) -> Option<Known> {
        match reply {
            Reply::Array(Some(items)) => match items.as_slice() {
                [Reply::Integer(fence), Reply::Bulk(value)] => Some(Known {
                    fence: *fence,
                    value: value.clone().unwrap_or_default(),
                }),
                _ => None,
            },
            _ => None,
        }
    }

    /// `LOCK.OBSERVE key fence value BLOCK 0`: wait until the state differs.
    pub fn observe(&self, out: &mut Vec<u8>) {
        let fence = self.fence.to_string();
        encode(
            out,
            &[
                b"LOCK.OBSERVE",
                KEY,
                fence.as_bytes(),
                &self.value,
                b"BLOCK",
                b"0",
            ],
        );
    }
}

/// `fencelock_observers` of `INFO fencelock`: observers waiting now.
fn observers_waiting(admin: &mut Conn) -> io::Result<u64> {
    info_field(admin, "fencelock", "fencelock_observers")?
        .parse()
        .map_err(|e| io::Error::other(format!("fencelock_observers: {e}")))
}

/// Polls (every ms) until `count` observers wait.
/// Takes the leader key (free) with `TOKEN` and the first leader value: what observers
/// then know of it.
pub fn lead(con: &mut Conn) -> io::Result<Known> {
    let value = leader_value(0);
    let reply = con.call_ok(&[
        b"LOCK.ACQUIRE",
        KEY,
        LEASE,
        b"TOKEN",
        TOKEN,
        b"VALUE",
        value.as_bytes(),
    ])?;
    let (_, fence) = reply
        .grant()
        .ok_or_else(|| io::Error::other(format!("LOCK.ACQUIRE replied {reply:?}")))?;
    Ok(Known {
        fence,
        value: value.as_bytes().to_vec(),
    })
}

pub fn wait_for_observers(admin: &mut Conn, count: u64) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = observers_waiting(admin)?;
        if now == count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "{now} observers waiting after 30 s, {count} expected"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `n` observers of `known`, each a member of a new crowd, all waiting.
pub fn observers(port: u16, admin: &mut Conn, n: u64, known: &Known) -> io::Result<Crowd> {
    let mut crowd = Crowd::new()?;
    let mut first = Vec::new();
    known.observe(&mut first);
    let mut joined = 0;
    while joined < n {
        let end = (joined + BATCH).min(n);
        for _ in joined..end {
            crowd.join(port, &first)?;
        }
        wait_for_observers(admin, end)?;
        joined = end;
    }
    Ok(crowd)
}

/// `n` subscribers of `CHANNEL`; with `readers`, each subscriber (member `2i`) is
/// followed by its reader (member `2i + 1`, which sent a `PING`).
pub fn subscribers(port: u16, n: u64, readers: bool) -> io::Result<Crowd> {
    let mut crowd = Crowd::new()?;
    let (mut subscribe, mut ping) = (Vec::new(), Vec::new());
    encode(&mut subscribe, &[b"SUBSCRIBE", CHANNEL]);
    encode(&mut ping, &[b"PING"]);
    let mut joined = 0;
    while joined < n {
        let end = (joined + BATCH).min(n);
        let mut expected = 0;
        for _ in joined..end {
            crowd.join(port, &subscribe)?;
            expected += 1;
            if readers {
                crowd.join(port, &ping)?;
                expected += 1;
            }
        }
        let mut answered = 0;
        crowd.serve(|_, _, reply| {
            let fine = match &reply {
                Reply::Status(pong) => pong == "PONG",
                Reply::Array(Some(items)) => {
                    matches!(items.first(), Some(Reply::Bulk(Some(kind))) if kind == b"subscribe")
                }
                _ => false,
            };
            if !fine {
                return Err(io::Error::other(format!(
                    "SUBSCRIBE or PING replied {reply:?}"
                )));
            }
            answered += 1;
            Ok(answered < expected)
        })?;
        joined = end;
    }
    Ok(crowd)
}

/// The payload of a pub/sub `message`, if `reply` is one.
pub fn message(reply: &Reply) -> Option<&[u8]> {
    match reply {
        Reply::Array(Some(items)) => match items.as_slice() {
            [Reply::Bulk(Some(kind)), Reply::Bulk(Some(_)), Reply::Bulk(Some(payload))]
                if kind == b"message" =>
            {
                Some(payload)
            }
            _ => None,
        },
        _ => None,
    }
}

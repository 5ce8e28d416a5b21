//! Where the clients send their commands, and a gate the fault driver can close: the
//! current server's port and generation (failover moves both), plus a gate that holds
//! new commands back while the driver inspects a restarted server before load resumes.
//! A cluster target is any node of a cluster: clients then follow `MOVED`/`ASK` to the
//! node that owns a key and stay connected there (`LockClient`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use redis::Connection;

/// A client's connection, with the port and generation it was made for.
pub type Link = Option<(Connection, u16, usize)>;

pub struct Target {
    /// The port in the low 16 bits, the generation above: one atomic, so that a client
    /// never pairs a new port with the old generation (or the reverse).
    current: AtomicU64,
    closed: Mutex<bool>,
    reopened: Condvar,
    stop: AtomicBool,
    /// A cluster: a client's link to another node than `current` is where a redirect
    /// sent it, not a stale link to a failed server.
    cluster: bool,
}

impl Target {
    pub fn new(port: u16) -> Self {
        Target {
            current: AtomicU64::new(u64::from(port)),
            closed: Mutex::new(false),
            reopened: Condvar::new(),
            stop: AtomicBool::new(false),
            cluster: false,
        }
    }

    /// A cluster reached first through the node at `port`.
    pub fn cluster(port: u16) -> Self {
        Target {
            cluster: true,
            ..Target::new(port)
        }
    }

    /// Whether clients follow cluster redirects.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Connects `link` to the current server unless it is connected there already (a
    /// failover moved it: the old connection goes); its generation, or `None` while the
    /// server is down (being restarted or failed over: after a short back-off).
    pub fn connect(&self, link: &mut Link, read_timeout: Duration) -> Option<usize> {
        let (port, node) = self.current();
        if link
            .as_ref()
            .is_some_and(|(_, p, n)| (*p != port && !self.cluster) || *n != node)
        {
            *link = None;
        }
        if link.is_none() {
            *link = Some((open(port, read_timeout)?, port, node));
        }
        Some(node)
    }

    /// Points `link` at the node on `port` (where a redirect sent it), same generation.
    pub fn redirect(&self, link: &mut Link, port: u16, read_timeout: Duration) -> bool {
        let node = self.current().1;
        *link = open(port, read_timeout).map(|con| (con, port, node));
        link.is_some()
    }

    /// (port, generation) to send the next command to.
    pub fn current(&self) -> (u16, usize) {
        let current = self.current.load(Ordering::SeqCst);
        let port = (current & 0xffff) as u16;
        (port, usize::try_from(current >> 16).unwrap_or(usize::MAX))
    }

    /// Clients move to a new server: a new generation. (One thread moves a target.)
    pub fn move_to(&self, port: u16) {
        let generation = (self.current.load(Ordering::SeqCst) >> 16) + 1;
        self.current
            .store(u64::from(port) | (generation << 16), Ordering::SeqCst);
    }

    /// Holds back every command not yet sent.
    pub fn close(&self) {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    pub fn open(&self) {
        *self.closed.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.reopened.notify_all();
    }

    /// Blocks while the gate is closed; returns false once the run is stopping.
    pub fn pass(&self) -> bool {
        let mut closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
        while *closed && !self.stopping() {
            closed = self
                .reopened
                .wait_timeout(closed, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        !self.stopping()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.open();
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// A connection to the server on `port`; `None` (after a short back-off) if it is down.
fn open(port: u16, read_timeout: Duration) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let Ok(con) = client.get_connection_with_timeout(Duration::from_millis(300)) else {
        std::thread::sleep(Duration::from_millis(20));
        return None;
    };
    con.set_read_timeout(Some(read_timeout)).ok()?;
    con.set_write_timeout(Some(read_timeout)).ok()?;
    Some(con)
}

//! Where the clients send their commands, and a gate the fault driver can close: the
//! current server's port and generation (failover moves both), plus a gate that holds
//! new commands back while the driver inspects a restarted server before load resumes.

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
}

impl Target {
    pub fn new(port: u16) -> Self {
        Target {
            current: AtomicU64::new(u64::from(port)),
            closed: Mutex::new(false),
            reopened: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// Connects `link` to the current server unless it is connected there already (a
    /// failover moved it: the old connection goes); its generation, or `None` while the
    /// server is down (being restarted or failed over: after a short back-off).
    pub fn connect(&self, link: &mut Link, read_timeout: Duration) -> Option<usize> {
        let (port, node) = self.current();
        if link
            .as_ref()
            .is_some_and(|(_, p, n)| *p != port || *n != node)
        {
            *link = None;
        }
        if link.is_none() {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
            let Ok(con) = client.get_connection_with_timeout(Duration::from_millis(300)) else {
                std::thread::sleep(Duration::from_millis(20));
                return None;
            };
            con.set_read_timeout(Some(read_timeout)).ok()?;
            con.set_write_timeout(Some(read_timeout)).ok()?;
            *link = Some((con, port, node));
        }
        Some(node)
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

//! A TCP proxy on loopback that a fault test can cut, delay and heal: one link between
//! some clients and one server. A cut is a partition, not a disconnect: bytes already in
//! flight and new connections are held, unanswered, until the link heals (as a network
//! that drops packets while TCP retransmits), so each side finds out only by its own
//! timeouts, as it would on a real network. A delay holds every chunk for that long
//! before passing it on.
//!
//! Hand-written on std threads (two per connection): the tests need only a few dozen
//! connections, and what they need from it — holding bytes mid-stream on command — is
//! not what the proxy crates offer.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// How a link passes bytes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    Up,
    /// Every chunk is held this long first.
    Delayed(Duration),
    /// Nothing passes; connections stay open.
    Cut,
}

struct Shared {
    state: Mutex<LinkState>,
    changed: Condvar,
    stopping: AtomicBool,
    /// Both ends of every connection, shut down when the proxy goes.
    streams: Mutex<Vec<TcpStream>>,
}

impl Shared {
    /// Waits while the link is cut; then how long to hold the next chunk (`None`: the
    /// proxy is going away).
    fn pass(&self) -> Option<Duration> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            match *state {
                LinkState::Up => return Some(Duration::ZERO),
                LinkState::Delayed(delay) => return Some(delay),
                LinkState::Cut => {
                    state = self
                        .changed
                        .wait_timeout(state, Duration::from_millis(50))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    fn keep(&self, stream: &TcpStream) {
        if let Ok(copy) = stream.try_clone() {
            self.streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(copy);
        }
    }
}

/// Listens on `port` and forwards every connection to the server on `upstream`.
pub struct Proxy {
    pub port: u16,
    pub upstream: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// A link to the server listening on `upstream` (127.0.0.1), up.
    pub fn to(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(LinkState::Up),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        thread::spawn(move || accept(listener, upstream, accepting));
        Proxy {
            port,
            upstream,
            shared,
        }
    }

    pub fn state(&self) -> LinkState {
        *self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, state: LinkState) {
        *self
            .shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = state;
        self.shared.changed.notify_all();
    }

    /// Nothing passes until `heal`.
    pub fn cut(&self) {
        self.set(LinkState::Cut);
    }

    /// Every chunk is held `delay` before it passes.
    pub fn delay(&self, delay: Duration) {
        self.set(LinkState::Delayed(delay));
    }

    /// Bytes pass at once again, those held first.
    pub fn heal(&self) {
        self.set(LinkState::Up);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wakes the accepting thread, which then sees `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for stream in self
            .shared
            .streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: TcpListener, upstream: u16, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let shared = shared.clone();
        thread::spawn(move || connect(client, upstream, &shared));
    }
}

/// A new connection reaches the server only once the link lets bytes through.
fn connect(client: TcpStream, upstream: u16, shared: &Arc<Shared>) {
    shared.keep(&client);
    if shared.pass().is_none() {
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    shared.keep(&server);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let back = shared.clone();
    thread::spawn(move || pump(server_copy, client_copy, &back));
    pump(client, server, shared);
}

/// Copies `from` into `to` chunk by chunk, each only when the link passes it; at the
/// end of either stream both connections close (as the server or client closed it).
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buffer = [0u8; 16 * 1024];
    // A bounded read lets the thread notice the proxy going away.
    let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            Err(_) => break,
        };
        let Some(delay) = shared.pass() else { break };
        if !delay.is_zero() {
            thread::sleep(delay);
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on a free port.
    fn echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut stream = stream;
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buffer) {
                        if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    fn round_trip(stream: &mut TcpStream) -> std::io::Result<Duration> {
        let started = Instant::now();
        stream.write_all(b"ping")?;
        let mut reply = [0u8; 4];
        stream.read_exact(&mut reply)?;
        assert_eq!(&reply, b"ping");
        Ok(started.elapsed())
    }

    #[test]
    fn a_cut_holds_bytes_and_new_connections_until_it_heals() {
        let proxy = Proxy::to(echo());
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        round_trip(&mut stream).unwrap();
        proxy.cut();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let error = round_trip(&mut stream).unwrap_err();
        assert!(
            matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{error}"
        );
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            round_trip(&mut fresh).is_err(),
            "a new connection is held too"
        );
        proxy.heal();
        // The held "ping" arrives first, then this one's reply.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut held = [0u8; 4];
        stream.read_exact(&mut held).unwrap();
        assert_eq!(&held, b"ping");
        round_trip(&mut stream).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        fresh.read_exact(&mut held).unwrap();
        round_trip(&mut fresh).unwrap();
    }

    #[test]
    fn a_delay_holds_each_chunk() {
        let proxy = Proxy::to(echo());
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        proxy.delay(Duration::from_millis(100));
        assert_eq!(
            proxy.state(),
            LinkState::Delayed(Duration::from_millis(100))
        );
        // Once on the way there, once on the way back.
        assert!(round_trip(&mut stream).unwrap() >= Duration::from_millis(200));
        proxy.heal();
        // The best of five: a busy machine can stall one round trip, hardly five.
        let healed = (0..5)
            .map(|_| round_trip(&mut stream).unwrap())
            .min()
            .unwrap();
        assert!(healed < Duration::from_millis(100), "{healed:?}");
    }
}

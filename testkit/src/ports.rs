//! Free loopback ports for servers the tests start.

use std::net::TcpListener;

/// A port nothing listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("no free port")
}

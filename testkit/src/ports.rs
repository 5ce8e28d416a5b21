//! Free loopback ports for the servers the tests start.
//!
//! Picked below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`,
//! 32768–60999 on Linux by default), never inside it: there an outgoing connection's
//! local port (any client on the machine) can take a port between the check here and
//! the server's bind. The cluster bus port, port + `BUS_OFFSET` (Redis's default), is
//! checked free and kept below the range too, so a cluster node needs no port of its
//! own for it. Each process walks the range from its own starting point (derived from
//! its pid) and never hands out a port twice, so parallel tests in one process and
//! test processes beside each other rarely meet; when one still does, the server
//! launcher picks again (`server::Server`).

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// Redis's cluster bus listens on the client port plus this, unless told otherwise.
pub const BUS_OFFSET: u16 = 10_000;
/// The lowest port handed out: clear of the well-known and commonly registered ones.
const LOWEST: u16 = 10_000;
/// Linux's default start of the ephemeral range, used when it cannot be read.
const DEFAULT_EPHEMERAL_LOW: u16 = 32_768;
/// Fewer candidates than this below the ephemeral range (a machine that widened it):
/// the OS picks the port instead, inside the range, as before.
const ENOUGH: u16 = 1_000;

/// A port nothing listens on right now, with its cluster bus port (port +
/// `BUS_OFFSET`) free as well, both below the ephemeral range.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    let top = low.saturating_sub(BUS_OFFSET);
    if top < LOWEST + ENOUGH {
        return os_chosen_port();
    }
    let span = u32::from(top - LOWEST);
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // The first caller seeds the walk from the pid (a prime stride apart per process).
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = LOWEST + offset as u16;
        if is_free(port) && is_free(port + BUS_OFFSET) {
            return port;
        }
    }
    panic!("no free port between {LOWEST} and {top} with its bus port free");
}

/// The first port of the ephemeral range (`ip_local_port_range`), else Linux's default.
pub fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(DEFAULT_EPHEMERAL_LOW)
}

fn is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The OS's pick (inside the ephemeral range), with its bus port free.
fn os_chosen_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("no free port");
        if port.checked_add(BUS_OFFSET).is_some_and(is_free) {
            return port;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_with_their_bus_port_and_never_repeat() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for port in &ports {
            if low >= LOWEST + ENOUGH + BUS_OFFSET {
                assert!(*port >= LOWEST && port + BUS_OFFSET < low, "{port}");
            }
            assert!(is_free(*port) && is_free(port + BUS_OFFSET), "{port}");
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ports.len(),
            "a port handed out twice: {ports:?}"
        );
    }
}

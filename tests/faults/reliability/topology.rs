//! The partition scenario's machines, on loopback: a primary with two replicas, three
//! Sentinels (quorum 2), a separate server for the protected resource and its fence
//! marks (never partitioned), and the links a nemesis can cut. Every link to the
//! primary goes through its own proxy, so that one can be cut while another stays up:
//!
//! - `watch`: the Sentinels' link to the primary (the address they know it by);
//! - `replication`: the replicas' link to the primary;
//! - each side's clients' link to the primary; side 0's clients also reach the
//!   Sentinels through proxies (they are on the primary's side of the partition).
//!
//! The replicas, the Sentinels among themselves and side 1's clients reach everything
//! else directly. A client asks a Sentinel for the primary and connects to what it
//! names, through its own side's link (`route`).

use std::thread;
use std::time::{Duration, Instant};

use testkit::*;

/// The side that stays with the primary during the partition, and the other.
pub const WITH_PRIMARY: usize = 0;
pub const MAJORITY: usize = 1;

/// Sentinel periods short enough for a run of seconds: down after 1 s, the demoted
/// primary reconfigured some 2 s after it is seen again.
const TIMING: SentinelTiming = SentinelTiming {
    down_after_ms: 1_000,
    // Also how long Sentinels wait before "fixing" a replica that replicates from
    // another address than theirs (the replicas use their own proxy): past any run.
    failover_timeout_ms: 120_000,
    info_period_ms: 500,
    publish_period_ms: 500,
};

pub struct Side {
    to_primary: Proxy,
    /// One per Sentinel; `None`: direct.
    to_sentinels: Vec<Option<Proxy>>,
}

pub struct Topology {
    /// The first primary, then its two replicas.
    pub servers: Vec<Server>,
    /// The protected resource and its marks.
    pub resource: Server,
    pub sentinels: Vec<Sentinel>,
    watch: Proxy,
    replication: Proxy,
    sides: Vec<Side>,
}

impl Topology {
    /// Every server with `args` (`min-replicas-to-write`, …), replicas in sync, and
    /// every Sentinel knowing both replicas and both other Sentinels.
    pub fn start(args: &[&str]) -> Self {
        // A lost link is noticed within 2 s on both ends of replication.
        let mut all = vec!["repl-timeout", "2"];
        all.extend_from_slice(args);
        let servers: Vec<Server> = (0..3).map(|_| Server::with_args(&all)).collect();
        let primary = servers[0].port;
        let watch = Proxy::to(primary);
        let replication = Proxy::to(primary);
        for replica in &servers[1..] {
            follow(replica, replication.port);
        }
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| Sentinel::start(watch.port, 2, TIMING))
            .collect();
        let sides = vec![
            Side {
                to_primary: Proxy::to(primary),
                to_sentinels: sentinels.iter().map(|s| Some(Proxy::to(s.port))).collect(),
            },
            Side {
                to_primary: Proxy::to(primary),
                to_sentinels: sentinels.iter().map(|_| None).collect(),
            },
        ];
        let topology = Topology {
            servers,
            resource: Server::start(),
            sentinels,
            watch,
            replication,
            sides,
        };
        topology.wait_until_sentinels_know_everyone();
        topology
    }

    fn wait_until_sentinels_know_everyone(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.sentinels.iter().all(|s| s.known() == (2, 2)) {
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not discover each other and the replicas: {:?}\n{}",
                self.sentinels
                    .iter()
                    .map(Sentinel::known)
                    .collect::<Vec<_>>(),
                self.sentinels[0].log()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The address the Sentinels name the first primary by.
    pub fn first_primary_address(&self) -> u16 {
        self.watch.port
    }

    /// Where a client of `side` connects to reach the server a Sentinel named `port`.
    pub fn route(&self, side: usize, port: u16) -> u16 {
        if port == self.watch.port {
            self.sides[side].to_primary.port
        } else {
            port
        }
    }

    /// The ports a client of `side` asks the Sentinels on.
    pub fn sentinel_ports(&self, side: usize) -> Vec<u16> {
        self.sides[side]
            .to_sentinels
            .iter()
            .zip(&self.sentinels)
            .map(|(proxy, sentinel)| proxy.as_ref().map_or(sentinel.port, |p| p.port))
            .collect()
    }

    /// The nemesis: the primary loses the replicas, the Sentinels and the majority
    /// side's clients; its own side's clients keep talking to it and lose the Sentinels.
    pub fn isolate_primary(&self) {
        for proxy in self.partition_links() {
            proxy.cut();
        }
    }

    pub fn heal(&self) {
        for proxy in self.partition_links() {
            proxy.heal();
        }
    }

    fn partition_links(&self) -> impl Iterator<Item = &Proxy> {
        [
            &self.watch,
            &self.replication,
            &self.sides[MAJORITY].to_primary,
        ]
        .into_iter()
        .chain(self.sides[WITH_PRIMARY].to_sentinels.iter().flatten())
    }

    /// Waits until two Sentinels name another primary; its index in `servers`.
    pub fn wait_for_promotion(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<u16> = self
                .sentinels
                .iter()
                .filter_map(Sentinel::primary_port)
                .filter(|port| *port != self.watch.port)
                .collect();
            for candidate in 1..self.servers.len() {
                let port = self.servers[candidate].port;
                if named.iter().filter(|p| **p == port).count() >= 2 {
                    return candidate;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no replica was promoted; Sentinel log:\n{}",
                self.sentinels[0].log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether every Sentinel still names the first primary (no failover yet).
    pub fn sentinels_name_the_first_primary(&self) -> bool {
        self.sentinels
            .iter()
            .all(|s| s.primary_port() == Some(self.watch.port))
    }

    /// Waits until the first primary replicates from `promoted`: Sentinel demoted it.
    pub fn wait_for_rejoin(&self, promoted: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let new_port = self.servers[promoted].port.to_string();
        loop {
            // A fresh connection each time: the role change may close the last one.
            let replication: Option<String> = self.servers[0]
                .try_connect()
                .ok()
                .and_then(|mut old| cmd("INFO").arg("replication").query(&mut old).ok());
            let info = replication.unwrap_or_default();
            if info.contains(&format!("master_port:{new_port}\r\n"))
                && info.contains("master_link_status:up")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the old primary did not rejoin {new_port} as a replica: {info}; its log:\n{}",
                self.servers[0].log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether both replicas of `promoted` have its whole stream and all three servers
    /// hold the same data (`DEBUG DIGEST`): the old primary's divergent writes are gone.
    /// Asked while no client writes.
    pub fn converged(&self, promoted: usize) -> bool {
        let mut new = self.servers[promoted].connect();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let replicas: i64 = cmd("WAIT").arg(2).arg(1_000).query(&mut new).unwrap_or(0);
            let digests: Vec<String> = self
                .servers
                .iter()
                .map(|server| digest(&mut server.connect()))
                .collect();
            if replicas == 2 && digests.iter().all(|d| *d == digests[0]) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What `server` has received of the primary's grants, once it stops changing: its
/// `fencelock_fence_clock` twice alike 200 ms apart (bytes a link passed just before a
/// cut may still be on their way in), within `within`.
pub fn settled_fence_clock(server: &Server, within: Duration) -> i64 {
    let deadline = Instant::now() + within;
    let mut last = fence_clock(server);
    loop {
        thread::sleep(Duration::from_millis(200));
        let now = fence_clock(server);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// `fencelock_fence_clock` of `server`: the highest fence it issued or received.
fn fence_clock(server: &Server) -> i64 {
    info_field(&mut server.connect(), "fencelock", "fencelock_fence_clock")
        .and_then(|value| value.parse().ok())
        .expect("fencelock_fence_clock")
}

/// `replica` follows the primary behind `port` (a proxy's) and has its stream.
pub fn follow(replica: &Server, port: u16) {
    let mut con = replica.connect();
    let _: () = cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(port)
        .query(&mut con)
        .expect("REPLICAOF");
    eventually(Duration::from_secs(20), "the replica synced", || {
        info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
    });
}

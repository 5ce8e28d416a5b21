//! Redlock across five independent servers, each with the module: one client-chosen
//! `TOKEN` on every server, a majority within the validity time, release on all.
//! Checks quorum with two servers down, failure with three down, that failed and
//! released attempts leave nothing behind, and how a protected resource must compare
//! fences that come from independent servers (per server, never as one number).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use testkit::*;

/// The recipe, as a client library would implement it.
struct Redlock {
    urls: Vec<String>,
}

/// A lock held on a majority: its token, what is left of its lease, and the fence each
/// server granted (server index, fence).
struct Grant {
    token: String,
    validity: Duration,
    fences: Vec<(usize, i64)>,
}

/// A round trip to a live loopback server takes well under this; a dead one is skipped.
const SERVER_TIMEOUT: Duration = Duration::from_millis(200);

impl Redlock {
    fn new(servers: &[Server]) -> Self {
        Redlock {
            urls: servers.iter().map(Server::url).collect(),
        }
    }

    fn quorum(&self) -> usize {
        self.urls.len() / 2 + 1
    }

    fn connect(&self, server: usize) -> Option<Connection> {
        let client = redis::Client::open(self.urls[server].as_str()).ok()?;
        let con = client.get_connection_with_timeout(SERVER_TIMEOUT).ok()?;
        con.set_read_timeout(Some(SERVER_TIMEOUT)).ok()?;
        Some(con)
    }

    /// Acquires `key` on as many servers as answer, with one token. Held only if a
    /// majority granted it and time is left of the lease after the round; otherwise
    /// whatever was granted is released at once.
    fn lock(&self, key: &str, ttl_ms: u64) -> Option<Grant> {
        let token = unique_token();
        let started = Instant::now();
        let mut fences = Vec::new();
        for server in 0..self.urls.len() {
            let Some(mut con) = self.connect(server) else {
                continue;
            };
            let reply: redis::RedisResult<Option<(String, i64)>> = cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(ttl_ms)
                .arg("TOKEN")
                .arg(&token)
                .query(&mut con);
            if let Ok(Some((granted, fence))) = reply {
                assert_eq!(granted, token);
                fences.push((server, fence));
            }
        }
        // Clock drift between servers: 1% of the ttl plus 2 ms, as in the Redlock paper.
        let drift = Duration::from_millis(ttl_ms / 100 + 2);
        let validity = Duration::from_millis(ttl_ms)
            .checked_sub(started.elapsed())
            .and_then(|left| left.checked_sub(drift));
        match validity {
            Some(validity) if fences.len() >= self.quorum() => Some(Grant {
                token,
                validity,
                fences,
            }),
            _ => {
                self.unlock(key, &token);
                None
            }
        }
    }

    /// Releases on every server, including those that did not answer the acquire: a
    /// grant whose reply was lost is still a grant. Returns how many released.
    fn unlock(&self, key: &str, token: &str) -> usize {
        (0..self.urls.len())
            .filter_map(|server| self.connect(server))
            .map(|mut con| {
                cmd("LOCK.RELEASE")
                    .arg(key)
                    .arg(token)
                    .query::<i64>(&mut con)
                    .unwrap_or(0)
            })
            .filter(|released| *released == 1)
            .count()
    }
}

/// Unique per lock attempt. A real client draws 128 random bits from a CSPRNG; here
/// uniqueness within the test run is what matters.
fn unique_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "redlock-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn five_servers() -> Vec<Server> {
    (0..5).map(|_| Server::start()).collect()
}

fn holder_on(server: &Server, key: &str, token: &str) -> Option<i64> {
    cmd("LOCK.FENCE")
        .arg(key)
        .arg(token)
        .query(&mut server.connect())
        .expect("LOCK.FENCE")
}

fn exists_on(server: &Server, key: &str) -> bool {
    int(&mut server.connect(), &["EXISTS", key]) == 1
}

#[test]
fn all_up_one_token_on_every_server_and_release_cleans_everywhere() {
    let servers = five_servers();
    let redlock = Redlock::new(&servers);
    let grant = redlock.lock("lock:report", 10_000).expect("quorum of 5");
    assert_eq!(grant.fences.len(), 5);
    assert!(grant.validity > Duration::from_millis(9_000));
    for (index, fence) in &grant.fences {
        assert_eq!(
            holder_on(&servers[*index], "lock:report", &grant.token),
            Some(*fence)
        );
    }
    // A competitor finds every server busy, gets no quorum and leaves the holder intact.
    assert!(redlock.lock("lock:report", 10_000).is_none());
    for (index, fence) in &grant.fences {
        assert_eq!(
            holder_on(&servers[*index], "lock:report", &grant.token),
            Some(*fence)
        );
    }
    assert_eq!(redlock.unlock("lock:report", &grant.token), 5);
    assert!(servers.iter().all(|s| !exists_on(s, "lock:report")));
    assert!(redlock.lock("lock:report", 10_000).is_some(), "free again");
}

#[test]
fn quorum_holds_with_two_servers_down() {
    let mut servers = five_servers();
    let redlock = Redlock::new(&servers);
    servers[1].kill();
    servers[4].kill();
    let grant = redlock
        .lock("lock:nightly", 10_000)
        .expect("3 of 5 is a majority");
    let mut granted_by: Vec<usize> = grant.fences.iter().map(|(server, _)| *server).collect();
    granted_by.sort_unstable();
    assert_eq!(granted_by, vec![0, 2, 3]);
    assert_eq!(redlock.unlock("lock:nightly", &grant.token), 3);
    for index in [0, 2, 3] {
        assert!(!exists_on(&servers[index], "lock:nightly"));
    }
}

#[test]
fn no_quorum_with_three_servers_down_and_nothing_left_held() {
    let mut servers = five_servers();
    let redlock = Redlock::new(&servers);
    for index in [0, 2, 3] {
        servers[index].kill();
    }
    assert!(redlock.lock("lock:nightly", 10_000).is_none(), "2 of 5");
    for index in [1, 4] {
        assert!(
            !exists_on(&servers[index], "lock:nightly"),
            "the minority grant on server {index} was rolled back"
        );
    }
}

#[test]
fn a_minority_grant_is_rolled_back_and_the_holder_keeps_its_majority() {
    let servers = five_servers();
    let (taken, free) = servers.split_at(3);
    for server in taken {
        acquire(
            &mut server.connect(),
            "lock:k",
            10_000,
            &["TOKEN", "other-holder"],
        )
        .expect("granted");
    }
    let redlock = Redlock::new(&servers);
    assert!(
        redlock.lock("lock:k", 10_000).is_none(),
        "only servers 3 and 4 were free"
    );
    for server in taken {
        assert!(holder_on(server, "lock:k", "other-holder").is_some());
    }
    for server in free {
        assert!(
            !exists_on(server, "lock:k"),
            "server {} rolled back",
            server.port
        );
    }
}

/// What a resource protected by a Redlock-held lock must do with fences: keep the highest
/// fence seen *per server*, and refuse a write if any (server, fence) it carries is below
/// that server's highest. Two majorities share at least one server, and on that server a
/// later grant always has the higher fence, so a stale holder is refused.
#[derive(Default)]
struct FencedResource {
    highest: HashMap<usize, i64>,
    value: Option<&'static str>,
}

impl FencedResource {
    fn write(&mut self, fences: &[(usize, i64)], value: &'static str) -> bool {
        let stale = fences
            .iter()
            .any(|(server, fence)| self.highest.get(server).is_some_and(|seen| fence < seen));
        if stale {
            return false;
        }
        for (server, fence) in fences {
            self.highest.insert(*server, *fence);
        }
        self.value = Some(value);
        true
    }
}

#[test]
fn fences_from_independent_servers_are_compared_per_server() {
    let mut servers = five_servers();
    let redlock = Redlock::new(&servers);
    // A holds {0, 1, 2} (3 and 4 are down), then pauses past its lease.
    servers[3].kill();
    servers[4].kill();
    let a = redlock.lock("lock:stock-9", 300).expect("A's majority");
    servers[3].restart();
    servers[4].restart();
    eventually(Duration::from_secs(5), "A's lease runs out", || {
        !exists_on(&servers[2], "lock:stock-9")
    });
    // B holds {2, 3, 4} (0 and 1 are down): the two majorities share only server 2.
    servers[0].kill();
    servers[1].kill();
    let b = redlock.lock("lock:stock-9", 10_000).expect("B's majority");
    let fence_on = |grant: &Grant, server: usize| {
        grant
            .fences
            .iter()
            .find(|(s, _)| *s == server)
            .map(|(_, f)| *f)
    };
    let (a2, b2) = (fence_on(&a, 2).unwrap(), fence_on(&b, 2).unwrap());
    assert!(b2 > a2, "on the shared server the later grant is higher");

    let mut resource = FencedResource::default();
    assert!(resource.write(&b.fences, "B"));
    assert!(
        !resource.write(&a.fences, "A, waking up"),
        "the stale holder is refused"
    );
    assert_eq!(resource.value, Some("B"));
    assert_eq!(redlock.unlock("lock:stock-9", &b.token), 3);
}

//! ACL categories of the lock commands, which depend on the server: Redis 7.2 lets a
//! module put its commands in categories (`@write`, `@read`, `@fast`), Redis 7.4 and
//! Valkey let it add its own (`@fencelock`); on Redis 7.0 module commands belong to no
//! category. The expectation is derived from the server's version, then checked in both
//! directions, so every server runs every test: categories must be there where the
//! server supports them and absent where it does not, and the per-command ACL rules
//! work everywhere.

use testkit::*;

const WRITE_COMMANDS: [&str; 4] = ["lock.refresh", "lock.release", "lock.proclaim", "lock.done"];
/// The replicated forms of a grant, a shared holder's leaving and an admission:
/// `@write`, but outside `@fencelock`, so that `+@fencelock` gives an application user
/// only what applications call.
const REPLICATION_FORMS: [&str; 4] = ["lock.apply", "lock.drop", "lock.mark", "lock.record"];
/// Writes that run another command: not `@fast`, whatever that command costs.
const RUNNING_COMMANDS: [&str; 2] = ["lock.guard", "lock.fenced"];
const READ_COMMANDS: [&str; 2] = ["lock.fence", "lock.info"];
/// The session commands: O(holdings), so not `@fast`; and `LOCK.TOP`, O(keys held or
/// waited for), keyless like them.
const SESSION_WRITES: [&str; 2] = ["lock.keepalive", "lock.close"];
const SESSION_READS: [&str; 2] = ["lock.held", "lock.top"];
/// May wait for the lock (`BLOCK`): `@blocking`, so not `@fast` (as `BLPOP`).
const BLOCKING_WRITES: [&str; 3] = ["lock.acquire", "lock.acquireall", "lock.once"];
/// Waits for a change (`@blocking`), so not `@fast` (as `XREAD`).
const BLOCKING_READS: [&str; 1] = ["lock.observe"];

/// What the running server can do with module command categories.
pub(crate) struct Support {
    /// `RedisModule_SetCommandACLCategories`: Redis ≥ 7.2, every Valkey.
    pub(crate) command_categories: bool,
    /// `RedisModule_AddACLCategory`: Redis ≥ 7.4, Valkey ≥ 8.0.
    pub(crate) own_category: bool,
}

fn version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

pub(crate) fn support(con: &mut Connection) -> Support {
    let redis = version(&info_field(con, "server", "redis_version").expect("redis_version"));
    let valkey = info_field(con, "server", "valkey_version").map(|v| version(&v));
    match valkey {
        Some(valkey) => Support {
            command_categories: true,
            own_category: valkey >= (8, 0),
        },
        None => Support {
            command_categories: redis >= (7, 2),
            own_category: redis >= (7, 4),
        },
    }
}

/// The ACL categories field of `COMMAND INFO name` (index 6 of the reply).
fn categories(con: &mut Connection, name: &str) -> Vec<String> {
    let info: Vec<Vec<Value>> = cmd("COMMAND").arg("INFO").arg(name).query(con).unwrap();
    let entry = info.into_iter().next().expect("command known");
    entry
        .get(6)
        .map(|field| redis::from_redis_value(field.clone()).expect("category list"))
        .unwrap_or_default()
}

/// `ACL DRYRUN user command args…` → `None` if allowed, else the reason.
fn denied(con: &mut Connection, user: &str, argv: &[&str]) -> Option<String> {
    let reply: String = cmd("ACL")
        .arg("DRYRUN")
        .arg(user)
        .arg(argv)
        .query(con)
        .expect("ACL DRYRUN");
    (reply != "OK").then_some(reply)
}

pub(crate) fn set_user(con: &mut Connection, user: &str, rules: &[&str]) -> redis::RedisResult<()> {
    cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg("nopass")
        .arg(rules)
        .query(con)
}

#[test]
fn each_command_carries_the_categories_its_server_supports() {
    let server = Server::start();
    let mut con = server.connect();
    let support = support(&mut con);
    for (commands, kind, fast, own) in [
        (&WRITE_COMMANDS[..], "@write", true, true),
        (&REPLICATION_FORMS[..], "@write", true, false),
        (&READ_COMMANDS[..], "@read", true, true),
        (&RUNNING_COMMANDS[..], "@write", false, true),
        (&SESSION_WRITES[..], "@write", false, true),
        (&SESSION_READS[..], "@read", false, true),
        (&BLOCKING_WRITES[..], "@write", false, true),
        (&BLOCKING_READS[..], "@read", false, true),
    ] {
        for name in commands {
            let found = categories(&mut con, name);
            if !support.command_categories {
                assert!(
                    found.is_empty(),
                    "{name}: {found:?} on a server without them"
                );
                continue;
            }
            assert!(found.iter().any(|c| c == kind), "{name}: {found:?}");
            assert_eq!(
                found.iter().any(|c| c == "@blocking"),
                BLOCKING_READS.contains(name) || BLOCKING_WRITES.contains(name),
                "{name}: {found:?}"
            );
            assert_eq!(
                found.iter().any(|c| c == "@fast"),
                fast,
                "{name}: {found:?}"
            );
            assert_eq!(
                found.iter().any(|c| c == "@fencelock"),
                support.own_category && own,
                "{name}: {found:?}"
            );
        }
    }
}

#[test]
fn plus_at_fencelock_grants_exactly_the_lock_commands_where_supported() {
    let server = Server::start();
    let mut con = server.connect();
    let support = support(&mut con);
    let created = set_user(&mut con, "locker", &["-@all", "+@fencelock", "~lock:*"]);
    if !support.own_category {
        let error = created.expect_err("no such category on this server");
        assert!(error.to_string().contains("fencelock"), "{error}");
        return;
    }
    created.expect("ACL SETUSER +@fencelock");
    let mut listed: Vec<String> = cmd("ACL")
        .arg("CAT")
        .arg("fencelock")
        .query(&mut con)
        .unwrap();
    listed.sort();
    let mut all: Vec<&str> = WRITE_COMMANDS
        .iter()
        .chain(&READ_COMMANDS)
        .chain(&RUNNING_COMMANDS)
        .chain(&SESSION_WRITES)
        .chain(&SESSION_READS)
        .chain(&BLOCKING_WRITES)
        .chain(&BLOCKING_READS)
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(listed, all);
    assert_eq!(
        denied(&mut con, "locker", &["LOCK.ACQUIRE", "lock:a", "1000"]),
        None
    );
    assert_eq!(denied(&mut con, "locker", &["LOCK.FENCE", "lock:a"]), None);
    assert!(
        denied(&mut con, "locker", &["LOCK.MARK", "lock:m", "5"]).is_some(),
        "the replication forms are not the application's"
    );
    assert!(denied(&mut con, "locker", &["GET", "lock:a"]).is_some());
    assert!(
        denied(&mut con, "locker", &["LOCK.ACQUIRE", "orders:a", "1000"]).is_some(),
        "key patterns still apply"
    );
    let all_keys = ["LOCK.ACQUIREALL", "2", "lock:a", "lock:b", "1000"];
    assert_eq!(denied(&mut con, "locker", &all_keys), None);
    let one_outside = ["LOCK.ACQUIREALL", "2", "lock:a", "orders:b", "1000"];
    assert!(
        denied(&mut con, "locker", &one_outside).is_some(),
        "every key of several is checked"
    );
}

/// `LOCK.ACQUIRE`, `LOCK.ACQUIREALL` and `LOCK.OBSERVE` may wait: their command flags
/// say `blocking` on every server (as `BLPOP`'s and `XREAD`'s do), and `-@blocking`
/// stops them where the server gives module commands categories (not on Redis 7.0,
/// where module commands belong to none).
#[test]
fn the_commands_that_may_wait_are_flagged_blocking() {
    let server = Server::start();
    let mut con = server.connect();
    let support = support(&mut con);
    set_user(&mut con, "nowait", &["+@all", "-@blocking", "~*"]).unwrap();
    let may_wait = [
        vec!["LOCK.ACQUIRE", "k", "1000", "BLOCK", "100"],
        vec!["LOCK.ACQUIREALL", "1", "k", "1000"],
        vec!["LOCK.OBSERVE", "k"],
    ];
    for argv in may_wait {
        let name = argv[0].to_lowercase();
        let info: Vec<Vec<Value>> = cmd("COMMAND")
            .arg("INFO")
            .arg(&name)
            .query(&mut con)
            .unwrap();
        let flags: Vec<String> = info
            .first()
            .and_then(|entry| entry.get(2))
            .map(|field| redis::from_redis_value(field.clone()).expect("flags"))
            .unwrap_or_default();
        assert!(flags.iter().any(|f| f == "blocking"), "{name}: {flags:?}");
        assert!(!flags.iter().any(|f| f == "fast"), "{name}: {flags:?}");
        assert_eq!(
            denied(&mut con, "nowait", &argv).is_some(),
            support.command_categories,
            "{name} under -@blocking"
        );
    }
    assert_eq!(
        denied(&mut con, "nowait", &["LOCK.RELEASE", "k", "t"]),
        None,
        "the commands that never wait stay allowed"
    );
}

#[test]
fn plus_at_write_covers_the_lock_commands_only_where_categories_exist() {
    let server = Server::start();
    let mut con = server.connect();
    let support = support(&mut con);
    set_user(&mut con, "writer", &["-@all", "+@write", "~*"]).unwrap();
    set_user(&mut con, "reader", &["-@all", "+@read", "~*"]).unwrap();
    let writer_acquire = denied(&mut con, "writer", &["LOCK.ACQUIRE", "k", "1000"]);
    let reader_fence = denied(&mut con, "reader", &["LOCK.FENCE", "k"]);
    let reader_acquire = denied(&mut con, "reader", &["LOCK.ACQUIRE", "k", "1000"]);
    assert_eq!(writer_acquire.is_none(), support.command_categories);
    assert_eq!(reader_fence.is_none(), support.command_categories);
    assert!(reader_acquire.is_some(), "a read-only user never acquires");
}

#[test]
fn naming_the_commands_works_on_every_server() {
    let server = Server::start();
    let mut con = server.connect();
    set_user(
        &mut con,
        "app",
        &[
            "-@all",
            "+lock.acquire",
            "+lock.refresh",
            "+lock.release",
            "+lock.fence",
            "~lock:*",
        ],
    )
    .unwrap();
    assert_eq!(
        denied(&mut con, "app", &["LOCK.ACQUIRE", "lock:a", "1000"]),
        None
    );
    assert_eq!(
        denied(&mut con, "app", &["LOCK.RELEASE", "lock:a", "t"]),
        None
    );
    assert!(denied(&mut con, "app", &["LOCK.APPLY", "lock:a", "t", "5"]).is_some());
    assert!(denied(&mut con, "app", &["LOCK.DROP", "lock:a", "t"]).is_some());
    assert!(denied(&mut con, "app", &["LOCK.ACQUIRE", "other", "1000"]).is_some());

    // And for real, over a connection authenticated as that user.
    let mut app = server.connect();
    let _: () = cmd("AUTH").arg("app").arg("any").query(&mut app).unwrap();
    let (token, _) = acquire(&mut app, "lock:a", 10_000, &[]).expect("granted");
    let refused: redis::RedisResult<Value> = cmd("GET").arg("lock:a").query(&mut app);
    assert_eq!(refused.expect_err("GET not granted").code(), Some("NOPERM"));
    assert_eq!(int(&mut app, &["LOCK.RELEASE", "lock:a", &token]), 1);
}

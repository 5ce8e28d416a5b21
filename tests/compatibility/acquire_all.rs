//! `LOCK.ACQUIREALL` (issue 23) wherever its grants go. Every key of a grant, made at
//! once or handed to a waiter for several keys (by a release or by a lease running
//! out), comes back from an RDB restart and an AOF replay (with and without the RDB
//! preamble) and reaches a replica with the same token and fence per key. Each grant is
//! propagated as one transaction holding one `LOCK.APPLY` per key, read back from the
//! AOF and from the replica's `MONITOR`: no replay and no replica ever holds part of a
//! grant. A wait beside free keys leaves the server running (Redis 8.2's
//! `RedisModule_GetExpire` dereferences an empty key). In a cluster, keys of one hash
//! tag are taken together, keys of two slots are refused `CROSSSLOT` by Redis itself,
//! and a wait for several keys of a slot being migrated is answered `TRYAGAIN` as a
//! wait for one is. ACL key patterns apply to every key (`NOPERM` from Redis's own
//! key-spec check).

use std::time::Duration;

use testkit::resp::{err, RawClient, Reply};
use testkit::*;

use crate::acl_categories::{set_user, support};
use crate::cluster::{key_per_node, Cluster, SlotMove};

/// A grant: its token and each key's fence, in the order the keys were given.
type Grant = (String, Vec<i64>);

/// One command as its arguments.
type Argv = Vec<String>;

fn acquire_all(con: &mut Connection, keys: &[&str], ttl: i64, extra: &[&str]) -> Option<Grant> {
    cmd("LOCK.ACQUIREALL")
        .arg(keys.len())
        .arg(keys)
        .arg(ttl)
        .arg(extra)
        .query(con)
        .expect("LOCK.ACQUIREALL")
}

fn hold_all(con: &mut Connection, keys: &[&str], extra: &[&str]) -> Grant {
    acquire_all(con, keys, 60_000, extra).unwrap_or_else(|| panic!("{keys:?}: not granted"))
}

/// How the key a waiter for several keys waits for becomes free.
#[derive(Clone, Copy, Debug)]
enum Freed {
    /// Its holder releases it (the grant is made inside `LOCK.RELEASE`).
    Released,
    /// Its lease runs out (the grant is made by the module's timer).
    RanOut,
}

/// A grant made by a handoff: `keys[1]` is held by another token while a waiter asks
/// for all of `keys` with `BLOCK` (the others free); when `keys[1]` is freed the
/// waiter is handed every key at once.
fn handed_over(
    server: &Server,
    con: &mut Connection,
    keys: &[&str],
    extra: &[&str],
    freed: Freed,
) -> Grant {
    let blocker = format!("blocker-{}", keys[1]);
    let lease = match freed {
        Freed::Released => 60_000,
        Freed::RanOut => 400,
    };
    acquire(con, keys[1], lease, &["TOKEN", &blocker]).expect("the middle key is free");
    let mut waiter = RawClient::connect(server.port);
    let numkeys = keys.len().to_string();
    let mut argv = vec!["LOCK.ACQUIREALL", numkeys.as_str()];
    argv.extend(keys);
    argv.extend(["60000", "BLOCK", "10000"]);
    argv.extend(extra);
    waiter.send_pipeline(&[&argv]);
    wait_for_waiters(con, keys[1], 1);
    if let Freed::Released = freed {
        assert_eq!(int(con, &["LOCK.RELEASE", keys[1], &blocker]), 1);
    }
    let reply = waiter
        .try_read_reply(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("{keys:?} ({freed:?}): the waiter was not answered"));
    grant_all_of(&reply).unwrap_or_else(|| panic!("{keys:?} ({freed:?}): not granted: {reply:?}"))
}

/// Every key is held by the grant's token with the grant's fence.
fn assert_holds(con: &mut Connection, keys: &[&str], grant: &Grant, what: &str) {
    assert_eq!(keys.len(), grant.1.len(), "{what}: one fence per key");
    for (key, fence) in keys.iter().zip(&grant.1) {
        assert_eq!(
            fence_of(con, key, &grant.0),
            Some(*fence),
            "{what}: {key} held by {}",
            grant.0
        );
    }
}

fn deadlines(con: &mut Connection, keys: &[&str]) -> Vec<i64> {
    keys.iter().map(|key| expire_time(con, key)).collect()
}

/// `token`'s grant of `keys` with `fences` is in `commands` as exactly one transaction
/// (`MULTI` … `EXEC`) holding one `LOCK.APPLY key token fence …` per key, in key order;
/// no `LOCK.APPLY` of the token stands outside a transaction.
fn assert_one_transaction(commands: &[Argv], keys: &[&str], grant: &Grant, what: &str) {
    let applies = |part: &[Argv]| -> Vec<(String, String)> {
        part.iter()
            .filter(|argv| argv[0].eq_ignore_ascii_case("LOCK.APPLY"))
            .filter(|argv| argv.get(2) == Some(&grant.0))
            .map(|argv| (argv[1].clone(), argv.get(3).cloned().unwrap_or_default()))
            .collect()
    };
    let mut transactions: Vec<&[Argv]> = Vec::new();
    let mut outside: Vec<Argv> = Vec::new();
    let mut open = None;
    for (at, argv) in commands.iter().enumerate() {
        match argv[0].to_ascii_uppercase().as_str() {
            "MULTI" => open = Some(at + 1),
            "EXEC" => {
                if let Some(start) = open.take() {
                    transactions.push(&commands[start..at]);
                }
            }
            _ if open.is_none() => outside.push(argv.clone()),
            _ => {}
        }
    }
    assert_eq!(
        applies(&outside),
        [],
        "{what}: a LOCK.APPLY of the grant outside a transaction; stream: {commands:?}"
    );
    let want: Vec<(String, String)> = keys
        .iter()
        .zip(&grant.1)
        .map(|(key, fence)| (key.to_string(), fence.to_string()))
        .collect();
    let found: Vec<Vec<(String, String)>> = transactions
        .iter()
        .map(|part| applies(part))
        .filter(|part| !part.is_empty())
        .collect();
    assert_eq!(
        found,
        [want],
        "{what}: one transaction with one LOCK.APPLY per key; stream: {commands:?}"
    );
}

/// The commands of the AOF's incremental files (the part after the latest rewrite), in
/// the order they were appended.
fn aof_commands(server: &Server) -> Vec<Argv> {
    let dir = server.dir.join("appendonlydir");
    let mut parts: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(&dir)
        .expect("the AOF directory")
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let seq = name
                .strip_suffix(".incr.aof")?
                .rsplit('.')
                .next()?
                .parse()
                .ok()?;
            Some((seq, entry.path()))
        })
        .collect();
    parts.sort();
    let mut commands = Vec::new();
    for (_, path) in parts {
        let bytes = std::fs::read(&path).expect("read the AOF");
        let mut at = 0;
        while let Some((reply, used)) = testkit::resp::parse(&bytes[at..]).expect("RESP") {
            at += used;
            let Reply::Array(Some(items)) = reply else {
                panic!("{}: not a command: {reply:?}", path.display())
            };
            commands.push(
                items
                    .iter()
                    .map(|item| {
                        String::from_utf8_lossy(item.bulk().unwrap_or_default()).into_owned()
                    })
                    .collect(),
            );
        }
    }
    commands
}

/// The arguments of one `MONITOR` line (`<time> [<db> <client>] "arg" …`) and the
/// client that sent it.
fn monitored(line: &str) -> Option<(String, Argv)> {
    let open = line.find(" [")?;
    let close = open + line[open..].find("] ")?;
    let client = line[open + 2..close].split(' ').nth(1)?.to_string();
    let mut args = Vec::new();
    let mut chars = line[close + 2..].chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => arg.push('\n'),
                    'r' => arg.push('\r'),
                    't' => arg.push('\t'),
                    'x' => {
                        let hex: String = chars.by_ref().take(2).collect();
                        arg.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
                    }
                    other => arg.push(other),
                },
                other => arg.push(other),
            }
        }
        args.push(arg);
    }
    (!args.is_empty()).then_some((client, args))
}

/// Reads `MONITOR` lines until none comes for a moment; the commands `from` sent.
fn monitored_from(monitor: &mut RawClient, from: &str) -> Vec<Argv> {
    let mut commands = Vec::new();
    while let Some(reply) = monitor.try_read_reply(Duration::from_millis(500)) {
        let Reply::Status(line) = reply else {
            panic!("not a MONITOR line: {reply:?}")
        };
        if let Some((client, argv)) = monitored(&line) {
            if client == from {
                commands.push(argv);
            }
        }
    }
    commands
}

// ---------------------------------------------------------------------------------
// A wait beside free keys

/// A waiter for a held key and free ones (the command looks at when each key's lease
/// ends), then the release of one of its keys while another stays held (the freed key
/// stays free for the waiter at its head): the server answers through both, and the
/// waiter gets every key when the last one is released.
#[test]
fn a_wait_beside_free_keys_leaves_the_server_running() {
    let server = Server::start();
    let mut con = server.connect();
    acquire(&mut con, "w:1", 60_000, &["TOKEN", "one"]).unwrap();
    acquire(&mut con, "w:2", 60_000, &["TOKEN", "two"]).unwrap();
    let mut waiter = RawClient::connect(server.port);
    waiter.send_pipeline(&[&[
        "LOCK.ACQUIREALL",
        "3",
        "w:1",
        "w:2",
        "w:3",
        "60000",
        "TOKEN",
        "all",
        "BLOCK",
        "10000",
    ]]);
    let mut probe = RawClient::connect(server.port);
    eventually(Duration::from_secs(5), "the waiter queued", || {
        probe.call_str(&["PING"]) == Reply::Status("PONG".into()) && waiters(&mut con, "w:1") == 1
    });
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "w:1", "one"]), 1);
    assert_eq!(probe.call_str(&["PING"]), Reply::Status("PONG".into()));
    assert_eq!(fence(&mut con, "w:1"), None, "kept free for the waiter");
    assert_eq!(
        waiter.try_read_reply(Duration::from_millis(200)),
        None,
        "w:2 is still held"
    );
    assert_eq!(int(&mut con, &["LOCK.RELEASE", "w:2", "two"]), 1);
    let reply = waiter
        .try_read_reply(Duration::from_secs(5))
        .expect("the waiter was answered");
    let grant = grant_all_of(&reply).unwrap_or_else(|| panic!("not granted: {reply:?}"));
    assert_eq!(grant.0, "all");
    assert_holds(&mut con, &["w:1", "w:2", "w:3"], &grant, "handed over");
}

// ---------------------------------------------------------------------------------
// Persistence

/// The grants of a server: made at once with a chosen token, with a generated token in
/// a session, shared, and handed over by a release. Returns each with its keys.
fn populate(server: &Server, con: &mut Connection) -> Vec<(Vec<&'static str>, Grant)> {
    let made = ["a:1", "a:2", "a:3"];
    let in_session = ["s:1", "s:2"];
    let shared = ["r:1", "r:2"];
    let handed = ["h:1", "h:2", "h:3"];
    vec![
        (made.to_vec(), hold_all(con, &made, &["TOKEN", "made"])),
        (
            in_session.to_vec(),
            hold_all(con, &in_session, &["SESSION", "s"]),
        ),
        (shared.to_vec(), hold_all(con, &shared, &["SHARED"])),
        (
            handed.to_vec(),
            handed_over(server, con, &handed, &[], Freed::Released),
        ),
    ]
}

/// What a restarted server must show again: every key held by its grant's token with
/// its fence, the same deadlines and digest, the session's holdings listed, and the
/// keys still taken (an overlapping `LOCK.ACQUIREALL` gets nil and takes nothing).
fn assert_comes_back(
    con: &mut Connection,
    grants: &[(Vec<&str>, Grant)],
    before: &(Vec<i64>, String),
    what: &str,
) {
    let keys: Vec<&str> = grants.iter().flat_map(|(keys, _)| keys.clone()).collect();
    assert_eq!(digest(con), before.1, "{what}: digest");
    assert_eq!(deadlines(con, &keys), before.0, "{what}: deadlines");
    for (keys, grant) in grants {
        assert_holds(con, keys, grant, what);
    }
    let session = &grants[1];
    let listed: Vec<(String, i64)> = held(con, "s")
        .into_iter()
        .map(|h| (h.key, h.fence))
        .collect();
    let want: Vec<(String, i64)> = session
        .0
        .iter()
        .map(|key| key.to_string())
        .zip(session.1 .1.iter().copied())
        .collect();
    assert_eq!(listed, want, "{what}: the session's holdings");
    assert_eq!(
        acquire_all(con, &["fresh:1", "a:3"], 1_000, &[]),
        None,
        "{what}"
    );
    assert_eq!(fence(con, "fresh:1"), None, "{what}: all or nothing");
}

fn snapshot(con: &mut Connection, grants: &[(Vec<&str>, Grant)]) -> (Vec<i64>, String) {
    let keys: Vec<&str> = grants.iter().flat_map(|(keys, _)| keys.clone()).collect();
    (deadlines(con, &keys), digest(con))
}

#[test]
fn an_rdb_restart_brings_back_every_key_of_each_grant() {
    let mut server = Server::start();
    let mut con = server.connect();
    let grants = populate(&server, &mut con);
    let before = snapshot(&mut con, &grants);
    let _: () = cmd("SAVE").query(&mut con).unwrap();
    server.kill();
    server.restart();
    let mut con = server.connect();
    assert_comes_back(&mut con, &grants, &before, "RDB");
}

/// Grants from before an AOF rewrite (in its base) and after it (appended): each
/// appended grant is one transaction of `LOCK.APPLY`s, and every grant replays whole.
fn multi_key_aof_round_trip(preamble: &str) {
    let what = format!("AOF, preamble {preamble}");
    aof_round_trip(
        preamble,
        Rewrite::Between,
        populate,
        |server, con, mut grants| {
            let late = ["l:1", "l:2", "l:3"];
            let late_grant = hold_all(con, &late, &["TOKEN", "late", "SESSION", "t"]);
            let handed = ["lh:1", "lh:2", "lh:3"];
            let handed_grant =
                handed_over(server, con, &handed, &["TOKEN", "handed"], Freed::Released);
            let ran_out = ["lx:1", "lx:2"];
            let ran_out_grant = handed_over(server, con, &ran_out, &[], Freed::RanOut);
            let appended = aof_commands(server);
            assert_one_transaction(&appended, &late, &late_grant, &format!("{what}: at once"));
            assert_one_transaction(
                &appended,
                &handed,
                &handed_grant,
                &format!("{what}: released"),
            );
            assert_one_transaction(
                &appended,
                &ran_out,
                &ran_out_grant,
                &format!("{what}: ran out"),
            );
            grants.push((late.to_vec(), late_grant));
            grants.push((handed.to_vec(), handed_grant));
            grants.push((ran_out.to_vec(), ran_out_grant));
            let before = snapshot(con, &grants);
            (grants, before)
        },
        |con, (grants, before)| assert_comes_back(con, &grants, &before, &what),
    );
}

#[test]
fn an_aof_replay_with_rdb_preamble_brings_back_every_key_of_each_grant() {
    multi_key_aof_round_trip("yes");
}

#[test]
fn an_aof_replay_without_rdb_preamble_brings_back_every_key_of_each_grant() {
    multi_key_aof_round_trip("no");
}

// ---------------------------------------------------------------------------------
// Replication

/// A grant made at once, one handed over by a release and one by a lease running out:
/// the replica holds every key with the primary's token, fence and deadline, and
/// executed each grant as one transaction from the primary (its `MONITOR`).
#[test]
fn a_replica_holds_every_key_of_each_grant_from_one_transaction() {
    let (primary, replica) = primary_and_replica();
    let mut p = primary.connect();
    let mut r = replica.connect();
    let mut monitor = RawClient::connect(replica.port);
    assert!(monitor.call_str(&["MONITOR"]).is_ok());
    let made = ["a:1", "a:2", "a:3"];
    let handed = ["h:1", "h:2", "h:3"];
    let ran_out = ["x:1", "x:2", "x:3"];
    let grants = [
        (made, hold_all(&mut p, &made, &["TOKEN", "made"]), "at once"),
        (
            handed,
            handed_over(
                &primary,
                &mut p,
                &handed,
                &["TOKEN", "handed"],
                Freed::Released,
            ),
            "released",
        ),
        (
            ran_out,
            handed_over(&primary, &mut p, &ran_out, &[], Freed::RanOut),
            "ran out",
        ),
    ];
    wait_replicated(&mut p);
    assert_eq!(digest(&mut p), digest(&mut r));
    let stream = monitored_from(&mut monitor, &format!("127.0.0.1:{}", primary.port));
    for (keys, grant, what) in &grants {
        assert_holds(&mut r, keys, grant, &format!("replica, {what}"));
        assert_eq!(deadlines(&mut r, keys), deadlines(&mut p, keys), "{what}");
        assert_one_transaction(&stream, keys, grant, &format!("replica's stream, {what}"));
    }
    let refused = cmd("LOCK.ACQUIREALL")
        .arg(1)
        .arg("z")
        .arg(1_000)
        .query::<Value>(&mut r);
    assert_eq!(refused.expect_err("a write").code(), Some("READONLY"));
}

// ---------------------------------------------------------------------------------
// Cluster

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// Three keys of one hash tag on each master, and that master's connection.
fn tagged_keys(cluster: &Cluster, prefix: &str) -> Vec<(usize, Vec<String>)> {
    key_per_node(cluster, prefix)
        .into_iter()
        .enumerate()
        .map(|(node, tag)| (node, (1..=3).map(|i| format!("{{{tag}}}:{i}")).collect()))
        .collect()
}

fn as_strs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// On every master, the keys of one hash tag are taken together by the master serving
/// them (the key spec names them: `COMMAND GETKEYS`), and released one by one.
#[test]
fn keys_of_one_hash_tag_are_taken_together_on_their_master() {
    let cluster = Cluster::start();
    for (node, keys) in tagged_keys(&cluster, "acct") {
        let keys = as_strs(&keys);
        let mut direct = cluster.nodes[node].connect();
        let listed: Vec<String> = cmd("COMMAND")
            .arg("GETKEYS")
            .arg("LOCK.ACQUIREALL")
            .arg(3)
            .arg(&keys)
            .arg(30_000)
            .query(&mut direct)
            .unwrap();
        assert_eq!(listed, keys, "the key spec");
        let grant = hold_all(&mut direct, &keys, &[]);
        assert_holds(&mut direct, &keys, &grant, &format!("node {node}"));
        assert_eq!(acquire_all(&mut direct, &keys[1..], 1_000, &[]), None);
        for key in &keys {
            assert_eq!(int(&mut direct, &["LOCK.RELEASE", key, &grant.0]), 1);
        }
        assert_eq!(int(&mut direct, &["DBSIZE"]), 0);
    }
}

/// A master that does not serve the keys redirects with `MOVED` rather than take them
/// (Redis must find the keys to route the command, as it does for `LOCK.ACQUIRE`), and
/// a cluster client's grant lands on the master that serves them.
#[test]
fn a_master_that_does_not_serve_the_keys_answers_moved() {
    let cluster = Cluster::start();
    let mut client = cluster.client();
    for (node, keys) in tagged_keys(&cluster, "routed") {
        let keys = as_strs(&keys);
        let mut direct = cluster.nodes[node].connect();
        let slot = slot_of(&mut direct, keys[0]);
        let elsewhere = (node + 1) % cluster.nodes.len();
        let mut raw = RawClient::connect(cluster.nodes[elsewhere].port);
        // It may hold the keys of its own tag, granted in an earlier round.
        let before = int(&mut cluster.nodes[elsewhere].connect(), &["DBSIZE"]);
        let reply = raw.call_str(&["LOCK.ACQUIREALL", "3", keys[0], keys[1], keys[2], "30000"]);
        let moved = format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[node].port);
        assert_eq!(
            reply,
            err(&moved),
            "node {elsewhere} does not serve {keys:?}"
        );
        let taken = int(&mut cluster.nodes[elsewhere].connect(), &["DBSIZE"]);
        assert_eq!(
            taken, before,
            "node {elsewhere} took keys it does not serve"
        );
        let grant: Option<Grant> = cmd("LOCK.ACQUIREALL")
            .arg(3)
            .arg(&keys)
            .arg(30_000)
            .query(&mut client)
            .expect("routed to the owner of the tag");
        let grant = grant.expect("free keys granted");
        assert_holds(&mut direct, &keys, &grant, &format!("node {node}"));
    }
}

/// Keys of two slots, both served by the node asked or one of them elsewhere, with or
/// without `BLOCK`: refused by Redis itself before the command runs; nothing is taken
/// or queued.
#[test]
fn keys_of_two_slots_are_refused_crossslot_by_redis_itself() {
    let cluster = Cluster::start();
    let tagged = tagged_keys(&cluster, "split");
    let key = tagged[0].1[0].as_str();
    let owner = tagged[0].0;
    let mut direct = cluster.nodes[owner].connect();
    let key_slot = slot_of(&mut direct, key);
    let local_elsewhere = (0..)
        .map(|i| format!("other:{i}"))
        .find(|other| cluster.owner_of(other) == owner && slot_of(&mut direct, other) != key_slot)
        .expect("a key of another slot on the same node");
    let on_another_node = tagged[1].1[0].as_str();
    let mut raw = RawClient::connect(cluster.nodes[owner].port);
    for other in [local_elsewhere.as_str(), on_another_node] {
        for extra in [&[][..], &["BLOCK", "1000"][..]] {
            let mut argv = vec!["LOCK.ACQUIREALL", "2", key, other, "30000"];
            argv.extend(extra);
            assert_eq!(raw.call_str(&argv), err(CROSSSLOT), "{argv:?}");
        }
    }
    for node in &cluster.nodes {
        let mut con = node.connect();
        assert_eq!(int(&mut con, &["DBSIZE"]), 0, "nothing taken");
        assert_eq!(
            info_field(&mut con, "fencelock", "fencelock_waiters").as_deref(),
            Some("0"),
            "nothing queued"
        );
    }
}

/// A wait for three keys of a slot, one of them held, and a wait for that one key
/// alone: when the held key is migrated to another node both are told `TRYAGAIN` (the
/// lock is held there now), and the wait for three is not handed the two keys left
/// behind.
#[test]
fn a_wait_for_keys_of_a_migrating_slot_is_answered_tryagain_as_a_wait_for_one() {
    let cluster = Cluster::start();
    let tag = &key_per_node(&cluster, "moving")[0];
    let keys: Vec<String> = (1..=3).map(|i| format!("{{{tag}}}:{i}")).collect();
    let (source, target) = (&cluster.nodes[0], &cluster.nodes[1]);
    let mut from = source.connect();
    let mut to = target.connect();
    let (holder, fence) = acquire(&mut from, &keys[1], 60_000, &["TOKEN", "holder"]).unwrap();
    let mut for_all = RawClient::connect(source.port);
    for_all.send_pipeline(&[&[
        "LOCK.ACQUIREALL",
        "3",
        &keys[0],
        &keys[1],
        &keys[2],
        "60000",
        "BLOCK",
        "10000",
    ]]);
    wait_for_waiters(&mut from, &keys[1], 1);
    let mut for_one = RawClient::connect(source.port);
    for_one.send_pipeline(&[&["LOCK.ACQUIRE", &keys[1], "60000", "BLOCK", "10000"]]);
    wait_for_waiters(&mut from, &keys[1], 2);

    let slot = slot_of(&mut from, &keys[1]);
    let moving = SlotMove::begin(source, target, slot);
    moving.migrate(&mut from, &keys[1]);
    let answers: Vec<Reply> = [&mut for_all, &mut for_one]
        .into_iter()
        .map(|waiter| {
            waiter
                .try_read_reply(Duration::from_secs(5))
                .expect("the waiter was answered")
        })
        .collect();
    let moved = err("TRYAGAIN the lock moved to another node, retry the command");
    assert_eq!(
        answers,
        [moved.clone(), moved],
        "the wait for three, for one"
    );
    assert_eq!(int(&mut from, &["DBSIZE"]), 0, "nothing handed over here");
    assert_eq!(
        info_field(&mut from, "fencelock", "fencelock_waiters").as_deref(),
        Some("0"),
        "the wait left every queue"
    );
    moving.finish([1, 0, 2].map(|node| &cluster.nodes[node]));
    assert_eq!(fence_of(&mut to, &keys[1], &holder), Some(fence));
}

// ---------------------------------------------------------------------------------
// ACL

/// What Redis itself answers a command denied one of its keys: its wording changed
/// in 7.2 (the release that brought command categories to modules), and names no key.
fn noperm(con: &mut Connection) -> Reply {
    if support(con).command_categories {
        err("NOPERM No permissions to access a key")
    } else {
        err("NOPERM this user has no permissions to access one of the keys used as arguments")
    }
}

/// A user limited to `~acct:*` (given the lock commands by `+@fencelock` where the
/// server has it, by name on Redis 7.0) takes several of its keys at once, and is
/// refused by Redis's own key-spec check, with or without `BLOCK`, when one key is
/// outside its pattern, whichever position it has: nothing is taken or queued.
#[test]
fn a_key_pattern_admits_its_keys_and_refuses_one_outside_it() {
    let server = Server::start();
    let mut con = server.connect();
    let rules: &[&str] = if support(&mut con).own_category {
        &["-@all", "+@fencelock", "~acct:*"]
    } else {
        &[
            "-@all",
            "+lock.acquireall",
            "+lock.release",
            "+lock.fence",
            "~acct:*",
        ]
    };
    set_user(&mut con, "acct", rules).expect("ACL SETUSER");
    let mut app = RawClient::connect(server.port);
    assert!(app.call_str(&["AUTH", "acct", "any"]).is_ok());
    let reply = app.call_str(&[
        "LOCK.ACQUIREALL",
        "2",
        "acct:1",
        "acct:2",
        "10000",
        "TOKEN",
        "t",
    ]);
    let grant = grant_all_of(&reply).unwrap_or_else(|| panic!("not granted: {reply:?}"));
    assert_holds(
        &mut con,
        &["acct:1", "acct:2"],
        &grant,
        "within the pattern",
    );
    let refused = noperm(&mut con);
    for keys in [["acct:3", "other:1"], ["other:1", "acct:3"]] {
        for extra in [&[][..], &["BLOCK", "1000"][..]] {
            let mut argv = vec!["LOCK.ACQUIREALL", "2", keys[0], keys[1], "10000"];
            argv.extend(extra);
            assert_eq!(app.call_str(&argv), refused, "{argv:?}");
        }
    }
    assert_eq!(int(&mut con, &["EXISTS", "acct:3", "other:1"]), 0);
    assert_eq!(
        info_field(&mut con, "fencelock", "fencelock_waiters").as_deref(),
        Some("0")
    );
    for key in ["acct:1", "acct:2"] {
        assert_eq!(app.call_str(&["LOCK.RELEASE", key, "t"]), Reply::Integer(1));
    }
}

//! Module configs (`fencelock.max-ttl`, `max-waiters`, `max-token-length`,
//! `max-holders`, `lock-delay`, `max-keys`, `deadlock-detection`, `max-value-length`,
//! `max-result-length`, `track-held-keys`): defaults, `CONFIG
//! SET` taking effect on the next command, bounds refused with Redis's own message,
//! values on the `loadmodule` line, in a config file (`redis.conf.example` itself), and
//! `MODULE LOADEX … CONFIG`.

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use testkit::resp::{RawClient, Reply};
use testkit::*;

const DEFAULTS: [(&str, &str); 10] = [
    ("fencelock.max-ttl", "2592000000"),
    ("fencelock.max-waiters", "100000"),
    ("fencelock.max-token-length", "256"),
    ("fencelock.max-holders", "10000"),
    ("fencelock.lock-delay", "0"),
    ("fencelock.max-keys", "64"),
    ("fencelock.deadlock-detection", "yes"),
    ("fencelock.max-value-length", "1024"),
    ("fencelock.max-result-length", "65536"),
    ("fencelock.track-held-keys", "yes"),
];

fn error_text(client: &mut RawClient, argv: &[&str]) -> String {
    match client.call_str(argv) {
        Reply::Error(text) => text,
        other => panic!("{argv:?}: expected an error, got {other:?}"),
    }
}

#[test]
fn defaults_are_listed_by_config_get() {
    let server = Server::start();
    let mut con = server.connect();
    let all: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("fencelock.*")
        .query(&mut con)
        .unwrap();
    assert_eq!(all.len(), 2 * DEFAULTS.len(), "{all:?}");
    for (name, default) in DEFAULTS {
        assert_eq!(config_get(&mut con, name), default);
    }
}

#[test]
fn config_set_takes_effect_on_the_next_command() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);

    config_set(&mut con, "fencelock.max-ttl", "1000").unwrap();
    assert!(acquire(&mut con, "short", 1000, &[]).is_some());
    assert_eq!(
        error_text(&mut raw, &["LOCK.ACQUIRE", "long", "1001"]),
        "ERR invalid expire time in 'lock.acquire' command"
    );

    config_set(&mut con, "fencelock.max-token-length", "4").unwrap();
    assert!(acquire(&mut con, "t4", 1000, &["TOKEN", "abcd"]).is_some());
    assert_eq!(
        error_text(&mut raw, &["LOCK.ACQUIRE", "t5", "1000", "TOKEN", "abcde"]),
        "ERR invalid token"
    );

    config_set(&mut con, "fencelock.max-waiters", "1").unwrap();
    acquire(&mut con, "queue", 1000, &[]).expect("granted");
    let mut first_waiter = RawClient::connect(server.port);
    first_waiter.send(&[b"LOCK.ACQUIRE", b"queue", b"1000", b"BLOCK", b"5000"]);
    eventually(Duration::from_secs(5), "one waiter queued", || {
        info_field(&mut con, "fencelock", "fencelock_waiters").as_deref() == Some("1")
    });
    assert_eq!(
        error_text(
            &mut raw,
            &["LOCK.ACQUIRE", "queue", "1000", "BLOCK", "5000"]
        ),
        "ERR too many waiters"
    );
    // The queued one is still served when the lease runs out.
    assert!(matches!(first_waiter.read_reply(), Reply::Array(Some(_))));
}

#[test]
fn out_of_range_values_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut raw = RawClient::connect(server.port);
    let cases = [
        (
            "fencelock.max-ttl",
            "0",
            "must be between 1 and 9223372036854775807 inclusive",
        ),
        (
            "fencelock.max-ttl",
            "-5",
            "must be between 1 and 9223372036854775807 inclusive",
        ),
        (
            "fencelock.max-waiters",
            "0",
            "must be between 1 and 100000000 inclusive",
        ),
        (
            "fencelock.max-waiters",
            "100000001",
            "must be between 1 and 100000000 inclusive",
        ),
        (
            "fencelock.max-token-length",
            "0",
            "must be between 1 and 4096 inclusive",
        ),
        (
            "fencelock.max-token-length",
            "4097",
            "must be between 1 and 4096 inclusive",
        ),
        (
            "fencelock.max-value-length",
            "1048577",
            "must be between 0 and 1048576 inclusive",
        ),
        (
            "fencelock.max-value-length",
            "-1",
            "must be between 0 and 1048576 inclusive",
        ),
        (
            "fencelock.max-ttl",
            "ten",
            "couldn't be parsed into an integer",
        ),
    ];
    for (name, value, why) in cases {
        let text = error_text(&mut raw, &["CONFIG", "SET", name, value]);
        assert_eq!(
            text,
            format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument {why}"
            ),
            "{name} {value}"
        );
    }
    let mut con = server.connect();
    for (name, default) in DEFAULTS {
        assert_eq!(config_get(&mut con, name), default);
    }
    // The bounds themselves are accepted.
    config_set(&mut con, "fencelock.max-token-length", "4096").unwrap();
    config_set(&mut con, "fencelock.max-waiters", "100000000").unwrap();
    config_set(&mut con, "fencelock.max-ttl", "9223372036854775807").unwrap();
    config_set(&mut con, "fencelock.max-ttl", "1").unwrap();
}

#[test]
fn loadmodule_arguments_set_the_configs() {
    let server = Server::with_module_args(
        &[],
        &[
            "max-ttl",
            "60000",
            "max-waiters",
            "5",
            "max-token-length",
            "16",
            "deadlock-detection",
            "no",
            "max-keys",
            "3",
        ],
    );
    let mut con = server.connect();
    assert_eq!(config_get(&mut con, "fencelock.deadlock-detection"), "no");
    assert_eq!(config_get(&mut con, "fencelock.max-keys"), "3");
    assert_eq!(config_get(&mut con, "fencelock.max-ttl"), "60000");
    assert_eq!(config_get(&mut con, "fencelock.max-waiters"), "5");
    assert_eq!(config_get(&mut con, "fencelock.max-token-length"), "16");
    assert!(acquire(&mut con, "k", 60_000, &[]).is_some());
    let mut raw = RawClient::connect(server.port);
    assert_eq!(
        error_text(&mut raw, &["LOCK.REFRESH", "k", "whatever", "60001"]),
        "ERR invalid expire time in 'lock.refresh' command"
    );
}

/// A server process started here rather than by the harness: without the module, or
/// expected to refuse to start.
struct Process {
    child: Child,
    port: u16,
    dir: testkit::tempfile::TempDir,
}

impl Process {
    fn spawn(tag: &str, args: &[String]) -> Self {
        let dir = testkit::tempfile::Builder::new()
            .prefix(&format!("fencelock-config-{tag}-"))
            .tempdir()
            .expect("create dir");
        let port = free_port();
        // Tied to the test process: it dies with it (`testkit::process`).
        let child = testkit::process::spawn(
            Command::new(server_binary())
                .args(args)
                .arg("--port")
                .arg(port.to_string())
                .arg("--bind")
                .arg("127.0.0.1")
                .arg("--dir")
                .arg(dir.path())
                .arg("--save")
                .arg("")
                .arg("--appendonly")
                .arg("no")
                .arg("--logfile")
                .arg(dir.path().join("redis.log"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("start server");
        Process { child, port, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Waits for the process to exit by itself; `None` if it is still running.
    fn exit_code(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn connect(&mut self) -> Connection {
        let url = format!("redis://127.0.0.1:{}/", self.port);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let attempt = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)));
            if let Ok(mut con) = attempt {
                if cmd("PING").query::<String>(&mut con).is_ok() {
                    return con;
                }
            }
            assert!(
                self.exit_code(Duration::ZERO).is_none(),
                "server exited:\n{}",
                self.log()
            );
            assert!(Instant::now() < deadline, "server did not start");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn module() -> String {
    module_path().to_string_lossy().into_owned()
}

#[test]
fn an_out_of_range_loadmodule_argument_stops_the_server() {
    for (name, value) in [
        ("max-waiters", "0"),
        ("max-ttl", "-5"),
        ("max-token-length", "4097"),
    ] {
        let args = [
            "--loadmodule".to_string(),
            module(),
            name.into(),
            value.into(),
        ];
        let mut process = Process::spawn("bad-arg", &args);
        let code = process.exit_code(Duration::from_secs(20));
        assert!(
            matches!(code, Some(c) if c != 0),
            "{name} {value}: exit {code:?}"
        );
    }
}

fn module_names(con: &mut Connection) -> Vec<String> {
    let modules: Vec<Vec<Value>> = cmd("MODULE").arg("LIST").query(con).unwrap();
    modules
        .into_iter()
        .filter_map(|fields| redis::from_redis_value::<String>(fields.get(1)?.clone()).ok())
        .collect()
}

fn loadex(con: &mut Connection, configs: &[(&str, &str)]) -> redis::RedisResult<()> {
    let mut command = cmd("MODULE");
    command.arg("LOADEX").arg(module());
    for (name, value) in configs {
        command.arg("CONFIG").arg(*name).arg(*value);
    }
    command.query(con)
}

fn module_server() -> (Process, Connection) {
    let args = ["--enable-module-command".to_string(), "local".into()];
    let mut process = Process::spawn("loadex", &args);
    let con = process.connect();
    (process, con)
}

#[test]
fn module_loadex_sets_the_configs() {
    let (_process, mut con) = module_server();
    loadex(
        &mut con,
        &[
            ("fencelock.max-ttl", "5000"),
            ("fencelock.max-waiters", "3"),
        ],
    )
    .expect("MODULE LOADEX with configs");
    assert!(module_names(&mut con).contains(&"fencelock".to_string()));
    assert_eq!(config_get(&mut con, "fencelock.max-ttl"), "5000");
    assert_eq!(config_get(&mut con, "fencelock.max-waiters"), "3");
    assert_eq!(config_get(&mut con, "fencelock.max-token-length"), "256");
    assert!(acquire(&mut con, "k", 5000, &[]).is_some());
}

/// The server refuses the value; the module must then not be loaded (Redis 7.0 keeps
/// it half-loaded with defaults, Valkey 9.1 crashes in its unload path) and a corrected
/// retry must load it.
#[test]
fn module_loadex_with_an_out_of_range_config_loads_nothing() {
    let (mut process, mut con) = module_server();
    assert!(loadex(&mut con, &[("fencelock.max-ttl", "0")]).is_err());
    assert_eq!(
        process.exit_code(Duration::ZERO),
        None,
        "the server is alive"
    );
    assert!(!module_names(&mut con).contains(&"fencelock".to_string()));
    let unknown: redis::RedisResult<Value> = cmd("LOCK.ACQUIRE").arg("k").arg(1000).query(&mut con);
    assert!(unknown.is_err(), "no lock commands: {unknown:?}");
    loadex(&mut con, &[("fencelock.max-ttl", "5000")]).expect("a corrected retry loads");
    assert_eq!(config_get(&mut con, "fencelock.max-ttl"), "5000");
}

/// The safe way to pass settings at runtime (README, compatibility notes): `ARGS`, which
/// the module checks itself before it registers anything. An unknown name in
/// `CONFIG` is only noticed by the server after the load, which crashes Valkey 9.1.2.
#[test]
fn module_loadex_with_an_unknown_argument_loads_nothing() {
    let (mut process, mut con) = module_server();
    let refused: redis::RedisResult<()> = cmd("MODULE")
        .arg("LOADEX")
        .arg(module())
        .arg("ARGS")
        .arg("max-ttls")
        .arg("5000")
        .query(&mut con);
    assert!(refused.is_err());
    assert_eq!(
        process.exit_code(Duration::ZERO),
        None,
        "the server is alive"
    );
    assert!(!module_names(&mut con).contains(&"fencelock".to_string()));
    assert!(process.log().contains("unknown module argument 'max-ttls'"));
    let _: () = cmd("MODULE")
        .arg("LOADEX")
        .arg(module())
        .arg("ARGS")
        .arg("max-ttl")
        .arg("5000")
        .query(&mut con)
        .expect("a corrected retry loads");
    assert_eq!(config_get(&mut con, "fencelock.max-ttl"), "5000");
}

#[test]
fn module_load_is_refused_unless_the_server_enables_it() {
    let server = Server::start();
    let mut con = server.connect();
    let refused: redis::RedisResult<()> = cmd("MODULE").arg("LOADEX").arg(module()).query(&mut con);
    let error = refused.expect_err("enable-module-command is off by default");
    assert!(error.to_string().contains("not allowed"), "{error}");
}

#[test]
fn redis_conf_example_loads_with_its_settings_in_force() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/redis.conf.example");
    let example = std::fs::read_to_string(path).expect("read redis.conf.example");
    // Only the module path is adapted: the example names the repository's build output.
    let adapted: String = example
        .lines()
        .map(|line| match line.strip_prefix("loadmodule ") {
            Some(_) => format!("loadmodule {}\n", module()),
            None => format!("{line}\n"),
        })
        .collect();
    let dir = testkit::tempfile::tempdir().expect("create dir");
    let conf = dir.path().join("redis.conf");
    std::fs::write(&conf, adapted).expect("write config");
    let mut process = Process::spawn("conf-run", &[conf.to_string_lossy().into_owned()]);
    let mut con = process.connect();
    assert_eq!(config_get(&mut con, "maxmemory-policy"), "noeviction");
    assert_eq!(config_get(&mut con, "appendfsync"), "always");
    for (name, default) in DEFAULTS {
        assert_eq!(config_get(&mut con, name), default);
    }
    assert!(acquire(&mut con, "k", 1000, &[]).is_some());
}

/// A waiter queued with a ttl that `fencelock.max-ttl`, lowered meanwhile, no longer
/// allows is still granted at its turn, with a lease of the new maximum: it asked
/// validly, and the operator's cap holds for every lease that starts after it.
#[test]
fn a_waiter_granted_after_max_ttl_was_lowered_gets_at_most_the_new_maximum() {
    let server = Server::start();
    let mut con = server.connect();
    for mode in [&[][..], &["SHARED"][..]] {
        let _: () = cmd("CONFIG")
            .arg("SET")
            .arg("fencelock.max-ttl")
            .arg(2_592_000_000_i64)
            .query(&mut con)
            .unwrap();
        let (holder, _) = acquire(&mut con, "k", 60_000, &[]).unwrap();
        let mut waiter = RawClient::connect(server.port);
        let mut argv: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"k", b"600000"];
        argv.extend(mode.iter().map(|m| m.as_bytes()));
        argv.extend([&b"BLOCK"[..], b"0"]);
        waiter.send(&argv);
        wait_for_waiters(&mut con, "k", 1);
        let _: () = cmd("CONFIG")
            .arg("SET")
            .arg("fencelock.max-ttl")
            .arg(1_000)
            .query(&mut con)
            .unwrap();
        assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &holder]), 1);
        let granted = waiter.read_reply();
        let (token, _) = granted.grant().expect("granted");
        let token = String::from_utf8(token.to_vec()).unwrap();
        let pttl = int(&mut con, &["PTTL", "k"]);
        assert!(pttl > 0 && pttl <= 1_000, "{mode:?}: PTTL {pttl}");
        assert_eq!(int(&mut con, &["LOCK.RELEASE", "k", &token]), 1);
    }
}

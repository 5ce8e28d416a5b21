//! Bad input and hostile clients, at soak scale: random argv (binary, huge, negative,
//! overflowing, unicode) against every command, checking that each reply is a proper
//! reply or an error and that no error changed anything; `RESTORE` of corrupted `DUMP`
//! payloads of lock keys, re-signed so the corruption reaches the module's loader; and
//! RDB files cut or flipped at many places, which must fail to load cleanly.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::reliability::report::{assert_none, Summary};
use crate::reliability::scale::pick;
use testkit::resp::{RawClient, Reply};
use testkit::*;

const COMMANDS: [&[u8]; 9] = [
    b"LOCK.ACQUIRE",
    b"LOCK.PROCLAIM",
    b"LOCK.OBSERVE",
    b"LOCK.REFRESH",
    b"LOCK.RELEASE",
    b"LOCK.FENCE",
    b"LOCK.INFO",
    b"LOCK.APPLY",
    b"LOCK.DROP",
];

fn random_arg(rng: &mut StdRng) -> Vec<u8> {
    const WORDS: [&str; 32] = [
        "SHARED",
        "shared",
        "LIMIT",
        "limit",
        "TOKEN",
        "token",
        "ToKeN",
        "BLOCK",
        "block",
        "PXAT",
        "pxat",
        "0",
        "-0",
        "1",
        "-1",
        "+1",
        " 1",
        "1 ",
        "007",
        "0x10",
        "1e3",
        "1.5",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "99999999999999999999999",
        "owner",
        "k",
        "ключ",
        "🔒",
    ];
    match rng.gen_range(0..8) {
        0..=2 => WORDS[rng.gen_range(0..WORDS.len())].as_bytes().to_vec(),
        3 => (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
        4 => rng.gen::<i64>().to_string().into_bytes(),
        5 => vec![b'x'; [0, 1, 255, 256, 257, 4096, 4097][rng.gen_range(0..7)]],
        6 => "é🔒\u{202e}\0\r\n"
            .repeat(rng.gen_range(0..20))
            .into_bytes(),
        // Rarely, something huge.
        _ if rng.gen_bool(0.01) => vec![b'z'; rng.gen_range(20_000..300_000)],
        _ => rng.gen_range(0..5_000).to_string().into_bytes(),
    }
}

fn random_argv(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut argv = vec![COMMANDS[rng.gen_range(0..COMMANDS.len())].to_vec()];
    if rng.gen_bool(0.9) {
        argv.push([&b"k"[..], b"held", b"s"][rng.gen_range(0..3)].to_vec());
    }
    for _ in 0..rng.gen_range(0..8) {
        argv.push(random_arg(rng));
    }
    // A random BLOCK may never end (BLOCK 0 on a held key): keep every timeout short.
    for i in 1..argv.len() {
        if argv[i - 1].eq_ignore_ascii_case(b"BLOCK") {
            argv[i] = [&b"1"[..], b"-1", b"x", b"2"][rng.gen_range(0..4)].to_vec();
        }
    }
    argv
}

/// A reply of the shape the command documents, or an error.
fn proper(command: &[u8], reply: &Reply) -> bool {
    match (command, reply) {
        (_, Reply::Error(text)) => ["ERR ", "WRONGTYPE ", "WRONGMODE "]
            .iter()
            .any(|code| text.starts_with(code)),
        (b"LOCK.ACQUIRE", Reply::Array(Some(items))) => {
            matches!(items.as_slice(), [Reply::Bulk(Some(_)), Reply::Integer(f)] if *f > 0)
        }
        (b"LOCK.ACQUIRE" | b"LOCK.FENCE" | b"LOCK.INFO" | b"LOCK.OBSERVE", Reply::Bulk(None)) => {
            true
        }
        (
            b"LOCK.REFRESH" | b"LOCK.RELEASE" | b"LOCK.DROP" | b"LOCK.PROCLAIM",
            Reply::Integer(0 | 1),
        ) => true,
        (b"LOCK.OBSERVE", Reply::Array(Some(items))) => matches!(
            items.as_slice(),
            [Reply::Integer(0), Reply::Bulk(None)] | [Reply::Integer(1..), Reply::Bulk(_)]
        ),
        (b"LOCK.FENCE", Reply::Integer(f)) => *f > 0,
        // 10 field/value pairs, with `limit` for a semaphore.
        (b"LOCK.INFO", Reply::Array(Some(items))) => matches!(items.len(), 20 | 22),
        (b"LOCK.APPLY", Reply::Status(ok)) => ok == "OK",
        _ => false,
    }
}

#[test]
fn random_argv_gets_proper_replies_and_errors_change_nothing() {
    let calls = pick(100_000, 500_000);
    let batch = 50;
    let mut server = Server::start();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(raw.call_str(&["SET", "s", "v"]), Reply::Status("OK".into()));
    // A huge argument splits a pipeline across event-loop turns; with active expiry on,
    // a short lease could lapse between a command and its digests. Only commands may
    // change the dataset here (waiters are this one client's, gone once it moves on).
    assert_eq!(
        raw.call_str(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]),
        Reply::Status("OK".into())
    );
    let mut rng = StdRng::seed_from_u64(0x00f0_2222);
    let mut anomalies = Vec::new();
    let mut errors = 0;
    let digest: &[&[u8]] = &[b"DEBUG", b"DIGEST"];
    let mut sent = 0;
    while sent < calls {
        // The held lock is put back now and then, so errors meet a held lock too.
        raw.call_str(&["LOCK.ACQUIRE", "held", "600000", "TOKEN", "owner"]);
        let argvs: Vec<Vec<Vec<u8>>> = (0..batch).map(|_| random_argv(&mut rng)).collect();
        // EXISTS key, DIGEST, cmd, DIGEST, … in one pipeline: nothing runs in between.
        // The EXISTS lets Redis drop the key first if its lease already ran out (lazy
        // expiry), so that a command opening it does not count as changing the dataset.
        for argv in &argvs {
            let key = argv.get(1).map_or(&b"k"[..], Vec::as_slice);
            raw.send(&[b"EXISTS", key]);
            raw.send(digest);
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            raw.send(&refs);
            raw.send(digest);
        }
        for argv in &argvs {
            let _exists = raw.read_reply();
            let before = raw.read_reply();
            let reply = raw.read_reply();
            let after = raw.read_reply();
            let shown = String::from_utf8_lossy(&argv.concat())
                .chars()
                .take(120)
                .collect::<String>();
            if !proper(&argv[0], &reply) {
                anomalies.push(format!("improper reply {reply:?} to {shown}"));
            }
            if matches!(reply, Reply::Error(_)) {
                errors += 1;
                if before != after {
                    anomalies.push(format!("error {reply:?} changed the dataset: {shown}"));
                }
            }
        }
        sent += batch;
    }
    assert!(server.is_alive(), "server died; log:\n{}", server.log());
    assert_eq!(raw.call_str(&["PING"]), Reply::Status("PONG".into()));
    let log = server.log();
    if log.contains("crashed by signal") || log.contains("STACK TRACE") {
        anomalies.push("crash report in the log".into());
    }
    Summary {
        scenario: "random argv",
        fault: "binary, huge, negative, overflowing, unicode argv on all 9 commands".into(),
        load: "1 client, pipelines of 50, each call bracketed by DEBUG DIGEST".into(),
        ops: sent,
        anomalies: anomalies.len(),
        notes: format!("{errors} error replies, none changed the dataset; server alive"),
    }
    .emit();
    assert_none("random argv", &anomalies);
}

/// Redis's CRC-64 (Jones polynomial, reflected), which signs DUMP payloads and RDBs.
fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc: u64 = 0;
    for &byte in bytes {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Replaces a DUMP payload's trailing checksum so the server accepts the body as is.
fn resign(payload: &mut Vec<u8>) {
    let body = payload.len() - 8;
    payload.truncate(body);
    let crc = crc64(payload);
    payload.extend_from_slice(&crc.to_le_bytes());
}

fn corrupt(rng: &mut StdRng, good: &[u8]) -> Vec<u8> {
    // Body, then 2 bytes of RDB version, then 8 bytes of checksum.
    let mut body = good[..good.len() - 10].to_vec();
    let version = &good[good.len() - 10..good.len() - 8];
    match rng.gen_range(0..4) {
        0 => {
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..body.len());
                body[at] ^= 1 << rng.gen_range(0..8);
            }
        }
        1 => body.truncate(rng.gen_range(0..body.len())),
        2 => {
            let at = rng.gen_range(0..body.len());
            body[at] = rng.gen();
            body.truncate(rng.gen_range(at..=body.len()));
        }
        _ => body.extend((0..rng.gen_range(1..16)).map(|_| rng.gen::<u8>())),
    }
    let mut payload = [body.as_slice(), version, &[0; 8]].concat();
    resign(&mut payload);
    payload
}

#[test]
fn restore_of_corrupted_lock_payloads_never_crashes() {
    let cycles = pick(1_000, 20_000);
    let mut server = Server::start();
    let mut con = server.connect();
    let mut rng = StdRng::seed_from_u64(0x00d0_3333);
    let mut payloads = Vec::new();
    for (i, token) in ["t", &"x".repeat(256), "é🔒"].into_iter().enumerate() {
        let key = format!("src{i}");
        acquire(&mut con, &key, 600_000, &["TOKEN", token]).unwrap();
        payloads.push(cmd("DUMP").arg(&key).query::<Vec<u8>>(&mut con).unwrap());
    }
    acquire(&mut con, "src-generated", 600_000, &[]).unwrap();
    payloads.push(cmd("DUMP").arg("src-generated").query(&mut con).unwrap());
    for payload in &payloads {
        let mut same = payload.clone();
        resign(&mut same);
        assert_eq!(&same, payload, "the checksum is computed as Redis does");
    }
    let mut anomalies = Vec::new();
    let (mut accepted, mut refused) = (0, 0);
    for cycle in 0..cycles {
        let good = &payloads[cycle % payloads.len()];
        let bad = corrupt(&mut rng, good);
        let key = format!("r{}", cycle % 64);
        let restored = cmd("RESTORE")
            .arg(&key)
            .arg(0)
            .arg(&bad)
            .arg("REPLACE")
            .query::<()>(&mut con);
        if restored.is_err() {
            refused += 1;
            continue;
        }
        accepted += 1;
        // Whatever was accepted must behave as a lock key in every command.
        for probe in [
            cmd("LOCK.FENCE").arg(&key).clone(),
            cmd("LOCK.INFO").arg(&key).clone(),
            cmd("DUMP").arg(&key).clone(),
            cmd("MEMORY").arg("USAGE").arg(&key).clone(),
            cmd("DEBUG").arg("DIGEST-VALUE").arg(&key).clone(),
            cmd("LOCK.RELEASE").arg(&key).arg("t").clone(),
        ] {
            if let Err(error) = probe.query::<Value>(&mut con) {
                if error.is_io_error() {
                    anomalies.push(format!("server lost on a restored key: {error}"));
                }
            }
        }
        if !server.is_alive() {
            break;
        }
    }
    if !server.is_alive() {
        anomalies.push(format!("server died; log:\n{}", server.log()));
    }
    Summary {
        scenario: "RESTORE corrupted DUMP",
        fault: "bit flips, truncation, garbage; checksum re-signed so the module parses it".into(),
        load: format!("{} lock payloads", payloads.len()),
        ops: cycles,
        anomalies: anomalies.len(),
        notes: format!("{refused} refused with an error, {accepted} accepted as valid locks"),
    }
    .emit();
    assert_none("corrupted DUMP payloads", &anomalies);
}

#[test]
fn rdb_files_cut_or_flipped_anywhere_fail_to_load_cleanly() {
    let variants = pick(12, 80);
    let mut server = Server::with_args(&["save", "3600 1"]);
    let mut con = server.connect();
    for i in 0..40 {
        let token = "t".repeat(1 + i * 5);
        acquire(&mut con, &format!("lock:{i}"), 600_000, &["TOKEN", &token]).unwrap();
    }
    server.shutdown();
    let rdb = server.dir.join("dump.rdb");
    let good = std::fs::read(&rdb).unwrap();
    let mut rng = StdRng::seed_from_u64(0x00b0_4444);
    let mut anomalies = Vec::new();
    let mut failed = 0;
    for variant in 0..variants {
        let mut bad = good.clone();
        if variant % 2 == 0 {
            bad.truncate(rng.gen_range(9..good.len()));
        } else {
            let at = rng.gen_range(9..good.len() - 8);
            bad[at] ^= 1 << rng.gen_range(0..8);
        }
        std::fs::write(&rdb, &bad).unwrap();
        let log = server.dir.join(format!("load-{variant}.log"));
        let status = testkit::process::spawn(
            std::process::Command::new(server_binary())
                .arg("--port")
                .arg("0")
                .arg("--dir")
                .arg(&server.dir)
                .arg("--loadmodule")
                .arg(module_path())
                .arg("--logfile")
                .arg(&log)
                .arg("--save")
                .arg("")
                // A file that loads anyway would leave a server running: stop it at once.
                .arg("--shutdown-on-sigterm")
                .arg("now"),
        )
        .and_then(|mut child| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                if let Some(status) = child.try_wait()? {
                    return Ok(Some(status));
                }
                if std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Ready to accept")) {
                    child.kill()?;
                    child.wait()?;
                    return Ok(None);
                }
                if std::time::Instant::now() > deadline {
                    child.kill()?;
                    return Ok(None);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })
        .unwrap();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("crashed by signal") || text.contains("STACK TRACE") {
            anomalies.push(format!("variant {variant}: crash while loading:\n{text}"));
        }
        if let Some(status) = status {
            failed += 1;
            if status.code().is_none() {
                anomalies.push(format!("variant {variant}: killed by a signal: {status}"));
            }
        }
    }
    Summary {
        scenario: "damaged RDB",
        fault: "RDB truncated or one bit flipped at a random offset".into(),
        load: "40 held locks with tokens of 1-196 bytes".into(),
        ops: variants,
        anomalies: anomalies.len(),
        notes: format!(
            "{failed} refused to load with an error exit, {} loaded; no crash",
            variants - failed
        ),
    }
    .emit();
    assert_none("damaged RDB files", &anomalies);
    assert!(failed > 0, "no damaged file was refused");
}

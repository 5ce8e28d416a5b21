//! Read-write locks (`SHARED`): readers hold together and a writer waits for all of them
//! (also for the last reader's own lease end, or for `UNLINK`/`FLUSHALL` of the key); a
//! reader never overtakes a queued writer, and readers queued behind a writer are
//! granted together when it releases.

use testkit::resp::RawClient;
use testkit::*;

use super::{assert_info, held_info, hold, holders, info_int, refresh, release, Waiter};

#[test]
fn readers_hold_together_and_a_writer_waits_for_all_of_them() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let mut fences = Vec::new();
    for i in 0..5 {
        let (_, fence) = hold(
            &mut con,
            "rw",
            60_000,
            &["TOKEN", &format!("r{i}"), "SHARED"],
        );
        fences.push(fence);
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_info(
        &mut raw,
        "rw",
        &held_info(fences[4], 60_000, "shared", 5, None, (0, 0)),
    );
    assert_eq!(acquire(&mut con, "rw", 60_000, &["TOKEN", "writer"]), None);
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    assert_eq!(info_int(&mut con, "rw", "waiters-exclusive"), 1);
    assert_eq!(info_int(&mut con, "rw", "waiters-shared"), 0);
    for i in 0..4 {
        assert_eq!(release(&mut con, "rw", &format!("r{i}")), 1);
    }
    writer.assert_waiting("one reader still holds");
    assert_eq!(release(&mut con, "rw", "r4"), 1);
    let (token, fence) = writer.granted();
    assert_eq!(token, "writer");
    assert!(fence > fences[4], "above every reader's fence");
    assert_eq!(holders(&mut con, "rw"), 1);
    let mode: String =
        redis::from_redis_value(lock_info(&mut con, "rw").unwrap()["mode"].clone()).unwrap();
    assert_eq!(mode, "exclusive");
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["SHARED"]),
        None,
        "no reader while the writer holds"
    );
}

#[test]
fn a_writer_is_granted_when_the_last_readers_own_lease_ends() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 100, &["TOKEN", "r1", "SHARED"]);
    hold(&mut con, "rw", 300, &["TOKEN", "r2", "SHARED"]);
    let deadline = expire_time(&mut con, "rw");
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    let (token, fence) = writer.granted();
    // On the server's clock (the grant's fence), not when the test read the reply.
    let at = fence_ms(fence);
    assert_eq!(token, "writer");
    assert!(
        at >= deadline,
        "not before the last reader's lease ends ({at} < {deadline})"
    );
    assert!(at - deadline < 1_000, "{} ms late", at - deadline);
}

#[test]
fn a_reader_arriving_after_a_queued_writer_waits_behind_it() {
    let server = Server::start();
    let mut con = server.connect();
    hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "writer", &[]);
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["TOKEN", "late", "SHARED"]),
        None,
        "a reader never overtakes a queued writer"
    );
    let mut reader = Waiter::queue(&server, &mut con, "rw", 60_000, "r2", &["SHARED"]);
    assert_eq!(info_int(&mut con, "rw", "waiters-exclusive"), 1);
    assert_eq!(info_int(&mut con, "rw", "waiters-shared"), 1);
    reader.assert_waiting("behind the writer");
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    let (token, writer_fence) = writer.granted();
    assert_eq!(token, "writer");
    reader.assert_waiting("the writer holds");
    assert_eq!(release(&mut con, "rw", "writer"), 1);
    let (token, fence) = reader.granted();
    assert_eq!(token, "r2");
    assert!(fence > writer_fence);
}

#[test]
fn readers_queued_behind_a_writer_are_granted_together_when_it_releases() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    let (_, mut last) = hold(&mut con, "rw", 60_000, &["TOKEN", "x"]);
    let mut first_readers: Vec<Waiter> = (1..=3)
        .map(|i| {
            Waiter::queue(
                &server,
                &mut con,
                "rw",
                60_000,
                &format!("r{i}"),
                &["SHARED"],
            )
        })
        .collect();
    let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "w", &[]);
    let mut later_readers: Vec<Waiter> = (4..=5)
        .map(|i| {
            Waiter::queue(
                &server,
                &mut con,
                "rw",
                60_000,
                &format!("r{i}"),
                &["SHARED"],
            )
        })
        .collect();

    assert_eq!(release(&mut con, "rw", "x"), 1);
    for (i, reader) in first_readers.iter_mut().enumerate() {
        let (token, fence) = reader.granted();
        assert_eq!(token, format!("r{}", i + 1));
        assert!(fence > last);
        last = fence;
    }
    writer.assert_waiting("three readers hold");
    later_readers[0].assert_waiting("behind the writer");
    assert_info(
        &mut raw,
        "rw",
        &held_info(last, 60_000, "shared", 3, None, (1, 2)),
    );
    assert_eq!(release(&mut con, "rw", "r1"), 1);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    writer.assert_waiting("one reader still holds");
    assert_eq!(release(&mut con, "rw", "r3"), 1);
    let (token, fence) = writer.granted();
    assert_eq!(token, "w");
    assert!(fence > last);
    last = fence;
    for reader in &mut later_readers {
        reader.assert_waiting("the writer holds");
    }

    assert_eq!(release(&mut con, "rw", "w"), 1);
    for (i, reader) in later_readers.iter_mut().enumerate() {
        let (token, fence) = reader.granted();
        assert_eq!(token, format!("r{}", i + 4));
        assert!(fence > last);
        last = fence;
    }
    assert_eq!(holders(&mut con, "rw"), 2);
    assert_eq!(waiters(&mut con, "rw"), 0);
}

#[test]
fn unlinking_or_flushing_a_read_locked_key_hands_it_to_the_queued_writer() {
    let server = Server::start();
    let mut con = server.connect();
    for wipe in ["UNLINK", "FLUSHALL"] {
        let (_, r1) = hold(&mut con, "rw", 60_000, &["TOKEN", "r1", "SHARED"]);
        hold(&mut con, "rw", 60_000, &["TOKEN", "r2", "SHARED"]);
        let mut writer = Waiter::queue(&server, &mut con, "rw", 60_000, "w", &[]);
        let mut wipe_cmd = cmd(wipe);
        if wipe == "UNLINK" {
            wipe_cmd.arg("rw");
        }
        let _: Value = wipe_cmd.query(&mut con).unwrap();
        let (token, fence) = writer.granted();
        assert_eq!(token, "w", "{wipe}");
        assert!(fence > r1);
        assert_eq!(refresh(&mut con, "rw", "r2", 60_000), 0, "{wipe}");
        assert_eq!(release(&mut con, "rw", "w"), 1, "{wipe}");
    }
}

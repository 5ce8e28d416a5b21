//! Recipes: a cron job runs once per schedule by keeping its lease for the minimum time
//! between runs instead of releasing it; and the fence goes to the resource, which
//! refuses a holder whose lease has lapsed.

use testkit::*;

use super::random_token;

/// One process's cron tick: it runs the job when it gets the lock.
fn tick(con: &mut Connection, release_after: bool) -> bool {
    let key = "lock:daily-report";
    let Some((token, _)) = acquire(con, key, 600_000, &["TOKEN", &random_token()]) else {
        return false;
    };
    let _: i64 = cmd("INCR").arg("runs:daily-report").query(con).unwrap();
    if release_after {
        assert_eq!(int(con, &["LOCK.RELEASE", key, &token]), 1);
    }
    true
}

/// Three processes fire the same daily job; one fires late (a slow start, a skewed
/// clock), after the first has finished. Broken: acquire → run → release: the late one
/// finds the lock free and runs the job again. Kept: the lease is the minimum time
/// between runs (10 minutes here) and is not released: the late ones find it busy.
#[test]
fn cron_releasing_after_the_run_runs_twice_keeping_the_lease_runs_once() {
    let server = Server::start();
    let mut processes: Vec<Connection> = (0..3).map(|_| server.connect()).collect();
    for release_after in [true, false] {
        let _: i64 = cmd("DEL")
            .arg("lock:daily-report")
            .arg("runs:daily-report")
            .query(&mut processes[0])
            .unwrap();
        let ran: Vec<bool> = processes
            .iter_mut()
            .map(|con| tick(con, release_after))
            .collect();
        let runs = int(&mut processes[0], &["GET", "runs:daily-report"]);
        if release_after {
            assert_eq!(ran, [true, true, true]);
            assert_eq!(runs, 3, "each late process ran it again");
        } else {
            assert_eq!(ran, [true, false, false]);
            assert_eq!(runs, 1);
        }
    }
}

/// A worker whose lease ran out (it was frozen: a GC pause, a stopped VM) comes back and
/// writes; meanwhile the next holder has written the stock. Broken: a plain write, no
/// fence: the stale worker's value replaces the newer one. Kept: the write carries the
/// fence to the resource: `LOCK.FENCED` refuses it `STALE`, `LOCK.GUARD` refuses it
/// `NOTHELD`, and the newer value stays.
#[test]
fn a_stale_holders_write_lands_without_a_fence_and_is_refused_with_one() {
    let server = Server::start();
    let mut con = server.connect();
    let (lock, mark, stock) = ("lock:{sku:9}", "{sku:9}:mark", "{sku:9}:stock");
    let (frozen, frozen_fence) = hold(&mut con, lock, 200, &["TOKEN", &random_token()]);
    eventually(
        std::time::Duration::from_secs(10),
        "the lease runs out",
        || int(&mut con, &["EXISTS", lock]) == 0,
    );
    let (_, fence) = hold(&mut con, lock, 30_000, &["TOKEN", &random_token()]);
    let fenced_write = |con: &mut Connection, fence: i64, value: &str| {
        cmd("LOCK.FENCED")
            .arg(mark)
            .arg(fence)
            .arg("SET")
            .arg(stock)
            .arg(value)
            .query::<String>(con)
    };
    assert_eq!(fenced_write(&mut con, fence, "500").as_deref(), Ok("OK"));

    let _: () = cmd("SET").arg(stock).arg("918").query(&mut con).unwrap();
    let overwritten: String = cmd("GET").arg(stock).query(&mut con).unwrap();
    assert_eq!(overwritten, "918", "the stale write replaced the newer one");

    assert_eq!(fenced_write(&mut con, fence, "500").as_deref(), Ok("OK"));
    let stale = fenced_write(&mut con, frozen_fence, "918").expect_err("refused");
    assert_eq!(
        (stale.code(), stale.detail()),
        (
            Some("STALE"),
            Some(format!("fence is below the highest admitted ({fence})").as_str())
        )
    );
    let guarded: redis::RedisResult<String> = cmd("LOCK.GUARD")
        .arg(lock)
        .arg(&frozen)
        .arg("SET")
        .arg(stock)
        .arg("918")
        .query(&mut con);
    let not_held = guarded.expect_err("refused");
    assert_eq!(
        (not_held.code(), not_held.detail()),
        (Some("NOTHELD"), Some("this token does not hold the lock"))
    );
    let kept: String = cmd("GET").arg(stock).query(&mut con).unwrap();
    assert_eq!(kept, "500");
}

//! `fencelock.max-holders`: its bounds as a config and as a `loadmodule` argument, the
//! largest `LIMIT` it allows, and the cap it puts on a shared lock without `LIMIT`.

use testkit::resp::{err, RawClient};
use testkit::*;

use super::{acquire_raw, hold, holders, release, Waiter, BAD_LIMIT};

#[test]
fn max_holders_bounds_limits_and_caps_shared_locks() {
    let server = Server::start();
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "10000");
    for value in ["0", "1000001", "-1"] {
        assert_eq!(
            raw.call_str(&["CONFIG", "SET", "fencelock.max-holders", value]),
            err(
                "ERR CONFIG SET failed (possibly related to argument 'fencelock.max-holders') - \
                 argument must be between 1 and 1000000 inclusive"
            ),
            "{value}"
        );
    }
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "10000");
    assert!(raw
        .call_str(&["CONFIG", "SET", "fencelock.max-holders", "1000000"])
        .is_ok());
    assert!(acquire_raw(&mut raw, "big", "1000", &["LIMIT", "1000000"])
        .grant()
        .is_some());
    assert!(raw
        .call_str(&["CONFIG", "SET", "fencelock.max-holders", "3"])
        .is_ok());
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "4"]),
        err(BAD_LIMIT)
    );
    assert!(acquire_raw(&mut raw, "sem", "60000", &["LIMIT", "3"])
        .grant()
        .is_some());
    // A shared lock without LIMIT is capped at max-holders: busy, then served in turn.
    for token in ["r1", "r2", "r3"] {
        hold(&mut con, "rw", 60_000, &["TOKEN", token, "SHARED"]);
    }
    assert_eq!(
        acquire(&mut con, "rw", 60_000, &["TOKEN", "r4", "SHARED"]),
        None
    );
    let mut r4 = Waiter::queue(&server, &mut con, "rw", 60_000, "r4", &["SHARED"]);
    assert_eq!(release(&mut con, "rw", "r2"), 1);
    assert_eq!(r4.granted().0, "r4");
    assert_eq!(holders(&mut con, "rw"), 3);
}

#[test]
fn max_holders_is_a_loadmodule_argument() {
    let server = Server::with_module_args(&[], &["max-holders", "2"]);
    let mut con = server.connect();
    let mut raw = RawClient::connect(server.port);
    assert_eq!(config_get(&mut con, "fencelock.max-holders"), "2");
    assert_eq!(
        acquire_raw(&mut raw, "sem", "1000", &["LIMIT", "3"]),
        err(BAD_LIMIT)
    );
    hold(&mut con, "rw", 60_000, &["SHARED"]);
    hold(&mut con, "rw", 60_000, &["SHARED"]);
    assert_eq!(acquire(&mut con, "rw", 60_000, &["SHARED"]), None);
}

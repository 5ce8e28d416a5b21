//! The lease deadline: counted from the moment the acquire was *sent*, less 1 ms, never
//! from its reply, since the server's lease starts somewhere in between (at the whole
//! millisecond it runs the command in, rounded down).

use testkit::resp::{RawClient, Reply};
use testkit::*;

/// `TIME`'s reply in Unix µs.
fn time_us(reply: &Reply) -> i64 {
    let Reply::Array(Some(parts)) = reply else {
        panic!("TIME: {reply:?}")
    };
    let [seconds, micros] = [&parts[0], &parts[1]].map(|part| {
        let bytes = part.bulk().expect("TIME's parts");
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .expect("a number")
    });
    seconds * 1_000_000 + micros
}

/// The reply of an acquire reaches the client late: here the server, busy with the next
/// command in the pipeline (`DEBUG SLEEP`), writes it after 300 ms, as a busy server, a
/// slow network or a paused client delays it. On the server's clock (`TIME`, the
/// client's stand-in, on the same machine): a deadline counted from the reply is later
/// than the key's expiry, so the client would believe it holds a lock the server has
/// already given to the next in line; counted from the send, it is never later.
#[test]
fn a_deadline_counted_from_the_reply_is_later_than_the_servers_expiry() {
    let server = Server::start();
    let ttl = 5_000;
    let mut client = RawClient::connect(server.port);
    client.send_pipeline(&[
        &["TIME"],
        &["LOCK.ACQUIRE", "lock:report", "5000"],
        &["DEBUG", "SLEEP", "0.3"],
    ]);
    let sent = time_us(&client.read_reply());
    assert!(grant_of(&client.read_reply()).is_some());
    assert!(client.read_reply().is_ok());
    let replied = time_us(&client.call_str(&["TIME"]));

    let expiry = expire_time(&mut server.connect(), "lock:report") * 1_000;
    let ttl = ttl * 1_000;
    assert!(
        sent - 1_000 + ttl <= expiry,
        "counted from the send less 1 ms: {} µs before the expiry",
        expiry - (sent - 1_000 + ttl)
    );
    assert!(
        replied + ttl > expiry,
        "counted from the reply: {} µs past the expiry",
        replied + ttl - expiry
    );
}

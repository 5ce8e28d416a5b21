//! The rules every client keeps ([docs/clients.md](../../../docs/clients.md)), each shown
//! against a real server the broken way (the failure happens) and the kept way (it does
//! not), through the Rust `redis` crate and, where what is sent when must be exact,
//! testkit's raw RESP client. One file per group of rules: [`tokens`] (a random token
//! per acquire, named with `TOKEN`, a same-token re-wait), [`waits`] (a wait's own
//! connection and timeout, refreshes no wait holds up), [`deadline`] (the lease counted
//! from the send), [`replies`] (`DEADLOCK`, `WRONGSESSION`, `MOVED`/`ASK`, `TRYAGAIN`),
//! [`sessions`] (session commands to every primary of a cluster) and [`recipes`] (cron,
//! fences to the resource). This file holds what they share.

mod deadline;
mod recipes;
mod replies;
mod sessions;
mod tokens;
mod waits;

use std::io::Read;

use testkit::resp::RawClient;

/// 128 random bits in hex, as a client makes its token (or session) for each acquire.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut urandom| urandom.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sends one command without reading its reply, as a client does before it waits.
pub(crate) fn send(client: &mut RawClient, argv: &[&str]) {
    let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
    client.send(&argv);
}

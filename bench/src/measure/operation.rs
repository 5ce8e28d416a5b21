//! What the load driver and the recipes it runs agree on: one operation in progress,
//! how its key number is chosen, what a reply means for it, the token a connection
//! uses where the client chooses one, and the tokens a set-up was granted where the
//! server chooses them (`HeldTokens`). Below both, so that the driver (`load`) can run
//! a `Recipe` and a recipe can describe its operations without either importing the
//! other.

use std::sync::{Arc, OnceLock};

/// One operation in progress: its number on its connection (unique there), its key
/// number, the step it is at, which reply of that step comes next (a step may send
/// several commands in one write: `Command::width`), and the token it learnt or chose.
pub struct Op {
    pub id: u64,
    pub key: u64,
    pub step: u8,
    pub part: u8,
    pub token: Vec<u8>,
}

/// What a reply means for its operation.
pub enum Outcome {
    /// Send the next step.
    Next,
    /// The operation completed as intended.
    Done,
    /// The key was taken (random keys can collide): the operation is dropped and
    /// another one started in its place.
    Busy,
    /// Not what the scenario is about to measure (a miss on a hit path, an error).
    Unexpected(String),
}

/// Key numbers of one connection start at `conn * CONN_STRIDE` (see `Keys`).
pub const CONN_STRIDE: u64 = 1_000_000_000;

/// How an operation's key number is chosen.
#[derive(Clone, Copy)]
pub enum Keys {
    /// Never used before: `conn * 10^9 + sequence`.
    Fresh,
    /// `conn * 10^9 + sequence % n`: a fixed set per connection, visited in turn.
    Cycle(u64),
    /// Uniformly random in `0..n`, shared by all connections.
    Random(u64),
}

/// The 22-character token a connection uses where the client chooses the token
/// (`SET NX PX`, `LOCK.ACQUIRE … TOKEN`), like a base64-encoded 128-bit value:
/// `bench-token-` and the connection number in 10 digits. Built without allocating.
pub fn client_token(conn: usize) -> [u8; 22] {
    let mut token = *b"bench-token-0000000000";
    let mut rest = conn;
    for slot in token[12..].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    token
}

/// The tokens a set-up was granted, per connection, by the key's place in that
/// connection's sequence (`key - conn * CONN_STRIDE`), for a timed run that releases
/// or refreshes keys whose token the server chose (the floor module's: it takes no
/// client token). Each connection of the set-up publishes its tokens once, when it has
/// finished; the timed run only reads them (no lock per command). Empty, and never
/// written, for every other recipe.
#[derive(Clone, Debug, Default)]
pub struct HeldTokens(Arc<Vec<OnceLock<Vec<Vec<u8>>>>>);

impl HeldTokens {
    /// Room for the tokens of `connections` connections.
    pub fn new(connections: usize) -> Self {
        Self(Arc::new(
            (0..connections).map(|_| OnceLock::new()).collect(),
        ))
    }

    /// Publishes connection `conn`'s tokens, indexed by key place; `false` if that
    /// connection has no room or has published already.
    pub fn publish(&self, conn: usize, tokens: Vec<Vec<u8>>) -> bool {
        self.0
            .get(conn)
            .is_some_and(|slot| slot.set(tokens).is_ok())
    }

    /// The token connection `conn` holds key number `key` with; empty when there is
    /// none (which the server refuses, so a missing set-up shows as an error).
    pub fn token(&self, conn: usize, key: u64) -> &[u8] {
        let place = usize::try_from(key % CONN_STRIDE).unwrap_or(usize::MAX);
        self.0
            .get(conn)
            .and_then(OnceLock::get)
            .and_then(|tokens| tokens.get(place))
            .map_or(&[], Vec::as_slice)
    }
}

//! What the load driver and the recipes it runs agree on: one operation in progress,
//! how its key number is chosen, what a reply means for it, and the token a
//! connection uses where the client chooses one. Below both, so that the driver
//! (`load`) can run a `Recipe` and a recipe can describe its operations without either
//! importing the other.

/// One operation in progress: its number on its connection (unique there), its key
/// number, the step it is at, and the token it learnt or chose.
pub struct Op {
    pub id: u64,
    pub key: u64,
    pub step: u8,
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

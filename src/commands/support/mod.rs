//! What several commands share and is no command itself: the error replies
//! (`error_replies`: the core's texts handed to Redis), the command a guard or a fence
//! check runs inside (`inner_command`), and a session's holdings on this server
//! (`session_holdings`, for `LOCK.KEEPALIVE`, `LOCK.CLOSE` and `LOCK.HELD`). Below every
//! command file; it never imports one.

pub mod error_replies;
pub mod inner_command;
pub mod session_holdings;

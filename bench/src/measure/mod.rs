//! Measuring: the server under test, the load generator and what it sends, and the
//! five scenarios, each producing its part of the results.

pub mod callgrind;
pub mod contender;
pub mod contention;
pub mod load;
pub mod lua;
pub mod machine;
pub mod memory;
pub mod natives;
pub mod operation;
pub mod profile;
pub mod recipes;
pub mod server;
pub mod throughput;

//! The command layer: one file per command. Each parses argv into a typed request,
//! opens the key, asks the pure core what happens, applies and replicates the effect
//! (`effects`), and replies. Error texts live in `errors`.

pub mod acquire;
pub mod apply;
pub mod args;
pub mod compared_token;
pub mod effects;
pub mod errors;
pub mod fence;
pub mod info;
pub mod refresh;
pub mod release;
pub mod reply;

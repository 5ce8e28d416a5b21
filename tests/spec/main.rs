//! The specification: every command, reply and error as the README states it, waiting
//! and handoff, configs, ACL, and the README's own transcript, against a real
//! `redis-server` per test (`testkit`).

mod acl;
mod blocking;
mod commands;
mod config;
mod errors;
mod eviction;
mod guard;
mod hardening;
mod inner_commands;
mod out_of_memory;
mod readme_transcript;
mod shared;
mod watch;

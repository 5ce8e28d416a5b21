//! The specification: every command, reply and error as the docs state it, waiting
//! and handoff, configs, ACL, against a real `redis-server` per test (`testkit`); and
//! the docs themselves: every redis-cli transcript in them replays, every relative link
//! and anchor resolves.

mod acl;
mod acquire_all;
mod acquire_all_waits;
mod blocking;
mod commands;
mod config;
mod deadlock;
mod docs_links;
mod docs_transcripts;
mod errors;
mod eviction;
mod guard;
mod hardening;
mod inner_commands;
mod lock_delay;
mod mark_moves;
mod observability;
mod observe;
mod once;
mod out_of_memory;
mod same_token;
mod session_index;
mod sessions;
mod shared;
mod watch;

//! The reliability suite's shared machinery: every scenario drives many clients against
//! a real server (`workload`), records each operation with its timestamps (`history`),
//! lets holders touch a fenced resource and an unfenced control (`resource`), injects
//! its faults, then judges the whole history (`checker`, `durability`, both built on
//! what the history proves of each holding: `holding`) and reports the figures
//! (`report`). `scale` picks the short CI or the long soak durations. Session clients
//! (`session`) hold their locks in a session kept alive by a heartbeat; what the history
//! proves they believed, and what the server can have done with their holdings:
//! `belief`. The partition scenario: its machines and links (`topology`), its
//! resource on a real server (`ledger`) and one run (`partitioned`). A cluster whose
//! slots move by atomic slot migration: `slot_moves`. Run-once claims have a history
//! and checks of their own (`once_history`).

pub mod belief;
pub mod checker;
pub mod client;
pub mod durability;
pub mod guarded;
pub mod history;
pub mod holding;
pub mod leadership;
pub mod ledger;
pub mod once_history;
pub mod partitioned;
pub mod report;
pub mod resource;
pub mod scale;
pub mod session;
pub mod slot_moves;
pub mod target;
pub mod topology;
pub mod workload;

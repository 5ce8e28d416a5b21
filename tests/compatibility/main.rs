//! How the module fits the rest of Redis: persistence (RDB, AOF, restarts),
//! replication and promotion, Redis Cluster (with atomic slot migration where the
//! server has it), Redlock across servers, and ACL
//! categories, which differ between the supported servers; and where the grants of
//! several keys at once (`acquire_all`) go; and the rules every client keeps
//! (`client_rules`), shown against real servers.

mod acl_categories;
mod acquire_all;
mod atomic_migration;
mod client_rules;
mod cluster;
mod guard;
mod observability;
mod observe;
mod once;
mod persistence;
mod redlock;
mod replication;
mod sessions;
mod shared;

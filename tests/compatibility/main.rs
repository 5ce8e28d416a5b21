//! How the module fits the rest of Redis: persistence (RDB, AOF, restarts),
//! replication and promotion, Redis Cluster, Redlock across servers, and ACL
//! categories, which differ between the supported servers; and where the grants of
//! several keys at once (`acquire_all`) go.

mod acl_categories;
mod acquire_all;
mod cluster;
mod guard;
mod observe;
mod persistence;
mod redlock;
mod replication;
mod sessions;
mod shared;

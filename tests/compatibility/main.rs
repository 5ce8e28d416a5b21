//! How the module fits the rest of Redis: persistence (RDB, AOF, restarts),
//! replication and promotion, Redis Cluster, Redlock across servers, and ACL
//! categories, which differ between the supported servers.

mod acl_categories;
mod cluster;
mod guard;
mod persistence;
mod redlock;
mod replication;
mod sessions;
mod shared;

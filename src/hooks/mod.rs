//! What the module does when Redis announces something: keyspace events on lock keys
//! (`keyspace`), every command just before it runs (`filter`), and server events such
//! as flushes, loading, role changes, `SWAPDB` and the event loop going to sleep
//! (`server`), slots moving to or from this node in an atomic slot migration
//! (`slot_migration`), and the fields of the module's INFO section (`info_section`, not
//! `LOCK.INFO`, which is a command). The top layer: it uses the blocking code and the keyspace effects.

pub mod filter;
pub mod info_section;
pub mod keyspace;
pub mod server;
pub mod slot_migration;

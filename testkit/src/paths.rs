//! Which server and which module the tests and the benchmark run.
//!
//! `FENCELOCK_REDIS_SERVER` picks the server binary (default `redis-server` on `PATH`),
//! `FENCELOCK_MODULE` the module (default the release build of the workspace).

use std::path::{Path, PathBuf};

pub fn server_binary() -> String {
    std::env::var("FENCELOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

pub fn module_path() -> PathBuf {
    std::env::var_os("FENCELOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/release/libfencelock.so"))
}

/// The workspace root: this crate sits one level below it.
pub fn workspace_root() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent().unwrap_or(kit).to_path_buf()
}

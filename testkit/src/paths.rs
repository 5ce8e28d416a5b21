//! Which server and which module the tests and the benchmark run.
//!
//! `FENCELOCK_REDIS_SERVER` picks the server binary (default `redis-server` on `PATH`),
//! `FENCELOCK_MODULE` the module (default the release build of the workspace, which
//! must be newer than every source it is built from: a stale build is refused rather
//! than silently tested). `FENCELOCK_FLOOR_MODULE` picks the floor module (the
//! benchmark's `bench/floor`, crate `fencelock-floor`), checked the same way.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

pub fn server_binary() -> String {
    std::env::var("FENCELOCK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

pub fn module_path() -> PathBuf {
    if let Some(chosen) = std::env::var_os("FENCELOCK_MODULE") {
        return PathBuf::from(chosen);
    }
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let root = workspace_root();
            let built = root.join("target/release/libfencelock.so");
            let built_at = modified(&built)
                .unwrap_or_else(|| panic!("{} is missing: run make build", built.display()));
            // Sources only: a manifest or lock file also changes for dev-dependencies
            // and package metadata, which cargo rightly does not relink the module for,
            // so comparing against them would refuse an up-to-date build.
            let sources = ["src", "core/src"];
            if let Some(newer) = sources
                .iter()
                .flat_map(|source| files_under(&root.join(source)))
                .find(|file| modified(file).is_some_and(|at| at > built_at))
            {
                panic!(
                    "{} is older than {}: run make build",
                    built.display(),
                    newer.display()
                );
            }
            built
        })
        .clone()
}

/// The floor module (`bench/floor`, the crate `fencelock-floor`): the benchmark loads it
/// beside fencelock, and its own tests load it. `FENCELOCK_FLOOR_MODULE`, else the
/// release build in the workspace's target directory (`CARGO_TARGET_DIR` if set),
/// refused when missing or older than a source under `bench/floor/src`.
pub fn floor_module_path() -> PathBuf {
    if let Some(chosen) = std::env::var_os("FENCELOCK_FLOOR_MODULE") {
        return PathBuf::from(chosen);
    }
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            const BUILD: &str = "run make build (or cargo build --release -p fencelock-floor)";
            let root = workspace_root();
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            let built = target.join("release/libfencelock_floor.so");
            let built_at = modified(&built)
                .unwrap_or_else(|| panic!("{} is missing: {BUILD}", built.display()));
            // Sources only, as for the module above.
            if let Some(newer) = files_under(&root.join("bench/floor/src"))
                .into_iter()
                .find(|file| modified(file).is_some_and(|at| at > built_at))
            {
                panic!(
                    "{} is older than {}: {BUILD}",
                    built.display(),
                    newer.display()
                );
            }
            built
        })
        .clone()
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

/// `path` itself if it is a file, else every file below it.
fn files_under(path: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(path) {
        Err(_) => vec![path.to_path_buf()],
        Ok(entries) => entries
            .flatten()
            .flat_map(|entry| files_under(&entry.path()))
            .collect(),
    }
}

/// The workspace root: this crate sits one level below it.
pub fn workspace_root() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent().unwrap_or(kit).to_path_buf()
}

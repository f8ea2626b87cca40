//! A fresh directory for one SQLite test's database file.

use std::path::PathBuf;

/// Empties (or creates) `ldp-store-{name}-{pid}` under the temporary directory, and returns it with the path of a
/// database file in it, `state.db`. The test removes the directory when it is done.
pub fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ldp-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.db");
    (dir, path)
}

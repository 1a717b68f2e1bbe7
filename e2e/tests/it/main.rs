//! Lakelog as separate processes — the `lakelog` binary's roles on a real etcd and a real S3
//! server (SeaweedFS) — driven black-box through the SDK and the CLI, with processes killed,
//! paused and SIGTERMed. See `e2e/README.md`.

mod cluster;

use std::path::PathBuf;
use std::sync::OnceLock;

/// The `lakelog` binary under test: `LAKELOG_BIN` (the Makefile sets it after building), else
/// the `lakelog` next to this test's target directory (`cargo build --bin lakelog` first).
/// Panics, naming both, when neither exists: every test here needs the binary.
#[allow(clippy::panic)]
fn bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let from_env = std::env::var_os("LAKELOG_BIN").map(PathBuf::from);
        // target/debug/deps/it-<hash> -> target/debug/lakelog
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("lakelog")));
        let found = from_env.clone().or(beside.clone()).filter(|p| p.is_file());
        match found {
            Some(p) => p.display().to_string(),
            None => panic!(
                "the lakelog binary is missing (LAKELOG_BIN={from_env:?}, {beside:?}): run \
                 `cargo build --bin lakelog` first, or `make test`"
            ),
        }
    })
}

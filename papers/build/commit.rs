//! The commit the reproduction is built from, so that every result it writes names the
//! code that produced it (HEAD may move while a long reproduction runs).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Sets `XTASK_BUILD_COMMIT` (`<short hash>[-dirty]`), rebuilt when HEAD, the index or the
/// sources move.
pub fn record() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=XTASK_BUILD_COMMIT={commit}{suffix}");
    for path in [
        "../.git/HEAD",
        "../.git/index",
        "../.git/refs",
        "src",
        "../crates",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}

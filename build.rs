//! The commit the binary is built from, for `iuid_router_build_info{commit}`
//! (docs/metrics.md): `git rev-parse --short=12 HEAD` when the source is a git checkout,
//! else `IUID_ROUTER_COMMIT` from the environment (a build from a tarball), else `unknown`.

use std::process::Command;

fn main() {
    let from_git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    let commit = from_git
        .or_else(|| std::env::var("IUID_ROUTER_COMMIT").ok())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=IUID_ROUTER_COMMIT={commit}");
    // A new commit moves a ref; nothing else changes what this prints.
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    println!("cargo:rerun-if-env-changed=IUID_ROUTER_COMMIT");
}

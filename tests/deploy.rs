//! The router config and routing table each Kubernetes overlay ships (`deploy/kubernetes/`)
//! pass `iuid-router check`, with the Secrets' files (`/etc/iuid-router/...`) stood in for by
//! throwaway ones. (`deploy/kubernetes/validate.sh` validates the rendered objects.)

mod common;

use std::path::Path;

#[test]
fn every_overlay_config_and_table_pass_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("overlays"))
        .expect("overlays")
        .map(|e| e.expect("entry").path())
        .collect();
    dirs.push(root.join("base"));
    dirs.sort();
    assert!(dirs.len() >= 4, "base and three regions: {dirs:?}");
    for dir in dirs {
        let work = tempfile::tempdir().expect("tempdir");
        let etc = work.path().join("etc");
        // The Secrets' files: the mesh certificate (tls.crt, tls.key, ca.crt), the admin token.
        let certs = work.path().join("certs");
        common::make_certs(&certs, false, &["edge"]);
        std::fs::create_dir_all(etc.join("tls")).expect("tls dir");
        std::fs::create_dir_all(etc.join("admin")).expect("admin dir");
        for (from, to) in [
            ("edge.pem", "tls.crt"),
            ("edge-key.pem", "tls.key"),
            ("ca.pem", "ca.crt"),
        ] {
            std::fs::copy(certs.join(from), etc.join("tls").join(to)).expect("copy");
        }
        std::fs::write(
            etc.join("admin/token"),
            "t0ken-of-32-characters-for-check\n",
        )
        .expect("token");
        let config_dir = etc.join("config");
        std::fs::create_dir_all(&config_dir).expect("config dir");
        let prefix = format!("{}/", etc.display());
        for file in ["router.yaml", "routing-table.yaml"] {
            let text = std::fs::read_to_string(dir.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
            std::fs::write(
                config_dir.join(file),
                text.replace("/etc/iuid-router/", &prefix),
            )
            .expect("write");
        }
        let checked = common::check(&config_dir.join("router.yaml"));
        assert_eq!(
            checked.code,
            Some(0),
            "{}: {}",
            dir.display(),
            checked.output
        );
    }
}

/// `deploy/systemd/`'s units pass `systemd-analyze verify` without a warning (an unknown
/// key is only a warning there), with the binary path pointed at the built binary; and
/// the commands they run are ones the binary takes (clap's usage errors exit 2, a missing
/// config exits 1).
#[test]
#[ignore = "needs systemd-analyze (the systemd package); .ci/run installs it and runs ignored tests"]
fn the_systemd_units_verify_and_name_real_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd");
    let work = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_iuid-router");
    let mut commands = Vec::new();
    for unit in ["iuid-router.service", "iuid-router.socket"] {
        let text = std::fs::read_to_string(root.join(unit)).expect("unit");
        for line in text.lines() {
            if let Some(command) = line
                .strip_prefix("ExecStart=")
                .or_else(|| line.strip_prefix("ExecReload="))
            {
                commands.push(command.to_owned());
            }
        }
        std::fs::write(
            work.path().join(unit),
            text.replace("/usr/local/bin/iuid-router", bin),
        )
        .expect("write");
    }
    assert_eq!(commands.len(), 2, "ExecStart and ExecReload: {commands:?}");
    let out = std::process::Command::new("timeout")
        .args(["60", "systemd-analyze", "verify", "--man=no"])
        .arg(work.path().join("iuid-router.socket"))
        .arg(work.path().join("iuid-router.service"))
        .output()
        .expect("systemd-analyze (the systemd package)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("iuid-router"))
        .collect();
    assert!(ours.is_empty(), "systemd-analyze warns: {ours:?}");
    for command in commands {
        let mut words = command.split_whitespace();
        assert_eq!(words.next(), Some("/usr/local/bin/iuid-router"));
        let args: Vec<String> = words
            .map(|w| w.replace("/etc/iuid-router/", &format!("{}/", work.path().display())))
            .collect();
        let out = std::process::Command::new("timeout")
            .arg("20")
            .arg(bin)
            .args(&args)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(stderr.contains("router.yaml"), "{command}: {stderr}");
    }
}

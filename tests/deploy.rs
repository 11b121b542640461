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

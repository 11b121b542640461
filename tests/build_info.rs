//! `iuid_router_build_info{version,commit}` (docs/metrics.md): the router says which build it
//! runs, the commit being the checkout's own (`git rev-parse --short=12 HEAD`).

mod common;

use common::{lettered_table, metric_sum, metrics_text, orders_config, Router, Upstream};

#[tokio::test]
async fn build_info_names_the_version_and_the_commit() {
    let up = Upstream::start("a").await;
    let router = Router::start(
        &orders_config().yaml(),
        &lettered_table("b", &[&[up.url()]]),
    )
    .await;
    let text = metrics_text(router.admin).await;
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let commit = format!("commit=\"{commit}\"");
    assert_eq!(
        metric_sum(&text, "iuid_router_build_info", &[&version, &commit]),
        1.0,
        "{text}"
    );
}

//! The support console (docs/admin.md) in a real browser: headless Chromium driven through
//! chromedriver (WebDriver), against the real router on loopback.
//!
//! Needs `chromium` and `chromium-driver` (Debian; `.ci/run` installs them);
//! `IUID_ROUTER_CHROMEDRIVER` names another driver binary. Every test saves a screenshot
//! under `target/console-screenshots/` (kept by CI as an artifact, never committed). The
//! tests take turns: one Chromium at a time on a small machine.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{client, free_port, url, ConfigYaml, Router, Upstream};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

const TOKEN: &str = "console-test-token-of-32-chars-xx";

/// One browser at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Chromium under chromedriver; the driver is killed on drop.
struct Browser {
    client: Client,
    driver: Child,
}

impl Browser {
    async fn start() -> Browser {
        let bin =
            std::env::var("IUID_ROUTER_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let port = free_port().port();
        let driver = Command::new(&bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{bin}: {e}: install chromium and chromium-driver (as .ci/run does)")
            });
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
        ];
        if std::env::var_os("CI").is_some() {
            args.push("--disable-software-rasterizer");
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "args": args }),
        );
        let webdriver = format!("http://127.0.0.1:{port}");
        let mut last = String::new();
        for _ in 0..100 {
            match ClientBuilder::new(HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&webdriver)
                .await
            {
                Ok(client) => return Browser { client, driver },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no browser session from {bin}: {last}");
    }

    /// Saves the page as `target/console-screenshots/NAME.png`.
    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// The text of the first element matching `css`, or "" if there is none yet.
    async fn text(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Waits up to 10 s for `css` to have text containing `want`; panics with what it had.
    async fn wait_text(&self, css: &str, want: &str) -> String {
        let mut seen = String::new();
        for _ in 0..200 {
            seen = self.text(css).await;
            if seen.contains(want) {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{css}: wanted {want:?}, saw {seen:?}");
    }

    async fn displayed(&self, css: &str) -> bool {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.is_displayed().await.unwrap_or(false),
            Err(_) => false,
        }
    }

    async fn wait_displayed(&self, css: &str) {
        for _ in 0..200 {
            if self.displayed(css).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{css} never showed");
    }

    /// Types `text` into the input `css` (cleared first) and submits its form.
    async fn submit(&self, css: &str, text: &str) {
        let input = self.client.find(Locator::Css(css)).await.expect("input");
        input.clear().await.expect("clear");
        input.send_keys(text).await.expect("type");
        input.send_keys("\u{E007}").await.expect("enter"); // WebDriver's Enter key
    }

    async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A router over regions a, b, c (countries 1, 2, 3): a and c live upstreams, b's dead
/// (one failure ejects it for a minute). With `token`, the admin API needs it.
async fn router(token: bool) -> (Router, Upstream, Upstream) {
    let (a, c) = (Upstream::start("a").await, Upstream::start("c").await);
    let dir = tempfile::tempdir().expect("tempdir");
    let table = common::lettered_table(
        "console-test",
        &[&[a.url()], &[url(free_port())], &[c.url()]],
    );
    common::write(&dir, "routing-table.yaml", &table);
    let mut config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra("health: { eject_after: 1, ejection_ms: 60000 }");
    if token {
        common::write(&dir, "admin-token", TOKEN);
        config = config.extra("admin: { token_file: admin-token }");
    }
    (Router::start_in(dir, &config.yaml()).await, a, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn the_page_asks_for_the_token_once_and_keeps_it_in_an_http_only_cookie() {
    let _turn = TURN.lock().await;
    let (router, _a, _c) = router(true).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#login").await;
    assert!(!b.displayed("#console").await, "no data before the token");

    b.submit("#token", "a wrong guess").await;
    b.wait_text("#login-error", "Wrong token").await;
    b.submit("#token", TOKEN).await;
    b.wait_displayed("#console").await;
    b.wait_text("#version", "table console-test").await;
    b.wait_text("#upstreams", "healthy").await;

    // The session survives a reload of the page without asking again.
    b.client.refresh().await.expect("refresh");
    b.wait_displayed("#console").await;
    assert!(!b.displayed("#login").await);

    // The browser holds the cookie with the flags, and page scripts cannot read it.
    let cookies = b.client.get_all_cookies().await.expect("cookies");
    let session = cookies
        .iter()
        .find(|c| c.name() == "iuid_router_admin")
        .expect("session cookie");
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(format!("{:?}", session.same_site()), "Some(Strict)");
    let visible = b
        .client
        .execute("return document.cookie", vec![])
        .await
        .expect("script");
    assert!(
        !visible.as_str().unwrap_or("").contains("iuid_router_admin"),
        "{visible}"
    );
    b.shot("login").await;

    // Logging out drops the cookie: the page asks again.
    b.client
        .find(Locator::Css("#logout"))
        .await
        .expect("logout")
        .click()
        .await
        .expect("click");
    b.wait_displayed("#login").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn an_id_of_each_region_shows_its_owner_and_creation_time() {
    let _turn = TURN.lock().await;
    let (router, a, c) = router(false).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    let day = 86_400_000;
    for (country, region, age_days, upstream) in [
        (1u8, "a", 3, Some(&a)),
        (2, "b", 40, None),
        (3, "c", 400, Some(&c)),
    ] {
        let minted = now_ms() - age_days * day;
        let id = common::iuid(minted, country, 1, 99);
        b.submit("#id", &id).await;
        let card = "#readings .reading[data-scheme=\"iuid\"]";
        let owner = b.wait_text(&format!("{card} .owner"), region).await;
        assert_eq!(owner, region);
        let created = b
            .wait_text(
                &format!("{card} .created"),
                &iuid_router::table::rfc3339_ms(minted),
            )
            .await;
        assert!(created.contains("ago"), "relative time: {created}");
        let canonical = b.text(&format!("{card} .kv")).await;
        assert!(canonical.contains(&id), "{canonical}");
        if let Some(up) = upstream {
            let authority = up.url().trim_start_matches("http://").to_owned();
            b.wait_text(&format!("{card} ul"), &authority).await;
        }
        // The URL names the id, so a link to this view can be shared.
        let at = b.client.current_url().await.expect("url");
        assert!(at.fragment().unwrap_or("").contains(&id), "{at}");
        b.shot(&format!("id-of-region-{region}")).await;
    }
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn an_invalid_id_shows_why() {
    let _turn = TURN.lock().await;
    let (router, _a, _c) = router(false).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    let bad = "01a20a43-e7ee-8001-8056-067ff3c503fZ";
    b.submit("#id", bad).await;
    b.wait_displayed("#no-scheme").await;
    // The reason is the API's own, shown as is.
    let api: serde_json::Value = client()
        .get(router.admin_url(&format!("/admin/decode/{bad}")))
        .send()
        .await
        .expect("decode")
        .json()
        .await
        .expect("json");
    let why = api["readings"][0]["error"]
        .as_str()
        .expect("error")
        .to_owned();
    assert!(!why.is_empty());
    let shown = b
        .wait_text(".reading-invalid[data-scheme=\"iuid\"] .reason", &why)
        .await;
    assert_eq!(shown, why);
    b.shot("invalid-id").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn an_ejected_upstream_shows_as_ejected_without_reloading_the_page() {
    let _turn = TURN.lock().await;
    let (router, _a, _c) = router(false).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    b.wait_text("tr[data-region=\"b\"]", "healthy").await;
    b.client
        .execute("window.sameDocument = true", vec![])
        .await
        .expect("mark");

    // One failed request ejects b's only upstream.
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", common::iuid_for(2))))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 502);

    let row = b.wait_text("tr[data-region=\"b\"]", "ejected").await;
    assert!(row.contains("until") && row.contains("UTC"), "{row}");
    let rates = b.wait_text("#rates tr[data-region=\"b\"]", "100.0 %").await;
    assert!(
        rates.starts_with("b 1"),
        "one request, answered 5xx: {rates}"
    );
    let same = b
        .client
        .execute("return window.sameDocument === true", vec![])
        .await
        .expect("script");
    assert_eq!(same, serde_json::Value::Bool(true), "refreshed in place");
    b.shot("ejected-upstream").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn the_rate_limits_panel_shows_each_rule_its_refusals_and_the_key_refused_most() {
    let _turn = TURN.lock().await;
    let a = Upstream::start("a").await;
    let table = common::lettered_table("console-limits", &[&[a.url()]]);
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .watch(false)
        .extra("rate_limits:\n  - { name: api-key, key: { header: x-api-key }, rate: 1/min }\n");
    let router = Router::start(&config.yaml(), &table).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    b.wait_text("#limits-store", "memory").await;
    for _ in 0..3 {
        client()
            .get(router.url(&format!("/v1/orders/{}", common::iuid_for(1))))
            .header("x-api-key", "noisy-client")
            .send()
            .await
            .expect("request");
    }
    let row = b
        .wait_text("#limits tr[data-rule=\"api-key\"]", "noisy-client")
        .await;
    assert!(
        row.contains("header:x-api-key") && row.contains("1/min"),
        "{row}"
    );
    assert!(row.contains("× 2"), "two refusals of the key: {row}");
    b.shot("rate-limits").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn the_moves_panel_shows_each_move_its_phase_and_mirror_outcomes() {
    let _turn = TURN.lock().await;
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    // Country 1 moves from ap to us; every read of it is copied.
    let table = common::three_regions("console-moves", &eu.url(), &us.url(), &ap.url())
        + "moves:\n  - { name: ap-to-us, match: { country: 1 }, from: ap, to: us, \
           phase: mirror, mirror_ratio: 1.0 }\n";
    let config = ConfigYaml::new().route_path("/v1/orders/{id}").watch(false);
    let router = Router::start(&config.yaml(), &table).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    b.wait_displayed("#moves-section").await;
    for _ in 0..3 {
        let resp = client()
            .get(router.url(&format!("/v1/orders/{}", common::iuid_for(1))))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 200);
    }
    let row = b
        .wait_text(
            "#moves tr[data-move=\"ap-to-us\"] .mirrored",
            "3 / 0 / 0 / 0",
        )
        .await;
    assert_eq!(row, "3 / 0 / 0 / 0", "three copies, each answered alike");
    let row = b.text("#moves tr[data-move=\"ap-to-us\"]").await;
    assert!(
        row.contains("ap → us") && row.contains("mirror") && row.contains("UTC"),
        "{row}"
    );
    b.shot("moves").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn the_moves_panel_is_hidden_without_a_move() {
    let _turn = TURN.lock().await;
    let (router, _a, _c) = router(false).await;
    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    b.wait_text("#upstreams", "healthy").await;
    assert!(!b.displayed("#moves-section").await, "no moves: no panel");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver: bash .ci/run installs them and runs it"]
async fn the_regions_panel_shows_a_dark_regions_health_share_and_its_reads_failing_over() {
    let _turn = TURN.lock().await;
    // b's two upstreams are down (nothing listens: their checks fail) and b fails over to a.
    let a = Upstream::start("a").await;
    let table = format!(
        "version: console-failover\nregions:\n  a: {{ upstreams: [\"{}\"] }}\n  \
         b: {{ upstreams: [\"{}\", \"{}\"], failover: {{ region: a }} }}\n\
         countries:\n  1: a\n  2: b\ndefault_region: a\n",
        a.url(),
        url(free_port()),
        url(free_port())
    );
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra("health_check: { path: /healthz, interval_ms: 100, timeout_ms: 500 }");
    let router = Router::start(&config.yaml(), &table).await;
    let dark = common::eventually(Duration::from_secs(10), || async {
        let report = common::get_json(&router.admin_url("/admin/regions")).await;
        report["regions"][1]["health_share"] == 0.0
    })
    .await;
    assert!(dark.is_some(), "b's upstreams never failed their checks");
    // What the panel will say is what the data path does: b's reads are a's, marked.
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", common::iuid_for(2))))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-upstream"], "a");
    assert_eq!(resp.headers()["x-iuid-failover"], "b");

    let b = Browser::start().await;
    b.client.goto(&router.admin_url("/")).await.expect("goto");
    b.wait_displayed("#console").await;
    let row = b
        .wait_text("#regions tr[data-region=\"b\"]", "100 % to a")
        .await;
    let cell = |n: usize| format!("#regions tr[data-region=\"b\"] td:nth-child({n})");
    assert_eq!(b.text(&cell(2)).await, "0 %", "b's health share: {row}");
    assert_eq!(b.text(&cell(3)).await, "0 / 2", "in rotation: {row}");
    assert_eq!(b.text(&cell(4)).await, "a reads", "its failover: {row}");
    assert_eq!(b.text(&cell(5)).await, "100 % to a", "{row}");
    let share = b
        .client
        .find(Locator::Css("#regions tr[data-region=\"b\"]"))
        .await
        .expect("row")
        .attr("data-share")
        .await
        .expect("attribute");
    assert_eq!(share.as_deref(), Some("0"));
    // a is whole and has no failover.
    let a_row = b.text("#regions tr[data-region=\"a\"]").await;
    let a_cell = |n: usize| format!("#regions tr[data-region=\"a\"] td:nth-child({n})");
    assert_eq!(b.text(&a_cell(2)).await, "100 %", "{a_row}");
    assert_eq!(b.text(&a_cell(3)).await, "1 / 1", "{a_row}");
    assert_eq!(b.text(&a_cell(4)).await, "none", "{a_row}");
    assert_eq!(b.text(&a_cell(5)).await, "—", "{a_row}");
    b.shot("regions-failover").await;
    b.close().await;
}

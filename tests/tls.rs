//! HTTPS on the listener (docs/tls-h2-grpc.md) with real clients: a rustls client that reports what was
//! negotiated (version, ALPN, the certificate served), and curl for whole requests. The
//! certificates come from the shipped `config/make-certs.sh` (openssl).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{iuid_for, ConfigYaml, Router, Upstream};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs curl with `args` off the runtime (the router runs on it): its stdout and stderr.
async fn curl(args: Vec<String>) -> (String, String) {
    let out = tokio::task::spawn_blocking(move || Command::new("curl").args(&args).output())
        .await
        .expect("join")
        .expect("run curl");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn leaf(path: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(path)
        .expect("pem")
        .next()
        .expect("a certificate")
        .expect("der")
        .as_ref()
        .to_vec()
}

/// What a handshake negotiated.
#[derive(Debug)]
struct Handshake {
    version: rustls::ProtocolVersion,
    alpn: Option<Vec<u8>>,
    leaf: Vec<u8>,
}

/// A TLS handshake with the router as a client trusting `ca`, offering `versions` and `alpn`,
/// sending `sni` as the server name (an IP sends none).
async fn handshake(
    addr: std::net::SocketAddr,
    ca: &Path,
    sni: &str,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Result<Handshake, std::io::Error> {
    let connector = common::tls_connector(ca, versions, alpn);
    let stream = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(sni.to_owned()).expect("server name");
    let tls = connector.connect(name, stream).await?;
    let (_, conn) = tls.get_ref();
    Ok(Handshake {
        version: conn.protocol_version().expect("version"),
        alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        leaf: conn.peer_certificates().expect("certs")[0]
            .as_ref()
            .to_vec(),
    })
}

const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A router over one upstream with HTTPS on its listener: `localhost` the default certificate,
/// `api.example.com` by SNI.
async fn tls_router(
    min_version: &str,
    header_timeout_ms: u64,
) -> (Router, Upstream, tempfile::TempDir) {
    let upstream = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    common::make_certs(
        &dir.path().join("certs"),
        false,
        &["localhost", "api.example.com"],
    );
    let table = common::lettered_table("tls", &[&[upstream.url()]]);
    common::write(&dir, "routing-table.yaml", &table);
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .debounce_ms(100)
        .limits(&format!("header_read_timeout_ms: {header_timeout_ms}"))
        .extra(&format!(
            "tls:\n  certificates:\n    - {{ cert: certs/localhost.pem, key: certs/localhost-key.pem }}\n    - {{ cert: certs/api.example.com.pem, key: certs/api.example.com-key.pem, server_names: [api.example.com] }}\n  min_version: \"{min_version}\"\n"
        ))
        .yaml();
    // The router's files go to their own directory; the certificates stay in `dir`, which the
    // config names by absolute path.
    let certs = dir.path().join("certs");
    let config = config.replace("certs/", &format!("{}/", certs.display()));
    let router_dir = tempfile::tempdir().expect("tempdir");
    common::write(&router_dir, "routing-table.yaml", &table);
    let router = Router::start_in(router_dir, &config).await;
    (router, upstream, dir)
}

#[tokio::test]
async fn versions_alpn_and_sni_choose_what_a_client_gets() {
    let (router, _up, dir) = tls_router("1.2", 10_000).await;
    let certs = dir.path().join("certs");
    let ca = certs.join("ca.pem");
    let (default, api) = (
        leaf(&certs.join("localhost.pem")),
        leaf(&certs.join("api.example.com.pem")),
    );

    let h = handshake(
        router.addr,
        &ca,
        "localhost",
        &[&rustls::version::TLS12],
        &[b"http/1.1"],
    )
    .await
    .expect("TLS 1.2");
    assert_eq!(h.version, rustls::ProtocolVersion::TLSv1_2);
    assert_eq!(h.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_eq!(h.leaf, default);

    let h = handshake(
        router.addr,
        &ca,
        "localhost",
        &[&rustls::version::TLS13],
        &[b"h2", b"http/1.1"],
    )
    .await
    .expect("TLS 1.3");
    assert_eq!(h.version, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(h.alpn.as_deref(), Some(&b"h2"[..]), "h2 preferred");

    let h = handshake(router.addr, &ca, "api.example.com", BOTH, &[])
        .await
        .expect("SNI");
    assert_eq!(h.leaf, api, "SNI picks the named certificate");
    assert_eq!(h.alpn, None);
    // An IP literal sends no SNI: the default (whose SAN has IP:127.0.0.1).
    let h = handshake(router.addr, &ca, "127.0.0.1", BOTH, &[])
        .await
        .expect("no SNI");
    assert_eq!(h.leaf, default);
}

#[tokio::test]
async fn curl_speaks_h2_and_http1_over_tls_and_the_upstream_sees_https() {
    let (router, up, dir) = tls_router("1.2", 10_000).await;
    let ca = dir.path().join("certs/ca.pem");
    let port = router.addr.port();
    let url = format!("https://localhost:{port}/v1/orders/{}", iuid_for(1));
    for (flag, want) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let args = [
            "-sS".to_owned(),
            "--max-time".into(),
            "10".into(),
            flag.into(),
            "--cacert".into(),
            ca.display().to_string(),
            "--resolve".into(),
            format!("localhost:{port}:127.0.0.1"),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code} %{http_version}".into(),
            url.clone(),
        ];
        let (out, err) = curl(args.to_vec()).await;
        assert_eq!(out, format!("200 {want}"), "{err}");
        let got = up.last();
        assert_eq!(got.headers["x-forwarded-proto"], "https");
        let forwarded = got.headers["forwarded"].to_str().expect("ascii");
        assert!(forwarded.ends_with(";proto=https"), "{forwarded}");
    }
}

#[tokio::test]
async fn min_version_13_refuses_a_tls12_client() {
    let (router, _up, dir) = tls_router("1.3", 10_000).await;
    let ca = dir.path().join("certs/ca.pem");
    let refused = handshake(
        router.addr,
        &ca,
        "localhost",
        &[&rustls::version::TLS12],
        &[],
    )
    .await;
    assert!(refused.is_err());
    let ok = handshake(router.addr, &ca, "localhost", BOTH, &[])
        .await
        .expect("1.3");
    assert_eq!(ok.version, rustls::ProtocolVersion::TLSv1_3);
}

#[tokio::test]
async fn a_changed_certificate_is_served_and_a_broken_one_is_not() {
    let (router, _up, dir) = tls_router("1.2", 10_000).await;
    let certs = dir.path().join("certs");
    let ca = certs.join("ca.pem");
    // A new certificate for localhost, from the same CA, written over the one in use (as a
    // renewal would).
    let renewed = dir.path().join("renewed");
    std::fs::create_dir_all(&renewed).expect("dir");
    std::fs::copy(&ca, renewed.join("ca.pem")).expect("ca");
    std::fs::copy(certs.join("ca-key.pem"), renewed.join("ca-key.pem")).expect("ca key");
    common::make_certs(&renewed, false, &["localhost"]);
    let new_leaf = leaf(&renewed.join("localhost.pem"));
    let started = Instant::now();
    std::fs::copy(
        renewed.join("localhost-key.pem"),
        certs.join("localhost-key.pem"),
    )
    .expect("key");
    std::fs::copy(renewed.join("localhost.pem"), certs.join("localhost.pem")).expect("cert");
    let seen = common::eventually(Duration::from_secs(2), || async {
        handshake(router.addr, &ca, "localhost", BOTH, &[])
            .await
            .is_ok_and(|h| h.leaf == new_leaf)
    })
    .await;
    assert!(
        seen.is_some(),
        "the renewed certificate is served within 2 s"
    );
    println!("renewed certificate served after {:?}", started.elapsed());

    // A broken file: the certificate in use stays, and the failure is reported.
    std::fs::write(
        certs.join("localhost.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .expect("write");
    let reported = common::eventually(Duration::from_secs(3), || async {
        let status: serde_json::Value = reqwest::get(router.admin_url("/admin/tls"))
            .await
            .expect("admin")
            .json()
            .await
            .expect("json");
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("localhost.pem"))
    })
    .await;
    assert!(reported.is_some(), "the broken file is reported");
    let h = handshake(router.addr, &ca, "localhost", BOTH, &[])
        .await
        .expect("still served");
    assert_eq!(h.leaf, new_leaf);

    // Well-formed PEM around a certificate that does not parse: the certificate file is
    // named, not the key file beside it.
    let tls_error = || async {
        let status: serde_json::Value = reqwest::get(router.admin_url("/admin/tls"))
            .await
            .expect("admin")
            .json()
            .await
            .expect("json");
        status["last_error"].as_str().unwrap_or_default().to_owned()
    };
    let before = tls_error().await;
    std::fs::write(
        certs.join("localhost.pem"),
        "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let changed = common::eventually(Duration::from_secs(3), || async {
        tls_error().await != before
    })
    .await;
    let last = tls_error().await;
    assert!(changed.is_some(), "the new failure is reported: {last}");
    assert!(last.contains("localhost.pem: "), "{last}");
    assert!(!last.contains("localhost-key.pem"), "{last}");
    let metrics = router.metrics().await;
    assert!(
        metrics.contains("iuid_router_tls_reloads_total{result=\"failure\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_stalled_handshake_is_cut_at_the_header_read_timeout() {
    let (router, _up, _dir) = tls_router("1.2", 500).await;
    let mut stream = TcpStream::connect(router.addr).await.expect("connect");
    // Half a ClientHello's record header, then nothing.
    stream.write_all(&[0x16, 0x03]).await.expect("write");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
    let took = started.elapsed();
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_plain_listener_takes_h2c_with_prior_knowledge() {
    let up = Upstream::start("eu").await;
    let table = common::lettered_table("h2c", &[&[up.url()]]);
    let router = Router::start(
        &ConfigYaml::new()
            .route_path("/v1/orders/{id}")
            .watch(false)
            .yaml(),
        &table,
    )
    .await;
    let args = [
        "-sS".to_owned(),
        "--max-time".into(),
        "10".into(),
        "--http2-prior-knowledge".into(),
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_code} %{http_version}".into(),
        router.url(&format!("/v1/orders/{}", iuid_for(1))),
    ];
    let (out, err) = curl(args.to_vec()).await;
    assert_eq!(out, "200 2", "{err}");
    assert_eq!(up.last().headers["x-forwarded-proto"], "http");
    assert_eq!(up.last().headers["via"], "2 edge");
}

/// `tls.client_auth` with `required: false`: a client without a certificate is let in, one
/// with a certificate of the configured CA too, one with another CA's certificate is refused
/// in the handshake. (`required: true`, the default, is the mesh test's.) A CA file that
/// does not load is a config error at its key.
#[tokio::test]
async fn optional_client_auth_admits_the_anonymous_and_refuses_a_foreign_certificate() {
    let upstream = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    common::make_certs(&certs, true, &["peer"]);
    let foreign = dir.path().join("foreign");
    common::make_certs(&foreign, false, &["peer"]); // another CA, same name
    let table = common::lettered_table("mtls", &[&[upstream.url()]]);
    let tls = |ca: &str| {
        format!(
            "tls:\n  certificates: [ {{ cert: {c}/localhost.pem, key: {c}/localhost-key.pem }} ]\n  client_auth: {{ ca: {ca}, required: false }}\n",
            c = certs.display()
        )
    };
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .watch(false)
        .extra(&tls(&certs.join("ca.pem").display().to_string()))
        .yaml();
    let router_dir = tempfile::tempdir().expect("tempdir");
    common::write(&router_dir, "routing-table.yaml", &table);
    let router = Router::start_in(router_dir, &config).await;
    let port = router.addr.port();
    let get = |extra: Vec<String>| {
        let mut args = vec![
            "-sS".to_owned(),
            "--max-time".into(),
            "10".into(),
            "--cacert".into(),
            certs.join("ca.pem").display().to_string(),
            "--resolve".into(),
            format!("localhost:{port}:127.0.0.1"),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
        ];
        args.extend(extra);
        args.push(format!(
            "https://localhost:{port}/v1/orders/{}",
            iuid_for(1)
        ));
        curl(args)
    };
    let cert = |dir: &Path| {
        vec![
            "--cert".to_owned(),
            dir.join("peer.pem").display().to_string(),
            "--key".into(),
            dir.join("peer-key.pem").display().to_string(),
        ]
    };
    assert_eq!(get(vec![]).await.0, "200", "no certificate: let in");
    assert_eq!(get(cert(&certs)).await.0, "200", "the CA's certificate");
    // Without `forward_client_cert: set` the upstream is told nothing of the certificate,
    // and a client cannot tell it either.
    let mut forged = cert(&certs);
    forged.extend([
        "-H".to_owned(),
        "X-Forwarded-Client-Cert: Hash=00".to_owned(),
    ]);
    assert_eq!(get(forged).await.0, "200");
    let got = upstream.last();
    assert!(
        !got.headers.contains_key("x-forwarded-client-cert"),
        "{:?}",
        got.headers
    );
    let (code, err) = get(cert(&foreign)).await;
    assert_ne!(code, "200", "another CA's certificate is refused: {err}");

    // A CA file that does not load: `check` names the key, file:line:column.
    let bad_dir = tempfile::tempdir().expect("tempdir");
    common::write(&bad_dir, "routing-table.yaml", &table);
    let bad = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .extra(&tls("missing-ca.pem"))
        .yaml();
    let path = common::write(&bad_dir, "router.yaml", &bad);
    let checked = common::check(&path);
    assert_eq!(checked.code, Some(1));
    let err = checked.output;
    assert!(
        err.contains("router.yaml:") && err.contains("missing-ca.pem"),
        "{err}"
    );
}

/// A rotated client CA (`tls.client_auth.ca`, as cert-manager rewrites `ca.crt`) is used from
/// the next handshake without a restart; a broken one is reported and the one in use kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_ca_takes_effect_without_a_restart() {
    let upstream = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    common::make_certs(&old, false, &["localhost"]);
    common::make_certs(&old, true, &["peer"]);
    common::make_certs(&new, true, &["peer"]);
    let client_ca = dir.path().join("client-ca").join("ca.pem");
    std::fs::create_dir_all(client_ca.parent().expect("dir")).expect("dir");
    std::fs::copy(old.join("ca.pem"), &client_ca).expect("ca");
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .debounce_ms(100)
        .extra(&format!(
            "tls:\n  certificates: [ {{ cert: {o}/localhost.pem, key: {o}/localhost-key.pem }} ]\n  client_auth: {{ ca: {ca} }}\n",
            o = old.display(),
            ca = client_ca.display()
        ))
        .yaml();
    let router_dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &router_dir,
        "routing-table.yaml",
        &common::lettered_table("ca", &[&[upstream.url()]]),
    );
    let router = Router::start_in(router_dir, &config).await;
    let port = router.addr.port();
    let server_ca = old.join("ca.pem");
    let with = |certs: &Path| {
        curl(vec![
            "-sS".to_owned(),
            "--max-time".into(),
            "10".into(),
            "--cacert".into(),
            server_ca.display().to_string(),
            "--cert".into(),
            certs.join("peer.pem").display().to_string(),
            "--key".into(),
            certs.join("peer-key.pem").display().to_string(),
            "--resolve".into(),
            format!("localhost:{port}:127.0.0.1"),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
            format!("https://localhost:{port}/v1/orders/{}", iuid_for(1)),
        ])
    };
    let tls_status = || async {
        reqwest::get(router.admin_url("/admin/tls"))
            .await
            .expect("admin")
            .json::<serde_json::Value>()
            .await
            .expect("json")
    };
    assert_eq!(with(&old).await.0, "200");
    assert_ne!(with(&new).await.0, "200", "the new CA is not trusted yet");
    let before = tls_status().await;
    assert_eq!(before["client_auth"]["required"], true);

    // The rotation: the new CA written aside and renamed over the file in use.
    let tmp = client_ca.with_extension("tmp");
    std::fs::copy(new.join("ca.pem"), &tmp).expect("copy");
    std::fs::rename(&tmp, &client_ca).expect("rename");
    let rotated = common::eventually(Duration::from_secs(5), || async {
        with(&new).await.0 == "200"
    })
    .await;
    assert!(rotated.is_some(), "the new CA's client is let in");
    assert_ne!(with(&old).await.0, "200", "the old CA's client is not");
    let after = tls_status().await;
    assert_ne!(
        after["client_auth"]["sha256"], before["client_auth"]["sha256"],
        "{after}"
    );

    // A broken CA file: reported, and the CA in use kept.
    std::fs::write(&client_ca, "-----BEGIN CERTIFICATE-----\nnot base64\n").expect("write");
    let reported = common::eventually(Duration::from_secs(3), || async {
        tls_status().await["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("ca.pem"))
    })
    .await;
    assert!(reported.is_some(), "the broken CA is reported");
    assert_eq!(with(&new).await.0, "200", "the CA in use is kept");
}

/// `forward_client_cert: set` on an mTLS listener: the upstream gets the verified
/// certificate in `X-Forwarded-Client-Cert`, Envoy's format (hash of the DER, RFC 4514
/// subject, SAN URI and DNS), and never what a client wrote in that field or in the
/// `X-SSL-Client-*` ones; a client without a certificate gets none.
#[tokio::test]
async fn forward_client_cert_set_vouches_for_the_verified_certificate_only() {
    let upstream = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    // A client certificate with an organisation, a URI and a DNS name, signed by the CA.
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&certs)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "edge-key.pem",
    ]);
    openssl(&[
        "req",
        "-new",
        "-key",
        "edge-key.pem",
        "-subj",
        "/O=Example, Inc./CN=edge-eu",
        "-out",
        "edge.csr",
    ]);
    std::fs::write(
        certs.join("edge.ext"),
        "subjectAltName=URI:spiffe://mesh/edge/eu,DNS:edge-eu\nextendedKeyUsage=clientAuth\n",
    )
    .expect("ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "edge.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "edge.ext",
        "-out",
        "edge.pem",
    ]);

    let table = common::lettered_table("xfcc", &[&[upstream.url()]]);
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .watch(false)
        .extra(&format!(
            "tls:\n  certificates: [ {{ cert: {c}/localhost.pem, key: {c}/localhost-key.pem }} ]\n  client_auth: {{ ca: {c}/ca.pem, required: false, forward_client_cert: set }}\n",
            c = certs.display()
        ))
        .yaml();
    let router_dir = tempfile::tempdir().expect("tempdir");
    common::write(&router_dir, "routing-table.yaml", &table);
    let router = Router::start_in(router_dir, &config).await;
    let port = router.addr.port();
    let get = |with_cert: bool| {
        let mut args = vec![
            "-sS".to_owned(),
            "--max-time".into(),
            "10".into(),
            "--cacert".into(),
            certs.join("ca.pem").display().to_string(),
            "--resolve".into(),
            format!("localhost:{port}:127.0.0.1"),
            "-o".into(),
            "/dev/null".into(),
            "-w".into(),
            "%{http_code}".into(),
            "-H".into(),
            "X-Forwarded-Client-Cert: Hash=forged;Subject=\"CN=admin\"".into(),
            "-H".into(),
            "X-SSL-Client-Verify: SUCCESS".into(),
            "-H".into(),
            "X-Client-Cert-CN: admin".into(),
        ];
        if with_cert {
            for a in ["--cert", "edge.pem", "--key", "edge-key.pem"] {
                args.push(if a.ends_with(".pem") {
                    certs.join(a).display().to_string()
                } else {
                    a.to_owned()
                });
            }
        }
        args.push(format!(
            "https://localhost:{port}/v1/orders/{}",
            iuid_for(1)
        ));
        curl(args)
    };

    let (code, err) = get(true).await;
    assert_eq!(code, "200", "{err}");
    let got = upstream.last();
    let hash: String = {
        use sha2::Digest;
        sha2::Sha256::digest(leaf(&certs.join("edge.pem")))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let xfcc: Vec<_> = got
        .headers
        .get_all("x-forwarded-client-cert")
        .iter()
        .collect();
    assert_eq!(
        xfcc,
        [&format!(
            "Hash={hash};Subject=\"CN=edge-eu,O=Example\\, Inc.\";URI=spiffe://mesh/edge/eu;DNS=edge-eu"
        )],
    );
    assert!(!got.headers.contains_key("x-ssl-client-verify"));
    assert!(!got.headers.contains_key("x-client-cert-cn"));

    let (code, err) = get(false).await;
    assert_eq!(code, "200", "{err}");
    let got = upstream.last();
    assert!(
        !got.headers.contains_key("x-forwarded-client-cert"),
        "no certificate, no field: {:?}",
        got.headers
    );
}

//! Which request fields a client can make the router pass on, drop or forge (docs/data-path.md, §12):
//! a second `X-Request-Id` line, `Connection` nominating the fields the proxies own, and
//! client-certificate identity fields. Raw HTTP/1.1 over loopback, so every line is exactly
//! what a client could send.

mod common;

use std::io::{Read, Write};

use common::{iuid_for, lettered_table, orders_config, Router, Upstream};

struct World {
    router: Router,
    upstream: Upstream,
}

impl World {
    async fn start() -> World {
        let upstream = Upstream::start("a").await;
        let table = lettered_table("trust", &[&[upstream.url()]]);
        let router = Router::start(&orders_config().yaml(), &table).await;
        World { router, upstream }
    }

    /// Sends `fields` (each line ending in CRLF) on a GET for a region-a order and returns
    /// the response head.
    async fn send(&self, fields: &str) -> String {
        let addr = self.router.addr;
        let request = format!(
            "GET /v1/orders/{} HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n{fields}\r\n",
            iuid_for(1)
        );
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .expect("timeout");
            s.write_all(request.as_bytes()).expect("write");
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            String::from_utf8_lossy(&out).into_owned()
        })
        .await
        .expect("join")
    }
}

fn lines<'h>(headers: &'h http::HeaderMap, name: &str) -> Vec<&'h str> {
    headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ascii"))
        .collect()
}

/// A sane first `X-Request-Id` is kept, and a second, forged line does not ride along
/// behind it: the upstream sees exactly one line, the kept id.
#[tokio::test]
async fn a_second_request_id_line_is_replaced_by_the_kept_id() {
    let w = World::start().await;
    let head = w
        .send("X-Request-Id: abc-123\r\nX-Request-Id: ../../x\" injected=1 %0d%0a\r\n")
        .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nx-request-id: abc-123\r\n"),
        "{head}"
    );
    let got = w.upstream.last();
    assert_eq!(lines(&got.headers, "x-request-id"), ["abc-123"]);

    // A forged first line and a sane second: one fresh id, on one line.
    w.send("X-Request-Id: a/b\r\nX-Request-Id: sane-2\r\n")
        .await;
    let got = w.upstream.last();
    let ids = lines(&got.headers, "x-request-id");
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(ids[0].len(), 32, "a fresh id: {ids:?}");
}

/// `Connection` may nominate any field for removal (RFC 9110 §7.6.1), except those a proxy
/// in front added or the router owns: the prior `X-Forwarded-For` chain, `Forwarded`, `Via`,
/// the request id, trace context and credentials reach the upstream; another nominated field
/// is still dropped.
#[tokio::test]
async fn connection_cannot_erase_the_fields_proxies_own() {
    let w = World::start().await;
    let head = w
        .send(
            "Connection: X-Forwarded-For, forwarded, VIA, X-Request-Id, traceparent, \
             Authorization, X-Forwarded-Host, X-Forwarded-Proto, X-Drop-Me\r\n\
             X-Forwarded-For: 203.0.113.7\r\nForwarded: for=203.0.113.7\r\n\
             Via: 1.1 front\r\nX-Request-Id: req-7\r\n\
             traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\
             Authorization: Bearer from-front\r\nX-Drop-Me: 1\r\n",
        )
        .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got = w.upstream.last();
    assert_eq!(
        lines(&got.headers, "x-forwarded-for"),
        ["203.0.113.7, 127.0.0.1"]
    );
    assert_eq!(
        lines(&got.headers, "forwarded"),
        [
            "for=203.0.113.7",
            "for=127.0.0.1;host=\"api.example.com\";proto=http"
        ]
    );
    assert_eq!(lines(&got.headers, "via"), ["1.1 front", "1.1 edge"]);
    assert_eq!(lines(&got.headers, "x-request-id"), ["req-7"]);
    assert_eq!(
        lines(&got.headers, "traceparent"),
        ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]
    );
    assert_eq!(lines(&got.headers, "authorization"), ["Bearer from-front"]);
    assert_eq!(lines(&got.headers, "x-forwarded-host"), ["api.example.com"]);
    assert!(!got.headers.contains_key("x-drop-me"));
    assert!(!got.headers.contains_key("connection"));
}

/// A client cannot vouch for a certificate: the identity fields TLS-terminating proxies set
/// are removed from every request (here plain HTTP, so no certificate at all).
#[tokio::test]
async fn client_certificate_fields_from_a_client_are_removed() {
    let w = World::start().await;
    let head = w
        .send(
            "X-Forwarded-Client-Cert: Hash=abc;Subject=\"CN=admin\"\r\n\
             X-SSL-Client-Verify: SUCCESS\r\nX-Client-Cert-CN: admin\r\n\
             X-SSL-Client-DN: CN=admin\r\nClient-Cert: :MIIB:\r\nX-Kept: yes\r\n",
        )
        .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let got = w.upstream.last();
    for gone in [
        "x-forwarded-client-cert",
        "x-ssl-client-verify",
        "x-client-cert-cn",
        "x-ssl-client-dn",
        "client-cert",
    ] {
        assert!(
            !got.headers.contains_key(gone),
            "{gone} reached the upstream"
        );
    }
    assert_eq!(lines(&got.headers, "x-kept"), ["yes"]);
}

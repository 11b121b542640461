//! The header rules' unit tests.

use super::*;

fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

#[test]
fn connection_named_fields_go() {
    let mut h = map(&[
        ("connection", "keep-alive, X-Secret"),
        ("connection", "x-other"),
        ("x-secret", "1"),
        ("x-other", "1"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("x-kept", "1"),
    ]);
    strip_hop_by_hop(&mut h);
    assert_eq!(h.len(), 1, "{h:?}");
    assert!(h.contains_key("x-kept"));
}

#[test]
fn upgrade_kept_only_when_asked_for() {
    let client = ClientAddr::new("192.0.2.1:5555".parse().expect("addr"));
    let via = HeaderValue::from_static("1.1 eu");
    let rewrite = |pairs: &[(&str, &str)]| {
        let mut h = map(pairs);
        let f = Forwarding {
            client: &client,
            original_host: None,
            via: &via,
            preserve_host: false,
        };
        rewrite_request(&mut h, &f);
        h
    };
    let asked = rewrite(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
    assert_eq!(asked["connection"], "upgrade");
    assert_eq!(asked["upgrade"], "websocket");
    // `Upgrade` without `Connection: upgrade` is a stray hop-by-hop field.
    let stray = rewrite(&[("upgrade", "websocket"), ("x-kept", "1")]);
    assert!(!stray.contains_key("upgrade") && stray.contains_key("x-kept"));
    let mut response = map(&[("connection", "upgrade"), ("upgrade", "websocket")]);
    rewrite_response(http::StatusCode::SWITCHING_PROTOCOLS, &mut response, &via);
    assert_eq!(response["upgrade"], "websocket");
    let mut refused = map(&[("connection", "upgrade"), ("upgrade", "websocket")]);
    rewrite_response(http::StatusCode::OK, &mut refused, &via);
    assert!(!refused.contains_key("upgrade") && !refused.contains_key("connection"));
}

#[test]
fn loops_by_region_and_by_count() {
    assert_eq!(check_loop(&map(&[]), "eu", 3), Ok(()));
    assert_eq!(
        check_loop(&map(&[("via", "1.1 us, 1.1 eu (iuid-router, x)")]), "eu", 3),
        Err(LoopReason::SeenRegion)
    );
    assert_eq!(
        check_loop(&map(&[("via", "1.1 a, 1.1 b"), ("via", "2 c")]), "eu", 3),
        Err(LoopReason::TooManyHops(3))
    );
    assert_eq!(
        check_loop(&map(&[("via", "1.1 a (x, y), 1.1 b")]), "eu", 3),
        Ok(())
    );
}

#[test]
fn forwarded_fields() {
    let mut h = map(&[
        ("x-forwarded-for", "10.0.0.1"),
        ("host", "api.example:8443"),
    ]);
    let host = h.get("host").cloned();
    let upstream: Authority = "10.1.1.1:8080".parse().expect("authority");
    let via = HeaderValue::from_static("1.1 eu");
    let client = ClientAddr::new("[::1]:5555".parse().expect("addr"));
    rewrite_request(
        &mut h,
        &Forwarding {
            client: &client,
            original_host: host.as_ref(),
            via: &via,
            preserve_host: false,
        },
    );
    let mut parts = http::Request::new(()).into_parts().0;
    parts.headers = h;
    let host = HeaderValue::from_static("10.1.1.1:8080");
    aim(&mut parts, &upstream, &host, false);
    let h = parts.headers;
    assert_eq!(parts.uri, "http://10.1.1.1:8080/");
    assert_eq!(h["x-forwarded-for"], "10.0.0.1, ::1");
    assert_eq!(
        h["forwarded"],
        "for=\"[::1]\";host=\"api.example:8443\";proto=http"
    );
    assert_eq!(h["x-forwarded-host"], "api.example:8443");
    assert_eq!(h["host"], "10.1.1.1:8080");
    assert_eq!(h["via"], "1.1 eu");
    // Exact capacity: no spare bytes, whatever the host.
    let mut h = map(&[("host", "a\"b")]);
    let host = h.get("host").cloned();
    let client4 = ClientAddr::new("192.0.2.1:5555".parse().expect("addr"));
    let f = Forwarding {
        client: &client4,
        original_host: host.as_ref(),
        via: &via,
        preserve_host: false,
    };
    rewrite_request(&mut h, &f);
    assert_eq!(h["forwarded"], "for=192.0.2.1;proto=http");
}

#[test]
fn content_length_goes_on_as_a_plain_decimal() {
    for (sent, want) in [("010", "10"), ("005", "5"), ("0", "0"), ("12", "12")] {
        let mut h = map(&[("content-length", sent)]);
        canonical_length(&mut h);
        assert_eq!(h["content-length"], want, "{sent}");
        assert_eq!(h.len(), 1);
    }
}

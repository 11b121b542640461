//! The header rules' unit tests.

use super::underscore::own_with_underscores;
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
            underscores: UnderscoreFields::Drop,
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
            underscores: UnderscoreFields::Drop,
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
        underscores: UnderscoreFields::Drop,
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

/// The client's fields among `sent` that reach the upstream, lowercased, after each applier:
/// `rewrite_request` on a `HeaderMap` (HTTP/2, HTTP/3, bridged) and `raw::write_request_fields`
/// on bytes (the own engine's head path).
fn kept_by_both(sent: &[(&str, &str)], underscores: UnderscoreFields) -> [Vec<String>; 2] {
    let client = ClientAddr::new("192.0.2.1:5555".parse().expect("addr"));
    let sent_names: Vec<String> = sent.iter().map(|(n, _)| n.to_ascii_lowercase()).collect();
    let lowered: Vec<(String, &str)> = sent
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), *v))
        .collect();
    let pairs: Vec<(&str, &str)> = lowered.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut h = map(&pairs);
    let via = HeaderValue::from_static("1.1 eu");
    rewrite_request(
        &mut h,
        &Forwarding {
            client: &client,
            original_host: None,
            via: &via,
            preserve_host: false,
            underscores,
        },
    );
    let mut on_map: Vec<String> = h
        .keys()
        .map(|n| n.as_str().to_owned())
        .filter(|n| sent_names.contains(n))
        .collect();
    on_map.sort();

    let mut buf = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    for (name, value) in sent {
        buf.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    let mut head = crate::http1::head::RequestHead::default();
    assert_eq!(
        crate::http1::head::parse_request(&buf, &mut head, 100, 8192),
        Ok(true)
    );
    let mut out = Vec::new();
    raw::write_request_fields(
        &mut out,
        &buf,
        &head.fields,
        &raw::RawForwarding {
            client: &client,
            original_host: Some(b"h"),
            via: b"1.1 eu",
            preserve_host: false,
            request_id: b"rid",
            nominates: false,
            trace: None,
            underscores,
        },
    );
    let text = String::from_utf8(out).expect("ascii");
    let mut on_bytes: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, _)| n.to_ascii_lowercase())
        .filter(|n| sent_names.contains(n))
        .collect();
    on_bytes.sort();
    [on_map, on_bytes]
}

/// A name that reads, with `_` as `-`, as one of the router's own fields is removed as that
/// field is (a CGI upstream would read `X-Iuid_Region` as `HTTP_X_IUID_REGION`), whatever
/// `limits.underscore_fields` says; any other `_` name goes by the setting; both appliers
/// agree.
#[test]
fn names_with_underscores_on_both_appliers() {
    let sent = [
        ("X-Iuid_Region", "ap"),
        ("X_Iuid_Move", "to"),
        ("x-iuid_mirror", "1"),
        ("X_Forwarded_For", "6.6.6.6"),
        ("X-Forwarded_Host", "bank.example"),
        ("X_Request_Id", "forged"),
        ("X_SSL_Client_Verify", "SUCCESS"),
        ("Client_Cert", ":x:"),
        ("Content_Length", "5"),
        ("Transfer_Encoding", "chunked"),
        ("Keep_Alive", "1"),
        ("X_Custom_Field", "1"),
        ("Accept", "*/*"),
        ("X-Kept", "1"),
    ];
    let dropped = kept_by_both(&sent, UnderscoreFields::Drop);
    assert_eq!(dropped[0], ["accept", "x-kept"]);
    assert_eq!(dropped[0], dropped[1], "HeaderMap, then bytes");
    let passed = kept_by_both(&sent, UnderscoreFields::Pass);
    assert_eq!(passed[0], ["accept", "x-kept", "x_custom_field"]);
    assert_eq!(passed[0], passed[1], "HeaderMap, then bytes");
}

#[test]
fn what_reads_as_the_routers_own() {
    for own in [
        "X-Iuid_Region",
        "X_IUID_ANYTHING",
        "x_forwarded_proto",
        "X-Forwarded_Client_Cert",
        "x_request-id",
        "SSL_Client_Cert",
        "proxy_connection",
        "content_length",
    ] {
        assert!(own_with_underscores(own.as_bytes()), "{own}");
    }
    for other in [
        "x_iuid",
        "x_iuid_",
        "x_requestid",
        "x_custom",
        "_",
        "user_agent",
        "x-iuid",
    ] {
        assert!(!own_with_underscores(other.as_bytes()), "{other}");
    }
    assert!(!has_underscore(b"x-iuid-region") && has_underscore(b"x_a"));
}

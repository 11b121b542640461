//! The forwarding fields (`proxy/headers/`, docs/data-path.md) from arbitrary incoming
//! values of `Via`, `X-Forwarded-For`, `Forwarded`, `Connection` and `Host`: the loop check
//! reads any `Via`, and the rewritten request keeps the client's chain with this hop
//! appended, this router's `Via` last, and no hop-by-hop field it named.

use std::net::SocketAddr;

use http::header::{HeaderName, HeaderValue, CONNECTION, FORWARDED, HOST, VIA};
use http::{HeaderMap, Version};

use crate::proxy::headers::{check_via, rewrite_request, via_value, ClientAddr, Forwarding};

const XFF: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The input split at `\n` into up to five values: `Via`, `X-Forwarded-For`, `Forwarded`,
/// `Connection`, `Host` (a value that is not a valid field value is left out, as a codec
/// would refuse it).
pub fn check(data: &[u8]) {
    let mut parts = data.split(|&b| b == b'\n');
    let mut headers = HeaderMap::new();
    for name in [VIA, XFF, FORWARDED, CONNECTION, HOST] {
        if let Some(Ok(value)) = parts.next().map(HeaderValue::from_bytes) {
            headers.append(name, value);
        }
    }
    let _ = check_via(
        headers.get_all(VIA).iter().map(|v| v.as_bytes()),
        "eu",
        10,
        false,
    );
    let client = ClientAddr::new(SocketAddr::from(([192, 0, 2, 7], 40_000)));
    let Some(via) = via_value(Version::HTTP_11, "eu") else {
        return;
    };
    let host = headers.get(HOST).cloned();
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok())
        // Those the router sets itself.
        .filter(|n| {
            !matches!(
                n.as_str(),
                "host"
                    | "via"
                    | "x-forwarded-for"
                    | "x-forwarded-proto"
                    | "x-forwarded-host"
                    | "forwarded"
                    | "upgrade"
                    | "connection"
                    | "te"
            )
        })
        .collect();
    rewrite_request(
        &mut headers,
        &Forwarding {
            client: &client,
            original_host: host.as_ref(),
            via: &via,
            preserve_host: false,
            underscores: crate::config::UnderscoreFields::Drop,
        },
    );
    let xff: Vec<&[u8]> = headers.get_all(XFF).iter().map(|v| v.as_bytes()).collect();
    let last = xff.last().expect("X-Forwarded-For is set");
    assert!(last.ends_with(b"192.0.2.7"), "X-Forwarded-For {xff:?}");
    let vias: Vec<&HeaderValue> = headers.get_all(VIA).iter().collect();
    assert_eq!(
        vias.last(),
        Some(&&via),
        "this router's Via is last: {vias:?}"
    );
    assert!(headers.get(CONNECTION).is_none_or(|c| c == "upgrade"));
    for name in named {
        assert!(
            !headers.contains_key(&name),
            "{name} was named in Connection and kept"
        );
    }
}

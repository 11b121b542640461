//! The demo's bad day (docs/failover.md): region `sa`, whose one upstream never runs and
//! whose reads fail over to `us`, and an eu order whose data moved to us, which eu's echo
//! cluster answers `421 Misdirected Request` with `X-Iuid-Owner: us`.

use iuid::Iuid;

/// The order eu no longer holds: minted in DE (country 3, eu's), moved to us.
pub fn moved_order() -> Iuid {
    Iuid::from_fields(super::HISTORY_NEWEST_MS, 3, 1, 0x421)
}

/// eu's answer to a request for [`moved_order`]: 421 naming its owner, `us` (RFC 9110
/// §15.5.20: not acted on, so the router may send it there).
pub fn misdirected(region: &str, path: &str) -> Option<axum::response::Response> {
    use axum::response::IntoResponse;
    let id = path.strip_prefix("/v1/orders/")?;
    if region != "eu" || !id.eq_ignore_ascii_case(&moved_order().to_string()) {
        return None;
    }
    let text = format!("region: {region}\nthis order moved to us\n");
    Some(
        (
            http::StatusCode::MISDIRECTED_REQUEST,
            [("x-iuid-owner", "us")],
            text,
        )
            .into_response(),
    )
}

/// The tour's lines for a bad day, through `line(expect, what, curl)`.
pub fn tour(line: &mut dyn FnMut(&str, &str, String), base: &str, admin_base: &str) {
    let br = iuid::Generator::new(5, 1).mint();
    line(
        "us",
        "a read of region sa (BR, country 5), whose upstreams are down: its failover region us \
         answers, the request and the answer marked X-Iuid-Failover: sa (docs/failover.md)",
        format!("curl -si {base}/v1/orders/{br}"),
    );
    line(
        "503",
        "a write of region sa: failover serves reads only, so 503 region-unavailable with \
         Retry-After at once, never a connect attempt or a timeout",
        format!("curl -s {base}/v1/orders/{br} -d 'note=hello'"),
    );
    line(
        "200",
        "each region's health share, its failover and the share of its reads failing over \
         (the console's Regions panel)",
        format!("curl -s {admin_base}/admin/regions"),
    );
    let moved = moved_order();
    line(
        "us",
        "an eu order whose data moved to us before the table says so: eu answers 421 with \
         X-Iuid-Owner: us, the router asks us once and remembers the owner",
        format!("curl -s {base}/v1/orders/{moved}"),
    );
    line(
        "200",
        "the owner learned from that hint, shown over the table's answer (learned_owner)",
        format!("curl -s {admin_base}/admin/resolve/{moved}"),
    );
}

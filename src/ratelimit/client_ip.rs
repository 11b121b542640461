//! The client a `client_ip` rule counts (docs/rate-limits.md "Keys"): the peer,
//! or, when the peer is one of `trusted_proxies`, the right-most element of
//! `X-Forwarded-For` (else of `Forwarded`'s `for=`) that is not itself trusted, as nginx's
//! `real_ip_recursive on`. Elements to the left of that one were written by whoever the
//! client is, so they are never read: a client cannot choose its own key.

use std::net::IpAddr;

use crate::config::TrustedProxies;

/// The address a `client_ip` rule counts for a request from `peer`, whose
/// `X-Forwarded-For` values are `xff` and `Forwarded` values `forwarded`, in order.
///
/// Without `trusted`, or from a peer outside it: `peer`. Through trusted peers: the
/// right-most untrusted element; all trusted, the left-most; an element that is no address
/// (`unknown`, an obfuscated `for=_hidden`) stops the walk at the last trusted hop, whose
/// address is then counted.
pub fn client_ip<'a>(
    peer: IpAddr,
    trusted: Option<&TrustedProxies>,
    xff: impl Iterator<Item = &'a [u8]>,
    forwarded: impl Iterator<Item = &'a [u8]>,
) -> IpAddr {
    let Some(trusted) = trusted else {
        return peer;
    };
    if !trusted.contains(peer) {
        return peer;
    }
    let mut chain: Vec<&[u8]> = xff.flat_map(|v| v.split(|&b| b == b',')).collect();
    if chain.iter().all(|e| e.trim_ascii().is_empty()) {
        chain = forwarded
            .flat_map(|v| v.split(|&b| b == b','))
            .filter_map(for_of)
            .collect();
    }
    let mut client = peer;
    for element in chain.iter().rev() {
        match parse_node(element.trim_ascii()) {
            Some(ip) if trusted.contains(ip) => client = ip,
            Some(ip) => return ip,
            None => return client,
        }
    }
    client
}

/// The `for=` value of one `Forwarded` element (RFC 7239 §4), quotes kept for
/// [`parse_node`].
fn for_of(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let (name, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        name.eq_ignore_ascii_case(b"for").then_some(&value[1..])
    })
}

/// An address as `X-Forwarded-For` or `for=` write it: `192.0.2.1`, `192.0.2.1:4711`,
/// `2001:db8::1`, `[2001:db8::1]:4711`, quoted or not (RFC 7239 §6).
fn parse_node(text: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(text).ok()?.trim_matches('"');
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(list: &[&str]) -> TrustedProxies {
        let ranges = list
            .iter()
            .map(|t| crate::config::Cidr::parse(t).expect("range"));
        TrustedProxies::from_ranges(ranges.collect())
    }

    fn ip(t: &str) -> IpAddr {
        t.parse().expect("ip")
    }

    fn of(peer: &str, t: Option<&TrustedProxies>, xff: &[&str], fwd: &[&str]) -> IpAddr {
        client_ip(
            ip(peer),
            t,
            xff.iter().map(|v| v.as_bytes()),
            fwd.iter().map(|v| v.as_bytes()),
        )
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(of("6.6.6.6", Some(&t), &["1.2.3.4"], &[]), ip("6.6.6.6"));
        assert_eq!(of("6.6.6.6", None, &["1.2.3.4"], &[]), ip("6.6.6.6"));
        assert_eq!(of("10.0.0.1", None, &["1.2.3.4"], &[]), ip("10.0.0.1"));
    }

    #[test]
    fn through_trusted_hops_the_rightmost_untrusted_element_counts() {
        let t = trusted(&["10.0.0.0/8"]);
        // The client wrote 9.9.9.9 itself; 1.2.3.4 is what the first trusted hop saw.
        assert_eq!(
            of("10.0.0.1", Some(&t), &["9.9.9.9, 1.2.3.4", "10.0.0.7"], &[]),
            ip("1.2.3.4")
        );
        assert_eq!(
            of("10.0.0.1", Some(&t), &["10.1.1.1, 10.2.2.2"], &[]),
            ip("10.1.1.1")
        );
        assert_eq!(of("10.0.0.1", Some(&t), &[], &[]), ip("10.0.0.1"));
        assert_eq!(
            of("10.0.0.1", Some(&t), &["unknown, 10.0.0.3"], &[]),
            ip("10.0.0.3")
        );
        assert_eq!(
            of("10.0.0.1", Some(&t), &["[2001:db8::1]:4711"], &[]),
            ip("2001:db8::1")
        );
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let t = trusted(&["10.0.0.0/8"]);
        let fwd = ["for=9.9.9.9;proto=https, for=\"[2001:db8::7]:80\";by=10.0.0.1"];
        assert_eq!(of("10.0.0.1", Some(&t), &[], &fwd), ip("2001:db8::7"));
        assert_eq!(
            of("10.0.0.1", Some(&t), &[], &["For=1.2.3.4"]),
            ip("1.2.3.4")
        );
    }
}

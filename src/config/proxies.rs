//! `trusted_proxies:` of the router config (docs/config.md, docs/data-path.md "Header
//! rules"): the peers whose `X-Forwarded-For` and `Forwarded` may name a client. Set, a
//! request from any other peer has those fields replaced by the router's own, not appended
//! to: a client cannot put `for=6.6.6.6` ahead of its real address in what every region and
//! fan-out leg reads (Envoy's `use_remote_address`, nginx's `real_ip`). Absent: the fields
//! are appended to, as a router behind an unknown chain must.

use std::net::IpAddr;

use crate::source::{Seg, Source, SourceError};

/// An address range: a network address and its prefix length in bits (CIDR, RFC 4632;
/// RFC 4291 §2.3 for IPv6). A bare address is its own `/32` or `/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Reads `a.b.c.d`, `a.b.c.d/n` (n ≤ 32), an IPv6 address or `addr/n` (n ≤ 128). Bits
    /// past the prefix are ignored (`10.1.2.3/8` is `10.0.0.0/8`). Errors: the text is
    /// neither, or the prefix is too long for the address.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or CIDR range"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`{text}`: the prefix length must be 0 to {max}")),
            },
        };
        Ok(Cidr { network, prefix })
    }

    /// Whether `ip` is in the range. An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, how a
    /// dual-stack socket reports an IPv4 peer) is read as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => same_prefix(
                u128::from(net.to_bits()),
                u128::from(ip.to_bits()),
                32,
                self.prefix,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                same_prefix(net.to_bits(), ip.to_bits(), 128, self.prefix)
            }
            _ => false,
        }
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether the top `prefix` of `width` bits of `a` and `b` agree.
fn same_prefix(a: u128, b: u128, width: u32, prefix: u8) -> bool {
    let host_bits = width - u32::from(prefix);
    host_bits >= width || (a ^ b) >> host_bits == 0
}

/// The ranges of `trusted_proxies`, in the file's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// The ranges given, in order.
    pub fn from_ranges(ranges: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies(ranges)
    }

    /// Whether `ip` is in one of the ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|range| range.contains(ip))
    }
}

/// `trusted_proxies` as written: each entry read, a bad one reported at its position.
pub(super) fn settings(
    list: &[String],
    source: &Source,
    errors: &mut Vec<SourceError>,
) -> TrustedProxies {
    let mut ranges = Vec::with_capacity(list.len());
    for (i, text) in list.iter().enumerate() {
        match Cidr::parse(text) {
            Ok(range) => ranges.push(range),
            Err(message) => errors.push(source.error_at(
                &[Seg::Key("trusted_proxies".into()), Seg::Index(i)],
                format!("trusted_proxies: {message}"),
            )),
        }
    }
    TrustedProxies(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn ranges_hold_what_their_prefix_says() {
        let net = Cidr::parse("10.0.0.0/8").expect("cidr");
        assert!(net.contains(ip("10.200.3.4")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")), "IPv4-mapped");
        let host = Cidr::parse("127.0.0.1").expect("address");
        assert!(host.contains(ip("127.0.0.1")) && !host.contains(ip("127.0.0.2")));
        let all = Cidr::parse("0.0.0.0/0").expect("all");
        assert!(all.contains(ip("192.0.2.1")) && !all.contains(ip("2001:db8::1")));
        let v6 = Cidr::parse("2001:db8::/32").expect("v6");
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        assert!(Cidr::parse("::/0").expect("all v6").contains(ip("::1")));
    }

    #[test]
    fn what_is_not_a_range_is_refused() {
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "ten",
            "10.0.0.0/x",
            "/8",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn an_address_is_in_its_own_range_at_every_prefix(bits: u32, prefix in 0u8..=32) {
            let addr = std::net::Ipv4Addr::from_bits(bits);
            let range = Cidr::parse(&format!("{addr}/{prefix}")).expect("valid");
            proptest::prop_assert!(range.contains(IpAddr::V4(addr)));
        }
    }
}

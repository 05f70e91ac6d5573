//! The client a request came from, behind a reverse proxy you run (issue
//! 38, found 1). Every per-client limit keys on it: the failure throttle,
//! and the connection cap (a trusted proxy's own connections are not
//! capped per client: it carries every client's).
//!
//! `api.trusted_proxies` lists the proxies' addresses (CIDRs). A request
//! whose TCP peer is one of them names its client in the one header those
//! proxies write, `api.trusted_proxy_header`: `X-Forwarded-For` (nginx,
//! HAProxy, most load balancers) or `Forwarded` (RFC 7239). Only that one:
//! a proxy passes the other on as the client sent it, so reading it would
//! believe whatever address the client chose (nginx passes a client's
//! `Forwarded` untouched). Each proxy appends the address it received from,
//! so the list is read from the right, past every trusted hop, and the
//! first hop that is not trusted is the client. A peer not in the list is
//! the client itself, whatever it claims: the header is anyone's to write.
//! The one wrong way to use this is to trust a proxy that is not yours.

use std::net::IpAddr;

use axum::http::HeaderMap;

/// The proxies whose forwarding header is believed, and which header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TrustedProxies {
    nets: Vec<(IpAddr, u8)>,
    header: ForwardingHeader,
}

/// The header the trusted proxies write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ForwardingHeader {
    #[default]
    XForwardedFor,
    Forwarded,
}

impl TrustedProxies {
    /// Reads `api.trusted_proxies` (`10.0.0.0/8`, `2001:db8::/32`, or one
    /// address) and `api.trusted_proxy_header`. What is none of these is an
    /// error naming it.
    pub(crate) fn parse(entries: &[String], header: &str) -> Result<TrustedProxies, String> {
        let header = match header.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => ForwardingHeader::XForwardedFor,
            "forwarded" => ForwardingHeader::Forwarded,
            _ => {
                return Err(format!(
                    "api.trusted_proxy_header: '{}' is neither X-Forwarded-For nor Forwarded \
                     (the header your proxy writes)",
                    header.trim()
                ))
            }
        };
        let mut nets = Vec::with_capacity(entries.len());
        for entry in entries {
            let text = entry.trim();
            let bad = || {
                format!(
                    "api.trusted_proxies: '{text}' is not an address or a CIDR \
                     (10.0.0.0/8, 2001:db8::/32, 127.0.0.1)"
                )
            };
            let (addr, len) = match text.split_once('/') {
                Some((a, l)) => (a, Some(l)),
                None => (text, None),
            };
            let ip: IpAddr = addr.parse().map_err(|_| bad())?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let len = match len {
                Some(l) => l.parse::<u8>().ok().filter(|l| *l <= max).ok_or_else(bad)?,
                None => max,
            };
            nets.push((ip, len));
        }
        Ok(TrustedProxies { nets, header })
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets
            .iter()
            .any(|(net, len)| within(ip, canonical(*net), *len))
    }
}

/// An IPv4 address mapped into IPv6 (a dual-stack listener's peers) is the
/// IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address a client is counted under by every per-client limit (the
/// failure throttle and the connection cap alike): IPv4 by its address,
/// IPv6 by its /64, which one host usually holds whole and can spread its
/// connections over.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::from(s)
        }
        v4 => v4,
    }
}

fn within(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The client of a request that arrived from `peer`.
pub(crate) fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    if !trusted.contains(peer) {
        return peer;
    }
    let hops = forwarded_hops(headers, trusted.header);
    let mut leftmost = None;
    for hop in hops.iter().rev() {
        // A hop that names no address ("unknown", an obfuscated name, a
        // typo) cannot be told apart from any other client: key on the
        // proxy, which limits no one but those behind the same unknown.
        let Some(ip) = parse_hop(hop) else {
            return peer;
        };
        if !trusted.contains(ip) {
            return canonical(ip);
        }
        leftmost = Some(ip);
    }
    leftmost.map_or(peer, canonical)
}

/// The addresses the proxies recorded in `header`, nearest client first:
/// `Forwarded`'s `for=` values, or `X-Forwarded-For`'s list.
fn forwarded_hops(headers: &HeaderMap, header: ForwardingHeader) -> Vec<String> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect()
    };
    if header == ForwardingHeader::Forwarded {
        return values("forwarded")
            .iter()
            .map(|element| {
                element
                    .split(';')
                    .find_map(|pair| {
                        let (k, v) = pair.trim().split_once('=')?;
                        k.trim()
                            .eq_ignore_ascii_case("for")
                            .then(|| v.trim().to_owned())
                    })
                    .unwrap_or_default()
            })
            .collect();
    }
    values("x-forwarded-for")
}

/// `192.0.2.1`, `192.0.2.1:4711`, `"[2001:db8::1]:4711"`, `2001:db8::1`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim().trim_matches('"');
    if let Some(rest) = hop.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    addr.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nginx() -> TrustedProxies {
        TrustedProxies::parse(
            &["10.0.0.0/8".into(), "2001:db8:ffff::1".into()],
            "X-Forwarded-For",
        )
        .unwrap()
    }

    fn rfc_7239_proxy() -> TrustedProxies {
        TrustedProxies::parse(&["10.0.0.0/8".into()], "forwarded").unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let spoofed = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=1.2.3.4"),
        ]);
        assert_eq!(
            client_ip(ip("198.51.100.7"), &spoofed, &nginx()),
            ip("198.51.100.7")
        );
        assert_eq!(
            client_ip(ip("10.0.0.2"), &spoofed, &TrustedProxies::default()),
            ip("10.0.0.2"),
            "nothing is trusted by default"
        );
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() {
        // The client wrote its own X-Forwarded-For; nginx appended the
        // address it saw, and an inner proxy its own.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.1.1.1")]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &nginx()), ip("203.0.113.9"));
        let h = headers(&[(
            "forwarded",
            "for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\";proto=https;by=10.0.0.2",
        )]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &h, &rfc_7239_proxy()),
            ip("2001:db8:cafe::17")
        );
        // Every hop a proxy of ours: the first of them.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &nginx()), ip("10.9.9.9"));
        // No header, or a hop that names no address: the proxy itself.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &HeaderMap::new(), &nginx()),
            ip("10.0.0.2")
        );
        let h = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &h, &rfc_7239_proxy()),
            ip("10.0.0.2")
        );
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            client_ip(ip("::ffff:10.0.0.2"), &h, &nginx()),
            ip("203.0.113.9"),
            "a dual-stack listener's mapped IPv4 peer"
        );
    }

    /// Found by the nginx test: nginx writes X-Forwarded-For and passes a
    /// client's own `Forwarded` on untouched. Read first, it let a guesser
    /// name a new address on every attempt and never be throttled. Only
    /// the header the proxies write is read.
    #[test]
    fn a_client_naming_itself_in_the_header_its_proxy_does_not_write_is_not_believed() {
        let h = headers(&[
            ("forwarded", "for=192.0.2.60"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &nginx()), ip("203.0.113.9"));
        let only_forwarded = headers(&[("forwarded", "for=192.0.2.60")]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &only_forwarded, &nginx()),
            ip("10.0.0.2"),
            "no X-Forwarded-For: the proxy itself"
        );
        let h = headers(&[
            ("forwarded", "for=198.51.100.4"),
            ("x-forwarded-for", "192.0.2.60"),
        ]);
        assert_eq!(
            client_ip(ip("10.0.0.2"), &h, &rfc_7239_proxy()),
            ip("198.51.100.4")
        );
    }

    #[test]
    fn a_bad_entry_is_named() {
        for bad in ["10.0.0.0/33", "nginx", "10.0.0/8", "2001:db8::/129"] {
            let e = TrustedProxies::parse(&[bad.into()], "x-forwarded-for").unwrap_err();
            assert!(e.contains(bad) && e.contains("api.trusted_proxies"), "{e}");
        }
        let e = TrustedProxies::parse(&[], "X-Real-IP").unwrap_err();
        assert!(
            e.contains("X-Real-IP") && e.contains("api.trusted_proxy_header"),
            "{e}"
        );
        assert!(nginx().contains(ip("10.255.0.1")));
        assert!(!nginx().contains(ip("11.0.0.1")));
        assert!(nginx().contains(ip("2001:db8:ffff::1")));
        assert!(!nginx().contains(ip("2001:db8:ffff::2")));
    }
}

//! Who a client is, for every per-client limit (the failure throttle and
//! the connection cap alike): IPv4 by its address, IPv6 by its /64, which
//! one host usually holds whole and can spread its connections over.

use std::net::IpAddr;

/// The address a client is counted under.
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::from(s)
            }
        },
    }
}

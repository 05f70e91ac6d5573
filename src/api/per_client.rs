//! At most `api.max_connections_per_client` connections from one client
//! (an IPv6 host by its /64, as the failure throttle counts it): the next
//! one is closed at once, so one client cannot fill the listener's slots
//! that every other client needs. A trusted proxy's own connections are
//! not capped: it carries every client's, and caps its own clients.

use std::net::{IpAddr, SocketAddr};

use super::client_addr::client_key;
use super::keyed_cap::{KeyedCap, Place};

/// Open connections per client address.
pub(crate) struct PerClient(KeyedCap<IpAddr>);

/// One connection counted against its client; uncounted when dropped.
pub(crate) type Held = Place<IpAddr>;

impl PerClient {
    pub(crate) fn new(max: usize) -> PerClient {
        PerClient(KeyedCap::new(max))
    }

    pub(crate) fn enter(&self, addr: SocketAddr) -> Option<Held> {
        self.0.enter(client_key(addr.ip()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_gets_at_most_its_share_and_gets_it_back() {
        let pc = PerClient::new(2);
        let a: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:1000".parse().unwrap();
        let first = pc.enter(a).unwrap();
        let _second = pc.enter(a).unwrap();
        assert!(pc.enter(a).is_none(), "a third from the same address");
        assert!(pc.enter(b).is_some(), "another client is not held back");
        drop(first);
        assert!(pc.enter(a).is_some(), "a slot freed is free again");
    }

    /// Issue 38, found 3: the throttle counts an IPv6 client by its /64,
    /// which one host usually holds whole; the connection cap must too, or
    /// one host takes every connection from addresses of its /64.
    #[test]
    fn an_ipv6_host_is_one_client_across_its_64() {
        let pc = PerClient::new(2);
        let a: SocketAddr = "[2001:db8:1:2::1]:1000".parse().unwrap();
        let b: SocketAddr = "[2001:db8:1:2:ffff::9]:1000".parse().unwrap();
        let elsewhere: SocketAddr = "[2001:db8:1:3::1]:1000".parse().unwrap();
        let _first = pc.enter(a).unwrap();
        let _second = pc.enter(b).unwrap();
        assert!(
            pc.enter("[2001:db8:1:2::77]:1".parse().unwrap()).is_none(),
            "a third address of the same /64"
        );
        assert!(
            pc.enter(elsewhere).is_some(),
            "another /64 is another client"
        );
    }
}

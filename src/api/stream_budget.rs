//! Who may hold the live status streams (issue 38, found 2). One budget
//! of `api.max_event_streams` served every payer and the storefront alike,
//! so one checkout's link opened 512 times refused every other checkout's
//! live status, and the storefront's streams too. Here:
//!
//! - the storefront (and support, operators) has a share of its own, a
//!   quarter of the budget and at least one stream;
//! - payers share the rest, and one view token holds at most
//!   `api.max_streams_per_page` (8) streams: a payer with a few tabs open
//!   is served, a page opened hundreds of times takes no other checkout's
//!   place;
//! - one client (an address, an IPv6 /64; behind a trusted proxy the
//!   client it names) holds at most `api.max_streams_per_client` (32) over
//!   every page, so many view tokens from one place cannot take the
//!   payers' share either.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::client_addr::client_key;
use super::keyed_cap::{KeyedCap, Place};

#[derive(Debug)]
pub(crate) struct StreamBudget {
    payers: Arc<Semaphore>,
    payer_share: usize,
    storefront: Arc<Semaphore>,
    storefront_share: usize,
    per_page: KeyedCap<String>,
    per_client: KeyedCap<IpAddr>,
}

/// Why a stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// This view token already holds its most streams.
    Page(usize),
    /// This client already holds its most payers' streams.
    Client(usize),
    /// Payers hold their whole share.
    Payers(usize),
    /// The storefront holds its whole share.
    Storefront(usize),
}

/// A place held for as long as its stream is open.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    _page: Option<Place<String>>,
    _client: Option<Place<IpAddr>>,
}

impl StreamBudget {
    pub(crate) fn new(
        max_streams: usize,
        per_page_max: usize,
        per_client_max: usize,
    ) -> StreamBudget {
        let max_streams = max_streams.max(2);
        let storefront_share = (max_streams / 4).max(1);
        let payer_share = max_streams - storefront_share;
        StreamBudget {
            payers: Arc::new(Semaphore::new(payer_share)),
            payer_share,
            storefront: Arc::new(Semaphore::new(storefront_share)),
            storefront_share,
            per_page: KeyedCap::new(per_page_max),
            per_client: KeyedCap::new(per_client_max),
        }
    }

    /// A place for a payer's stream on the page of `token`, from `client`.
    pub(crate) fn payer(&self, token: &str, client: Option<IpAddr>) -> Result<StreamSlot, Refused> {
        let page = self
            .per_page
            .enter(token.to_owned())
            .ok_or(Refused::Page(self.per_page.max()))?;
        let client = match client {
            Some(ip) => Some(
                self.per_client
                    .enter(client_key(ip))
                    .ok_or(Refused::Client(self.per_client.max()))?,
            ),
            None => None,
        };
        let permit = Arc::clone(&self.payers)
            .try_acquire_owned()
            .map_err(|_| Refused::Payers(self.payer_share))?;
        Ok(StreamSlot {
            _permit: permit,
            _page: Some(page),
            _client: client,
        })
    }

    /// A place for the storefront's (or support's) stream.
    pub(crate) fn storefront(&self) -> Result<StreamSlot, Refused> {
        let permit = Arc::clone(&self.storefront)
            .try_acquire_owned()
            .map_err(|_| Refused::Storefront(self.storefront_share))?;
        Ok(StreamSlot {
            _permit: permit,
            _page: None,
            _client: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_never_takes_another_pages_or_the_storefronts_place() {
        let b = StreamBudget::new(16, 3, 100);
        let first: Vec<StreamSlot> = (0..3).map(|_| b.payer("a", None).unwrap()).collect();
        assert_eq!(b.payer("a", None).unwrap_err(), Refused::Page(3));
        let others: Vec<StreamSlot> = (0..9)
            .map(|n| b.payer(&format!("p{n}"), None).unwrap())
            .collect();
        assert_eq!(b.payer("late", None).unwrap_err(), Refused::Payers(12));
        let store: Vec<StreamSlot> = (0..4).map(|_| b.storefront().unwrap()).collect();
        assert_eq!(b.storefront().unwrap_err(), Refused::Storefront(4));
        drop(first);
        assert!(
            b.payer("a", None).is_ok(),
            "a closed stream frees its page's place"
        );
        drop((others, store));
    }

    /// Issue 38: many pages from one client (an IPv6 host by its /64) take
    /// at most the client's places; another client is still served, and a
    /// refusal for the client leaves the page's count as it was.
    #[test]
    fn one_client_never_takes_the_payers_share_over_many_pages() {
        let b = StreamBudget::new(64, 8, 4);
        let host =
            |n: u16| -> Option<IpAddr> { Some(format!("2001:db8:0:1::{n}").parse().unwrap()) };
        let held: Vec<StreamSlot> = (0..4)
            .map(|n| b.payer(&format!("page-{n}"), host(n + 1)).unwrap())
            .collect();
        assert_eq!(
            b.payer("page-9", host(99)).unwrap_err(),
            Refused::Client(4),
            "another address of the same /64"
        );
        assert_eq!(b.per_page.held(&"page-9".to_owned()), 0);
        let elsewhere: Option<IpAddr> = Some("198.51.100.7".parse().unwrap());
        let _other = b.payer("page-9", elsewhere).unwrap();
        drop(held);
        assert!(
            b.payer("page-10", host(5)).is_ok(),
            "freed with its streams"
        );
    }
}

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
//!   place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Open streams per view token.
type PerPage = Arc<Mutex<HashMap<String, usize>>>;

#[derive(Debug)]
pub(crate) struct StreamBudget {
    payers: Arc<Semaphore>,
    payer_share: usize,
    storefront: Arc<Semaphore>,
    storefront_share: usize,
    per_page_max: usize,
    per_page: PerPage,
}

/// Why a stream was not opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// This view token already holds its most streams.
    Page(usize),
    /// Payers hold their whole share.
    Payers(usize),
    /// The storefront holds its whole share.
    Storefront(usize),
}

/// A place held for as long as its stream is open.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    page: Option<(PerPage, String)>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some((per_page, token)) = &self.page {
            let mut open = per_page.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = open.get_mut(token) {
                *n -= 1;
                if *n == 0 {
                    open.remove(token);
                }
            }
        }
    }
}

impl StreamBudget {
    pub(crate) fn new(max_streams: usize, per_page_max: usize) -> StreamBudget {
        let max_streams = max_streams.max(2);
        let storefront_share = (max_streams / 4).max(1);
        let payer_share = max_streams - storefront_share;
        StreamBudget {
            payers: Arc::new(Semaphore::new(payer_share)),
            payer_share,
            storefront: Arc::new(Semaphore::new(storefront_share)),
            storefront_share,
            per_page_max: per_page_max.max(1),
            per_page: Arc::default(),
        }
    }

    /// A place for a payer's stream on the page of `token`.
    pub(crate) fn payer(&self, token: &str) -> Result<StreamSlot, Refused> {
        let mut open = self.per_page.lock().unwrap_or_else(|e| e.into_inner());
        let held = open.get(token).copied().unwrap_or(0);
        if held >= self.per_page_max {
            return Err(Refused::Page(self.per_page_max));
        }
        let permit = Arc::clone(&self.payers)
            .try_acquire_owned()
            .map_err(|_| Refused::Payers(self.payer_share))?;
        open.insert(token.to_owned(), held + 1);
        Ok(StreamSlot {
            _permit: permit,
            page: Some((Arc::clone(&self.per_page), token.to_owned())),
        })
    }

    /// A place for the storefront's (or support's) stream.
    pub(crate) fn storefront(&self) -> Result<StreamSlot, Refused> {
        let permit = Arc::clone(&self.storefront)
            .try_acquire_owned()
            .map_err(|_| Refused::Storefront(self.storefront_share))?;
        Ok(StreamSlot {
            _permit: permit,
            page: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_never_takes_another_pages_or_the_storefronts_place() {
        let b = StreamBudget::new(16, 3);
        let first: Vec<StreamSlot> = (0..3).map(|_| b.payer("a").unwrap()).collect();
        assert_eq!(b.payer("a").unwrap_err(), Refused::Page(3));
        let others: Vec<StreamSlot> = (0..9).map(|n| b.payer(&format!("p{n}")).unwrap()).collect();
        assert_eq!(b.payer("late").unwrap_err(), Refused::Payers(12));
        let store: Vec<StreamSlot> = (0..4).map(|_| b.storefront().unwrap()).collect();
        assert_eq!(b.storefront().unwrap_err(), Refused::Storefront(4));
        drop(first);
        assert!(
            b.payer("a").is_ok(),
            "a closed stream frees its page's place"
        );
        drop((others, store));
    }
}

//! The balance backstop (issue 37). Where money can reach an address with
//! no transfer the source reports (Ethereum without traces: ETH a Safe, a
//! 4337 account or a batch sender passes on; Tron on a node that keeps no
//! internal transactions: TRX a payout contract sends), the node's balance
//! of each address of an open or recently ended intent is compared, at each
//! new final height, with the native coin paywatch recorded arriving there.
//! More at the node is money no transfer explains: it is recorded once per
//! address and amount (`balance_gaps`), raised as `unexplained_balance`
//! and listed for operators. It never settles or changes an intent: a
//! person looks at the chain and decides.
//!
//! An address that has sent anything (a merchant's sweep) cannot be
//! compared: its balance no longer adds up what it received. It is skipped,
//! and counted so.

use paywatch_core::{Asset, BalanceReads, BlockSource, CanonicalStream, Network};
use tracing::{debug, warn};

use super::{Watcher, RECENT_OVERLAP_MS};
use crate::store::{Finding, StoreError, WatchedAddress};

/// Addresses per balance request (two calls each on Ethereum, in one batch).
const PAGE: i64 = 50;
/// Pages per rise of the final height where a page is one batched request
/// (Ethereum, whose final height rises once an epoch): a round over many
/// addresses spreads over several heights, and a step stays short.
const PAGES_PER_RISE: usize = 4;
/// Where each address is a request of its own (Tron, whose solidified
/// height rises every block), one page at most this often, so the backstop
/// takes little of a provider's request budget.
const LATEST_PAGE_EVERY_MS: i64 = 15_000;

/// The backstop's progress, kept by the watcher between steps.
#[derive(Debug, Default)]
pub(super) struct Backstop {
    /// The final height last compared at.
    compared_at: Option<u64>,
    /// When a page was last compared.
    paged_at: Option<i64>,
    /// The last intent id of the round so far.
    after: i64,
}

/// The native coin a network's balances are in.
fn native(network: Network) -> Option<Asset> {
    match network {
        Network::Ethereum => Some(Asset::Eth),
        Network::Tron => Some(Asset::Trx),
        _ => None,
    }
}

/// What comparing one address says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It sent something: its balance cannot be compared.
    Swept,
    /// The node holds no more than was recorded.
    Explained,
    /// The node holds this much more than was recorded.
    Unexplained(u128),
}

/// The comparison rule, apart from the node and the database.
pub(crate) fn compare(node_balance: u128, has_sent: bool, counted: u128) -> Verdict {
    if has_sent {
        return Verdict::Swept;
    }
    match node_balance.checked_sub(counted) {
        Some(more) if more > 0 => Verdict::Unexplained(more),
        _ => Verdict::Explained,
    }
}

impl Watcher {
    /// Compares a page or a few of addresses once the final height rose,
    /// on a step that found the watcher caught up: a full node keeps the
    /// state of recent blocks only, and a step stays short while catching
    /// up. Best effort: it never fails or holds back the step; what is not
    /// compared now is at a later height.
    pub(super) async fn backstop_step<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
        final_height: u64,
        rescanning: bool,
    ) {
        let network = self.cfg.network;
        let (Some(reads), Some(asset)) = (stream.source().balance_backstop(), native(network))
        else {
            return;
        };
        let risen = self.backstop.compared_at.is_none_or(|h| final_height > h);
        // A rescan under way may still record what the balances show.
        if final_height == 0 || !risen || rescanning {
            return;
        }
        let now = self.now();
        let pages = match reads {
            BalanceReads::AtHeight => PAGES_PER_RISE,
            BalanceReads::LatestFinal
                if self
                    .backstop
                    .paged_at
                    .is_some_and(|at| now - at < LATEST_PAGE_EVERY_MS) =>
            {
                return;
            }
            BalanceReads::LatestFinal => 1,
        };
        self.backstop.paged_at = Some(now);
        let cursor = stream.cursor_tip().map_or(0, |c| c.height);
        if let Err(e) = self
            .backstop_pages(stream, reads, asset, final_height, cursor, pages)
            .await
        {
            warn!(error = %e, "balance backstop: the database failed; compared again at a later height");
            return;
        }
        self.backstop.compared_at = Some(final_height);
    }

    async fn backstop_pages<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
        reads: BalanceReads,
        asset: Asset,
        final_height: u64,
        cursor: u64,
        pages: usize,
    ) -> Result<(), StoreError> {
        let network = self.cfg.network;
        let now = self.now();
        let ended_within_ms =
            i64::try_from(self.cfg.backstop_after_end.as_millis()).unwrap_or(i64::MAX);
        // Only addresses the watch set held for every block read since they
        // were issued: one issued after its last refresh may be paid in a
        // block read without it, which the next refresh reads again.
        let issued_before = self
            .refreshed_at
            .map_or(i64::MIN, |r| r - RECENT_OVERLAP_MS);
        for _ in 0..pages {
            let page: Vec<WatchedAddress> = self
                .deps
                .store
                .backstop_addresses(
                    network,
                    now.saturating_sub(ended_within_ms),
                    issued_before,
                    self.backstop.after,
                    PAGE,
                )
                .await?;
            let full = i64::try_from(page.len()).unwrap_or(i64::MAX) >= PAGE;
            let round_over = !full;
            let last = page.last().map(|a| a.intent_id);
            let compared = self
                .backstop_compare(stream, reads, asset, final_height, cursor, &page)
                .await?;
            if !compared {
                return Ok(()); // the node could not tell: the same page next time
            }
            match (round_over, last) {
                (false, Some(id)) => self.backstop.after = id,
                _ => {
                    self.backstop.after = 0;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Compares one page; false when the node's balances could not be had.
    async fn backstop_compare<S: BlockSource>(
        &mut self,
        stream: &CanonicalStream<S>,
        reads: BalanceReads,
        asset: Asset,
        final_height: u64,
        cursor: u64,
        page: &[WatchedAddress],
    ) -> Result<bool, StoreError> {
        let network = self.cfg.network;
        if page.is_empty() {
            return Ok(true);
        }
        let addresses: Vec<String> = page.iter().map(|a| a.address.clone()).collect();
        let balances = match stream
            .source()
            .native_balances(&addresses, final_height)
            .await
        {
            Ok(Some(b)) if b.len() == addresses.len() => b,
            Ok(_) => return Ok(false),
            Err(e) => {
                self.metrics.record_source_error();
                warn!(error = %e, "balance backstop: balances unreadable this round; blocks go on");
                return Ok(false);
            }
        };
        // Up to which height the recorded money is counted: exactly the
        // balance's on a source that reads at a height; on one that reads
        // the latest final state, everything read so far, and only once the
        // node's final height (read after the balances) is within it, so
        // money in a block not read yet never looks unexplained.
        let upto = match reads {
            BalanceReads::AtHeight => final_height,
            BalanceReads::LatestFinal => {
                match stream.source().final_height().await {
                    Ok(after) if after <= cursor => cursor,
                    Ok(after) => {
                        debug!(node_final = after, cursor, "balance backstop: the node's final state is past the blocks read; later");
                        return Ok(false);
                    }
                    Err(e) => {
                        self.metrics.record_source_error();
                        warn!(error = %e, "balance backstop: final height unreadable; later");
                        return Ok(false);
                    }
                }
            }
        };
        let (mut checked, mut swept) = (0u64, 0u64);
        for (a, b) in page.iter().zip(balances) {
            let counted = self
                .deps
                .store
                .counted_native(network, asset, &a.address, upto)
                .await?;
            checked += 1;
            match compare(b.balance, b.has_sent, counted) {
                Verdict::Swept => {
                    swept += 1;
                    debug!(address = %a.address, intent = a.intent_id, "balance backstop: the address has sent; not compared");
                }
                Verdict::Explained => {}
                Verdict::Unexplained(more) => {
                    let finding = Finding {
                        network,
                        address: &a.address,
                        intent_id: a.intent_id,
                        height: final_height,
                        node_balance: b.balance,
                        counted,
                    };
                    if let Some(id) = self
                        .deps
                        .store
                        .record_balance_gap(&finding, self.now())
                        .await?
                    {
                        self.metrics.record_unexplained_balance();
                        warn!(
                            alert = "unexplained_balance",
                            gap = id,
                            address = %a.address,
                            intent = a.intent_id,
                            height = final_height,
                            node_balance = %b.balance,
                            counted = %counted,
                            unexplained = %more,
                            asset = %asset,
                            "money arrived that no transfer explains (a contract's payment the \
                             source cannot see); listed in the review queue for an operator, \
                             the intent is left as it is"
                        );
                    }
                }
            }
        }
        self.metrics.record_backstop(checked, swept);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unswept_address_holding_more_than_recorded_is_a_gap() {
        assert_eq!(compare(5, false, 5), Verdict::Explained);
        assert_eq!(compare(4, false, 5), Verdict::Explained);
        assert_eq!(compare(0, false, 0), Verdict::Explained);
        assert_eq!(compare(7, false, 5), Verdict::Unexplained(2));
        // Swept: its balance says nothing, whatever it is.
        assert_eq!(compare(7, true, 5), Verdict::Swept);
        assert_eq!(compare(0, true, 5), Verdict::Swept);
    }

    #[test]
    fn only_native_coins_are_compared() {
        assert_eq!(native(Network::Ethereum), Some(Asset::Eth));
        assert_eq!(native(Network::Tron), Some(Asset::Trx));
        assert_eq!(native(Network::Bitcoin), None);
        assert_eq!(native(Network::Solana), None);
    }
}

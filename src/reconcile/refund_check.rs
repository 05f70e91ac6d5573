//! A refund checked on chain (issue 36): the transactions support recorded
//! with `refund_sent` (one, or several where the money owed is in two
//! assets or the first paid short), as the watcher of the network the
//! money came on recorded them. Its destination is watched from `refund_required` on, so
//! every row of the refund's transaction paying it is recorded like a
//! payment: final by the network's rule, taken back by a reorg in the one
//! place reorgs are handled, seen in the mempool where the node shows it.
//!
//! | state              | when                                                   |
//! |--------------------|--------------------------------------------------------|
//! | `required`         | no transaction recorded yet                            |
//! | `sent_unconfirmed` | recorded; not yet final paying the destination         |
//! | `refunded`         | final, succeeded, paying the destination at least what is owed in each asset |
//! | `mismatch`         | final but wrong (reverted, too little, another asset or address), or not seen by its deadline |
//! | `unchecked`        | sent before paywatch checked refunds: never judged     |
//!
//! A mismatch opens a case (`needs_review`, reason `refund_mismatch`) with
//! the reason in a sentence; support records the transaction that makes it
//! right with `refund_sent` again, judged together with those before. A refund that settles late (seen after a "not
//! seen" mismatch) still becomes `refunded`: the verdict is read again from
//! the rows at every look, never kept as a fact of its own.

use paywatch_core::{Amount, AssetId, Method, Network};

use super::status::named;
use crate::store::{RefundRow, TransferRecord, MEMPOOL_BLOCK};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefundState {
    Required,
    SentUnconfirmed,
    Refunded,
    Mismatch,
    Unchecked,
}

named!(RefundState, "refund state", {
    Required => "required",
    SentUnconfirmed => "sent_unconfirmed",
    Refunded => "refunded",
    Mismatch => "mismatch",
    Unchecked => "unchecked",
});

/// What the chain says of one refund now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefundCheck {
    pub state: RefundState,
    /// Why it does not match, in a sentence for an operator.
    pub mismatch: Option<String>,
}

impl RefundCheck {
    fn is(state: RefundState) -> RefundCheck {
        RefundCheck {
            state,
            mismatch: None,
        }
    }

    fn mismatch(why: String) -> RefundCheck {
        RefundCheck {
            state: RefundState::Mismatch,
            mismatch: Some(why),
        }
    }

    /// To be written: it differs from what the store holds for `r`, `r`
    /// passed its deadline since it was last judged (so it is not looked
    /// up as past its deadline again), or `r` has no network recorded yet.
    pub fn to_write(&self, r: &RefundRow, now_ms: i64) -> bool {
        let unjudged_past_deadline = r
            .check_by_ms
            .is_some_and(|by| now_ms > by && r.checked_at_ms.is_none_or(|at| at <= by));
        self.state != r.state || self.mismatch != r.mismatch || unjudged_past_deadline || !r.placed
    }
}

/// The refund `r` owes `owed` (by asset, base units); `rows` are every row
/// recorded for its transactions on its network, orphaned ones included.
/// Its transactions are judged together: what they pay the destination in
/// each asset, once all of them that pay it are final.
pub(crate) fn check(
    r: &RefundRow,
    owed: &[(AssetId, u128)],
    rows: &[&TransferRecord],
    final_height: Option<u64>,
    now_ms: i64,
) -> RefundCheck {
    if r.txids.is_empty() {
        return RefundCheck::is(RefundState::Required);
    }
    if r.state == RefundState::Unchecked {
        return RefundCheck::is(RefundState::Unchecked);
    }
    let sent = match r.txids.as_slice() {
        [one] => format!("transaction {one}"),
        many => format!("transactions {}", many.join(" and ")),
    };
    let is_final = |t: &TransferRecord| {
        t.block_hash != MEMPOOL_BLOCK
            && (t.final_at_ms.is_some() || final_height.is_some_and(|h| t.final_from() <= h))
    };
    let live: Vec<&TransferRecord> = rows
        .iter()
        .copied()
        .filter(|t| {
            t.orphaned_at_ms.is_none() && t.network == r.network && r.txids.contains(&t.txid)
        })
        .collect();
    let paying: Vec<&TransferRecord> = live
        .iter()
        .copied()
        .filter(|t| t.to == r.destination)
        .collect();
    // A transaction support recorded and the chain has not shown yet is
    // awaited until the deadline, unless what was seen pays the refund in
    // full already: the one that makes up a refund is often recorded
    // before it is mined, and one recorded by mistake never is.
    let before_deadline = r.check_by_ms.is_none_or(|by| now_ms <= by);
    let awaiting = before_deadline && r.txids.iter().any(|x| !live.iter().any(|t| t.txid == *x));
    if paying.is_empty() {
        if awaiting {
            return RefundCheck::is(RefundState::SentUnconfirmed);
        }
        if let Some(elsewhere) = live.iter().find(|t| is_final(t)) {
            return RefundCheck::mismatch(format!(
                "{sent} pays {}, not the refund's destination {}",
                elsewhere.to, r.destination
            ));
        }
        if !before_deadline {
            return RefundCheck::mismatch(format!(
                "no transfer to {} in {sent} was seen on {} by the refund's deadline: \
                 it may pay another address, have failed, or never have been broadcast",
                r.destination, r.network
            ));
        }
        return RefundCheck::is(RefundState::SentUnconfirmed);
    }
    if !paying.iter().all(|t| is_final(t)) {
        return RefundCheck::is(RefundState::SentUnconfirmed);
    }
    let failed = paying.iter().find(|t| !t.success);
    let moved: Vec<&TransferRecord> = paying.iter().copied().filter(|t| t.success).collect();
    let reverted = |t: &TransferRecord| {
        RefundCheck::mismatch(format!(
            "transaction {} failed on {} (reverted): it moved nothing to {}",
            t.txid, r.network, r.destination
        ))
    };
    let paid_in = |asset: &AssetId| -> u128 {
        moved
            .iter()
            .filter(|t| t.asset == *asset)
            .map(|t| t.amount.0)
            .sum()
    };
    if !moved.is_empty() && owed.iter().all(|(asset, amount)| paid_in(asset) >= *amount) {
        return RefundCheck::is(RefundState::Refunded);
    }
    if awaiting {
        return RefundCheck::is(RefundState::SentUnconfirmed);
    }
    if moved.is_empty() {
        if let Some(t) = failed {
            return reverted(t);
        }
    }
    for (asset, amount) in owed {
        let paid = paid_in(asset);
        if paid >= *amount {
            continue;
        }
        // A reverted transaction is the likeliest reason money is missing.
        if let Some(t) = failed {
            return reverted(t);
        }
        if paid == 0 {
            let other = moved
                .iter()
                .map(|t| shown(r.network, &t.asset, t.amount.0))
                .collect::<Vec<_>>()
                .join(" and ");
            return RefundCheck::mismatch(format!(
                "{sent} pays {other} to {}, where {} is owed",
                r.destination,
                shown(r.network, asset, *amount)
            ));
        }
        return RefundCheck::mismatch(format!(
            "{sent} pays {} to {}, less than the {} owed",
            shown(r.network, asset, paid),
            r.destination,
            shown(r.network, asset, *amount)
        ));
    }
    RefundCheck::is(RefundState::Refunded)
}

/// An amount as an operator reads it: in coins where the asset is one of
/// the network's methods, else in base units.
fn shown(network: Network, asset: &AssetId, amount: u128) -> String {
    match asset {
        AssetId::Known(a) => match Method::new(*a, network) {
            Ok(m) => format!("{} {a}", Amount(amount).to_decimal_string(m.decimals())),
            Err(_) => format!("{amount} base units of {a}"),
        },
        AssetId::Token { contract } => format!("{amount} base units of token {contract}"),
    }
}

/// What a refund owes, by asset: the payments its `refund_required`
/// claimed (each once, however often it was recorded, and only while a
/// sighting of it stands on chain), or, for an overpayment's excess, which
/// claims none, the excess in the intent's asset. Tokens of no method
/// (address-poisoning spam a claim may sweep up) are owed to nobody.
pub(crate) fn owed(
    claimed: &[TransferRecord],
    excess: u128,
    method: Method,
) -> Vec<(AssetId, u128)> {
    let mut seen: Vec<(&str, u32, Network)> = Vec::new();
    let mut owed: Vec<(AssetId, u128)> = Vec::new();
    let stands = |t: &TransferRecord| {
        claimed.iter().any(|o| {
            o.orphaned_at_ms.is_none()
                && (o.txid.as_str(), o.index, o.network) == (t.txid.as_str(), t.index, t.network)
        })
    };
    for t in claimed {
        if matches!(t.asset, AssetId::Token { .. })
            || seen.contains(&(t.txid.as_str(), t.index, t.network))
            || !stands(t)
        {
            continue;
        }
        seen.push((t.txid.as_str(), t.index, t.network));
        match owed.iter_mut().find(|(a, _)| *a == t.asset) {
            Some((_, sum)) => *sum += t.amount.0,
            None => owed.push((t.asset.clone(), t.amount.0)),
        }
    }
    let claims_money = claimed
        .iter()
        .any(|t| !matches!(t.asset, AssetId::Token { .. }));
    if !claims_money && excess > 0 {
        owed.push((AssetId::Known(method.asset()), excess));
    }
    owed
}

#[cfg(test)]
mod tests {
    use paywatch_core::Asset;

    use super::*;

    const DEST: &str = "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s";

    fn refund(txid: Option<&str>, check_by_ms: Option<i64>) -> RefundRow {
        RefundRow {
            intent_id: 1,
            network: Network::Litecoin,
            destination: DEST.into(),
            txid: txid.map(str::to_owned),
            txids: txid.iter().map(|t| t.to_string()).collect(),
            state: RefundState::SentUnconfirmed,
            check_by_ms,
            checked_at_ms: None,
            mismatch: None,
            placed: true,
        }
    }

    fn row(to: &str, amount: u128, height: u64, success: bool) -> TransferRecord {
        TransferRecord {
            id: 1,
            network: Network::Litecoin,
            asset: AssetId::Known(Asset::Ltc),
            txid: "aa".repeat(32),
            index: 0,
            block_hash: "b".into(),
            block_height: height,
            block_time_ms: 0,
            to: to.into(),
            from: None,
            amount: Amount(amount),
            success,
            first_seen_ms: 0,
            final_at_ms: None,
            orphaned_at_ms: None,
            matures_at: None,
            next_block_time_ms: 0,
        }
    }

    fn ltc(amount: u128) -> Vec<(AssetId, u128)> {
        vec![(AssetId::Known(Asset::Ltc), amount)]
    }

    #[test]
    fn a_refund_is_refunded_only_once_final_paying_at_least_what_is_owed() {
        let txid = "aa".repeat(32);
        let r = refund(Some(&txid), Some(1_000));
        let paid = row(DEST, 100, 10, true);
        assert_eq!(
            check(&r, &ltc(100), &[&paid], Some(9), 0).state,
            RefundState::SentUnconfirmed
        );
        assert_eq!(
            check(&r, &ltc(100), &[&paid], Some(10), 0).state,
            RefundState::Refunded
        );
        let short = check(&r, &ltc(101), &[&paid], Some(10), 0);
        assert_eq!(short.state, RefundState::Mismatch);
        assert!(short.mismatch.unwrap().contains("less than"));
    }

    #[test]
    fn a_refund_never_seen_by_its_deadline_or_reverted_or_elsewhere_is_a_mismatch() {
        let txid = "aa".repeat(32);
        let r = refund(Some(&txid), Some(1_000));
        assert_eq!(
            check(&r, &ltc(1), &[], Some(10), 1_000).state,
            RefundState::SentUnconfirmed
        );
        let late = check(&r, &ltc(1), &[], Some(10), 1_001);
        assert!(late.mismatch.unwrap().contains("by the refund's deadline"));
        let failed = row(DEST, 1, 10, false);
        assert!(check(&r, &ltc(1), &[&failed], Some(10), 0)
            .mismatch
            .unwrap()
            .contains("failed"));
        let elsewhere = row("ltc1qother", 1, 10, true);
        assert!(check(&r, &ltc(1), &[&elsewhere], Some(10), 0)
            .mismatch
            .unwrap()
            .contains("not the refund's destination"));
        let mut gone = row(DEST, 1, 10, true);
        gone.orphaned_at_ms = Some(5);
        assert_eq!(
            check(&r, &ltc(1), &[&gone], Some(10), 0).state,
            RefundState::SentUnconfirmed,
            "a refund a reorg took out waits to be mined again"
        );
    }

    #[test]
    fn a_refund_owed_in_two_assets_is_paid_by_two_transactions_judged_together() {
        let (first, second) = ("aa".repeat(32), "bb".repeat(32));
        let mut r = refund(Some(&second), Some(1_000));
        r.txids = vec![first.clone(), second.clone()];
        let owed = vec![
            (AssetId::Known(Asset::Ltc), 100),
            (AssetId::Known(Asset::Usdc), 7),
        ];
        let mut ltc_back = row(DEST, 100, 10, true);
        ltc_back.txid = first.clone();
        let mut usdc_back = row(DEST, 7, 10, true);
        usdc_back.txid = second.clone();
        usdc_back.asset = AssetId::Known(Asset::Usdc);
        assert_eq!(
            check(&r, &owed, &[&ltc_back], Some(10), 0).state,
            RefundState::SentUnconfirmed,
            "the second is awaited until the deadline"
        );
        let alone = check(&r, &owed, &[&ltc_back], Some(10), 1_001);
        assert!(
            alone
                .mismatch
                .as_deref()
                .is_some_and(|m| m.contains("where")),
            "{alone:?}"
        );
        assert_eq!(
            check(&r, &owed, &[&ltc_back, &usdc_back], Some(10), 0).state,
            RefundState::Refunded
        );
        // A transaction recorded for another refund is not this one's.
        let mut stranger = usdc_back.clone();
        stranger.txid = "cc".repeat(32);
        assert_eq!(
            check(&r, &owed, &[&ltc_back, &stranger], Some(10), 1_001).state,
            RefundState::Mismatch
        );
    }

    #[test]
    fn a_transaction_recorded_by_mistake_never_holds_up_a_refund_paid_in_full() {
        let (never, paid_by) = ("aa".repeat(32), "bb".repeat(32));
        let mut r = refund(Some(&paid_by), Some(1_000));
        r.txids = vec![never, paid_by.clone()];
        let mut paid = row(DEST, 100, 10, true);
        paid.txid = paid_by;
        assert_eq!(
            check(&r, &ltc(100), &[&paid], Some(10), 0).state,
            RefundState::Refunded
        );
    }

    #[test]
    fn a_reverted_refund_made_good_by_the_next_transaction_is_refunded() {
        let (first, second) = ("aa".repeat(32), "bb".repeat(32));
        let mut r = refund(Some(&second), Some(1_000));
        r.txids = vec![first.clone(), second.clone()];
        let mut reverted = row(DEST, 100, 10, false);
        reverted.txid = first;
        let mut paid = row(DEST, 100, 11, true);
        paid.txid = second;
        assert_eq!(
            check(&r, &ltc(100), &[&reverted], Some(11), 0).state,
            RefundState::SentUnconfirmed,
            "the second is awaited until the deadline"
        );
        let only_reverted = check(&r, &ltc(100), &[&reverted], Some(11), 1_001);
        assert!(only_reverted.mismatch.unwrap().contains("failed"));
        assert_eq!(
            check(&r, &ltc(100), &[&reverted, &paid], Some(10), 0).state,
            RefundState::SentUnconfirmed,
            "the second is not final yet"
        );
        assert_eq!(
            check(&r, &ltc(100), &[&reverted, &paid], Some(11), 0).state,
            RefundState::Refunded
        );
    }

    #[test]
    fn what_a_refund_owes_counts_each_claimed_payment_once_by_asset() {
        let a = row("x", 5, 1, true);
        let again = row("x", 5, 2, true);
        let mut usdc = row("x", 7, 1, true);
        usdc.index = 1;
        usdc.asset = AssetId::Known(Asset::Usdc);
        let m = Method::new(Asset::Ltc, Network::Litecoin).unwrap();
        assert_eq!(
            owed(&[a, again, usdc], 0, m),
            vec![
                (AssetId::Known(Asset::Ltc), 5),
                (AssetId::Known(Asset::Usdc), 7)
            ]
        );
        assert_eq!(owed(&[], 9, m), ltc(9));
    }

    #[test]
    fn spam_tokens_and_payments_a_reorg_took_out_are_owed_to_nobody() {
        let m = Method::new(Asset::Ltc, Network::Litecoin).unwrap();
        let mut spam = row("x", 1_000, 1, true);
        spam.asset = AssetId::Token {
            contract: "0xdeadbeef".into(),
        };
        let mut gone = row("x", 5, 1, true);
        gone.index = 2;
        gone.orphaned_at_ms = Some(1);
        let paid = row("x", 7, 1, true);
        assert_eq!(owed(&[spam, gone, paid], 0, m), ltc(7));
    }
}

//! An overpayment's excess credited to the payer's USD balance, when
//! support accepts it instead of refunding it. The order or top-up is paid
//! for its price by its settlement; the excess is a separate ledger entry
//! (`adjustment`), worth the excess at the rate the intent locked, and it
//! follows the settlement through reorgs: taken back when the settlement is
//! reversed, posted again when it is credited again.

use crate::store::{DecisionRow, IntentRecord, LedgerPosting, SettlementRow};

use super::facts::Action;

/// What `excess` base units of `intent`'s method are worth in USD cents at
/// the rate it locked (its price over its amount due), rounded down so the
/// balance never gains more than the money was worth. `None` when the
/// figure does not fit in cents (an absurd amount: refund it instead).
pub(crate) fn cents_of(intent: &IntentRecord, excess: u128) -> Option<i64> {
    worth(intent.usd_cents, intent.amount_due.0, excess)
}

fn worth(price_cents: i64, due: u128, excess: u128) -> Option<i64> {
    let cents = u128::try_from(price_cents).ok()?;
    if due == 0 {
        return None;
    }
    i64::try_from(excess.checked_mul(cents)? / due).ok()
}

/// The accept of `intent`'s excess, if support accepted one: an accept
/// recorded once the intent had settled by its own money (an accept before
/// that settled the intent instead) that names no payment, as the excess
/// was part of the payment that settled. An accept naming payments after
/// a reorg reversed that settlement is support settling it again, never an
/// excess (`names_payments` tells, by decision id).
pub(crate) fn accepted<'d>(
    intent: &IntentRecord,
    settlement: &SettlementRow,
    decisions: &'d [DecisionRow],
    names_payments: impl Fn(i64) -> bool,
) -> Option<&'d DecisionRow> {
    if settlement.via != "chain" {
        return None;
    }
    decisions.iter().find(|d| {
        d.intent_id == intent.id
            && d.action == Action::Accept
            && d.at_ms >= settlement.settled_at_ms
            && d.amount > 0
            && !names_payments(d.id)
    })
}

/// The ledger entry crediting (`cents` > 0) or taking back (`cents` < 0)
/// the excess; `round` numbers the credits after a reversal, like a
/// top-up's, so each entry's key is new and each is posted once.
pub(crate) fn posting(intent: &IntentRecord, cents: i64, round: i64) -> LedgerPosting<'_> {
    let entry_key = match (cents > 0, round) {
        (true, r) if r <= 1 => format!("excess:{}", intent.id),
        (true, r) => format!("excess:{}:{r}", intent.id),
        (false, r) => format!("excess_reversal:{}:{r}", intent.id),
    };
    LedgerPosting {
        account: &intent.account,
        usd_cents: cents,
        entry_kind: "adjustment",
        entry_key,
        intent_id: Some(intent.id),
        memo: format!(
            "excess paid on {} {}{}",
            intent.kind.as_str(),
            intent.reference,
            if cents > 0 { "" } else { ", taken back" }
        ),
        returns_entry: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_excess_is_worth_its_share_of_the_price_rounded_down() {
        let price = |excess| worth(10_000, 100_000_000, excess);
        assert_eq!(price(50_000_000), Some(5_000));
        assert_eq!(price(9_999), Some(0));
        assert_eq!(price(10_000), Some(1));
        assert_eq!(price(u128::MAX), None);
        assert_eq!(worth(10_000, 0, 1), None);
    }
}

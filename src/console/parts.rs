//! Fragments more than one page shows the same way.

use paywatch_core::Amount;

use super::html::Html;
use crate::store::{CaseTransfer, IntentRecord};

/// A link to a case, `#12`.
pub(crate) fn case_link(h: &mut Html, id: i64) {
    h.raw("<a href=\"/console/cases/")
        .text(id)
        .raw("\">#")
        .text(id)
        .raw("</a>");
}

/// What an intent is for, as a person names it: `order ref-1 (acct-1)`.
pub(crate) fn what(i: &IntentRecord) -> String {
    format!("{} {} ({})", i.kind.as_str(), i.reference, i.account)
}

/// The amount due in coin, exactly, with its asset and network.
pub(crate) fn amount_due(i: &IntentRecord) -> String {
    format!(
        "{} {} on {}",
        i.amount_due.to_decimal_string(i.method.decimals()),
        i.method.asset().as_str(),
        i.method.network().as_str()
    )
}

/// A transfer's amount: in coin when it is the intent's own asset on the
/// intent's network (its decimals are known), else in base units as the
/// chain reported it, so nothing is ever shown at a wrong scale.
pub(crate) fn transfer_amount(t: &CaseTransfer, i: &IntentRecord) -> String {
    let own = t.asset == i.method.asset().as_str() && t.network == i.method.network().as_str();
    match Amount::parse_base_units("amount", &t.amount) {
        Ok(a) if own => format!("{} {}", a.to_decimal_string(i.method.decimals()), t.asset),
        _ => format!("{} base units of {}", t.amount, t.asset),
    }
}

/// A transfer's state in a few words: status, confirmations, finality,
/// whether it counts toward the intent, and whether a reorg dropped it.
pub(crate) fn transfer_state(t: &CaseTransfer) -> String {
    let mut s = format!("{}, {} conf", t.tx_status, t.confirmations);
    if t.is_final {
        s.push_str(", final");
    }
    s.push_str(if t.counts_toward_intent {
        ", counts"
    } else {
        ", does not count"
    });
    if t.orphaned_at_ms.is_some() {
        s.push_str(", orphaned");
    }
    s
}

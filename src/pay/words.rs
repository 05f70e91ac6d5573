//! What the payment page tells a customer, keyed on the stable reason
//! codes (and, for a code it does not know, the status). One table, served
//! to the page's script inside the page, so the first render and every
//! live update say the same thing.

/// (reason code or status, what the customer reads).
pub(crate) const WORDS: &[(&str, &str)] = &[
    ("awaiting_payment", "Waiting for your payment."),
    (
        "partly_received",
        "Part of the amount has arrived. Send the rest to the same address before the time runs out.",
    ),
    (
        "partly_unconfirmed",
        "Part of the amount is on its way and confirming. Send the rest to the same address before the time runs out.",
    ),
    (
        "seen_in_time",
        "Payment seen. It is confirming on the network; this page updates by itself.",
    ),
    (
        "confirm_deadline_passed",
        "Your payment is taking long to confirm. The shop's support will check it once it is final.",
    ),
    (
        "final_after_deadline",
        "Your payment confirmed after the time allowed. The shop's support will decide and contact you.",
    ),
    ("paid", "Paid. Thank you!"),
    ("overpaid", "Paid. More than the price arrived; the shop's support will contact you about the excess."),
    (
        "underpaid",
        "Expired with less than the amount received. The shop's support will contact you; do not send more to this address.",
    ),
    (
        "paid_late",
        "Your payment arrived after this payment expired. The shop's support will review it.",
    ),
    (
        "expired_with_pending",
        "Expired while your payment was still confirming. It will be looked at once it is final.",
    ),
    (
        "expired_unpaid",
        "This payment expired. Do not send money to this address: start a new payment at the shop.",
    ),
    (
        "wrong_asset",
        "A different coin arrived at this address. The shop's support will review it.",
    ),
    (
        "wrong_network",
        "Money arrived on a different network. The shop's support will review it.",
    ),
    (
        "paid_after_settlement",
        "This order was already paid; more money arrived. The shop's support will review it.",
    ),
    (
        "paid_late_beside_settlement",
        "This order was paid; a second payment arrived after it expired. The shop's support will review it.",
    ),
    (
        "paid_after_decision",
        "Money arrived after the shop's support closed this payment. They will review it.",
    ),
    (
        "reversed_by_reorg",
        "The network took back a payment it had confirmed. The shop's support will review it.",
    ),
    (
        "support_basis_vanished",
        "The network took back a payment it had confirmed. The shop's support will review it.",
    ),
    (
        "excess_reversed_by_reorg",
        "Paid. The network took back part of what was sent beyond the price; the shop's support will review it.",
    ),
    (
        "still_reversed",
        "The network took back a payment it had confirmed. The shop's support will review it.",
    ),
    ("resolved_by_support", "The shop's support has handled this payment."),
    ("paid_by_reassign", "Paid. Thank you!"),
    (
        "reference_paid_elsewhere",
        "This order was paid another way. Do not send money to this address.",
    ),
    (
        "refund_mismatch",
        "The shop's support is checking the refund it sent you.",
    ),
    // By status, for a code this table does not know yet.
    ("confirming", "Payment seen. It is confirming on the network."),
    ("expired", "This payment expired. Do not send money to this address."),
    ("needs_review", "The shop's support is reviewing this payment."),
    ("resolved", "The shop's support has handled this payment."),
];

/// The customer's wording for a code, else for the status.
pub(crate) fn say(reason_code: Option<&str>, status: &str) -> &'static str {
    let find = |key: &str| WORDS.iter().find(|(k, _)| *k == key).map(|(_, w)| *w);
    reason_code
        .and_then(find)
        .or_else(|| find(status))
        .unwrap_or("Checking this payment.")
}

/// The table as a JSON object, for the page's script.
pub(crate) fn as_json() -> String {
    let map: serde_json::Map<String, serde_json::Value> = WORDS
        .iter()
        .map(|(k, w)| ((*k).to_owned(), (*w).into()))
        .collect();
    serde_json::Value::Object(map).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_and_status_has_wording_for_the_customer() {
        for code in crate::reconcile::Reason::CODES {
            assert!(
                WORDS.iter().any(|(k, _)| k == &code),
                "the payment page has no wording for reason code {code}"
            );
        }
        for status in [
            "awaiting_payment",
            "confirming",
            "paid",
            "expired",
            "needs_review",
            "resolved",
        ] {
            assert_ne!(say(None, status), "Checking this payment.", "{status}");
        }
    }
}

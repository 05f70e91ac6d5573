//! The intent status contract, scenario by scenario, on the scripted chain,
//! against SQLite and PostgreSQL both.
//!
//! Amounts used throughout (see `common::rates`): 100 USD is 200,000 sat at
//! 50,000 USD/BTC, 1 LTC at 100 USD/LTC, and 100,000,000 base units of a
//! stablecoin (6 decimals) at par.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{rates, Backend, Harness};
use paywatch::clock::Clock;
use paywatch::intents::NewIntent;
use paywatch::reconcile::{Exception, Status, Tolerance};
use paywatch::store::{ApplyOutcome, Declared, IntentRecord};
use paywatch::IntentKind;
use paywatch_core::{Amount, Asset, AssetId, ChainEvent, Method, Network};

on_both_databases!(
    a_new_intent_after_an_expired_one_gets_a_new_address_and_a_new_quote,
    a_reorg_that_shortens_the_chain_above_a_final_payment_keeps_it_paid,
    a_reorg_replacing_the_final_block_lowers_finality_until_the_node_confirms_again,
    exact_payment_is_confirming_then_paid_once_final,
    topup_is_credited_once_final_and_not_before,
    // 1. split payments
    a_payment_split_over_two_transactions_is_paid_once_both_are_final,
    money_sent_to_another_intents_address_counts_only_for_that_intent,
    an_address_written_in_another_case_is_the_same_address,
    amounts_beyond_64_bits_are_exact_on_both_databases,
    // 2. underpayment
    an_underpayment_at_expiry_needs_review_as_underpaid_and_late_money_does_not_settle_it,
    // 3. overpayment
    an_overpayment_is_paid_for_its_price_and_its_excess_goes_to_review,
    // 4. late payment
    a_payment_after_expiry_with_nothing_before_is_expired_then_needs_review_as_paid_late,
    a_block_followed_by_one_stamped_at_the_expiry_is_in_time_and_one_second_later_is_late,
    // 5. wrong asset
    another_asset_at_the_address_needs_review_as_wrong_asset_without_settling,
    an_unknown_token_is_spam_and_the_native_coin_at_a_token_address_is_wrong_asset,
    a_wrong_asset_alongside_a_full_payment_settles_once_but_needs_review,
    // 6. a second payment for a paid reference
    a_second_payment_to_a_paid_topup_needs_review_as_duplicate_and_is_not_credited,
    two_intents_for_one_reference_both_paid_settle_the_first_and_flag_the_second_as_duplicate,
    a_new_intent_for_a_paid_reference_is_refused_as_conflict_and_creates_nothing,
    // 7. reorgs before finality
    a_reorg_before_finality_returns_a_confirming_payment_to_awaiting_payment,
    a_reorg_that_remines_the_payment_ends_paid_exactly_once,
    a_reorg_in_the_middle_of_a_split_payment_keeps_only_the_surviving_part,
    a_reorg_after_expiry_that_removes_the_timely_payment_leaves_the_intent_expired,
    a_reorg_after_expiry_that_remines_a_timely_payment_still_counts_it_as_timely,
    // 8. reorgs after finality
    a_reorg_after_finality_reverses_a_paid_order_for_review,
    a_reorg_after_finality_reverses_a_topup_credit_once_with_an_appended_ledger_entry,
    a_reversed_payment_that_is_mined_again_is_credited_again_by_a_new_entry,
    a_deep_reorg_that_remines_the_payment_final_in_the_same_pass_changes_nothing,
    // 9. restarts and crashes
    a_restarted_stream_resumes_from_the_persisted_cursor_without_loss_or_double_credit,
    a_new_process_on_the_same_database_picks_up_where_the_old_one_stopped,
    downtime_across_the_expiry_does_not_make_a_timely_payment_late,
    replaying_the_same_events_is_a_no_op_and_a_stale_replay_resurrects_nothing,
    a_crash_in_the_middle_of_a_batch_loses_nothing_and_doubles_nothing,
    a_batch_that_fails_half_way_writes_nothing_of_it,
    a_node_outage_mid_sync_loses_nothing,
    // 10. concurrent workers
    two_ingest_workers_racing_on_the_same_events_record_each_transfer_once,
    two_reconcilers_running_concurrently_settle_and_credit_each_reference_once,
    concurrent_intent_creation_never_issues_an_address_twice,
    // 11. bad input
    bad_requests_get_a_clear_error_code_and_leave_the_database_unchanged,
    a_missing_rate_is_rate_unavailable_and_creates_nothing,
    an_exhausted_pool_is_no_address_available_and_issues_nothing,
    unknown_references_and_intents_are_reported_as_absent,
    // 12. "I have paid"
    i_have_paid_is_recorded_with_its_time_and_changes_no_status,
    // 13. tolerance
    a_shortfall_within_the_configured_tolerance_is_paid,
    without_a_tolerance_one_base_unit_short_is_not_paid,
    // 14. failed transactions
    failed_transactions_never_count,
);

// ---------------------------------------------------------------------------
// helpers

fn assert_state(i: &IntentRecord, status: Status, exception: Option<Exception>) {
    assert_eq!(
        (i.status, i.exception),
        (status, exception),
        "intent {} is {} / {:?}: {:?}",
        i.id,
        i.status,
        i.exception,
        i.reason
    );
}

fn reason(i: &IntentRecord) -> &str {
    i.reason.as_deref().unwrap_or("")
}

fn usdt_eth() -> Method {
    Method::new(Asset::Usdt, Network::Ethereum).unwrap()
}

fn request(kind: &str, reference: &str, asset: &str, network: &str, usd: &str) -> NewIntent {
    NewIntent {
        kind: kind.into(),
        reference: reference.into(),
        account: "acct-1".into(),
        asset: asset.into(),
        network: network.into(),
        usd_amount: usd.into(),
    }
}

async fn settlements(h: &Harness) -> i64 {
    h.count("SELECT COUNT(*) FROM settlements").await
}

async fn ledger_entries(h: &Harness) -> i64 {
    h.count("SELECT COUNT(*) FROM ledger_entries").await
}

/// The intent's status changes in the outbox (settlements and ledger
/// entries have rows of their own topics beside them).
async fn outbox_for(h: &Harness, id: i64) -> i64 {
    h.count(&format!(
        "SELECT COUNT(*) FROM outbox WHERE intent_id = {id} AND topic = 'intent.status'"
    ))
    .await
}

/// The newest status payload of an intent in the outbox.
async fn last_outbox_payload(h: &Harness, id: i64) -> serde_json::Value {
    let rows = h
        .rows(&format!(
            "SELECT payload FROM outbox WHERE intent_id = {id} AND topic = 'intent.status' \
             ORDER BY id DESC"
        ))
        .await;
    let payload = rows.first().expect("an outbox row").get("payload").unwrap();
    serde_json::from_str(payload).unwrap()
}

// ---------------------------------------------------------------------------
// the original two

/// BTC with 3 confirmations: 100 USD at 50,000 USD/BTC is 200,000 sat.
async fn exact_payment_is_confirming_then_paid_once_final(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(3).await;
    let intent = h.create("order", "order-1", "BTC", "100").await;
    assert_eq!(intent.amount_due, Amount(200_000));
    assert_eq!(intent.status, Status::AwaitingPayment);

    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.status, Status::Confirming);
    assert_eq!(i.amount_pending, Amount(200_000));
    assert_eq!(i.paid_at_ms, None);

    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.status, Status::Paid);
    assert_eq!(i.exception, None);
    assert_eq!(i.amount_final, Amount(200_000));
    assert!(i.paid_at_ms.is_some());
    assert_eq!(
        h.store
            .settled_intent(paywatch::IntentKind::Order, "order-1")
            .await
            .unwrap(),
        Some(intent.id)
    );

    // Nothing more happens on later blocks: paid once.
    h.mine(5);
    h.sync().await;
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM outbox WHERE topic = 'intent.status'")
            .await,
        2
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM outbox WHERE topic = 'settlement'")
            .await,
        1,
        "the settlement has its own outbox row"
    );
}

async fn topup_is_credited_once_final_and_not_before(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(2).await;
    let intent = h.create("topup", "topup-1", "USDT", "500").await;
    assert_eq!(intent.amount_due, Amount(500_000_000));
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Confirming);
    assert_eq!(h.balance("acct-1").await, 0, "pending top-ups do not count");

    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 50_000);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 50_000, "credited exactly once");
}

// ---------------------------------------------------------------------------
// 1. split payments

/// 80,000 sat then 120,000 sat towards 200,000 sat, 2 confirmations.
async fn a_payment_split_over_two_transactions_is_paid_once_both_are_final(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(2).await;
    let intent = h.create("order", "order-split", "BTC", "100").await;
    assert_eq!(intent.amount_due, Amount(200_000));

    h.pay(&intent.address, Asset::Btc, Amount(80_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(0), Amount(80_000))
    );
    assert_eq!(
        reason(&i),
        "received 0.0008 BTC of 0.002 BTC, partly unconfirmed"
    );

    // The first part is final: still awaiting the rest, with the partial amount shown.
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(80_000), Amount(0))
    );
    assert_eq!(reason(&i), "received 0.0008 BTC of 0.002 BTC");
    let view = h.intent_view(intent.id).await;
    assert_eq!(view.get("status"), Some("awaiting_payment"));
    assert_eq!(view.get("amount_received_final"), Some("80000"));
    assert_eq!(
        h.payment_status("order", "order-split")
            .await
            .get("payment_status"),
        Some("awaiting_payment")
    );
    assert_eq!(settlements(&h).await, 0);

    h.pay(&intent.address, Asset::Btc, Amount(120_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(80_000), Amount(120_000))
    );
    assert_eq!(reason(&i), "0.002 BTC seen in time, 0.0008 BTC of it final");
    assert_eq!(i.paid_at_ms, None);

    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(
        (i.amount_final, i.amount_pending, i.amount_excess),
        (Amount(200_000), Amount(0), Amount(0))
    );
    assert!(i.paid_at_ms.is_some());
    assert_eq!(settlements(&h).await, 1);

    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(transfers.len(), 2);
    for (t, amount) in transfers.iter().zip(["80000", "120000"]) {
        assert_eq!(t.get("amount"), Some(amount));
        assert_eq!(t.int("counts_toward_intent"), 1);
        assert_eq!(t.int("is_final"), 1);
        assert_eq!(t.get("orphaned_at"), None);
    }
    let status = h.payment_status("order", "order-split").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.int("paid_intent_id"), intent.id);
    assert_eq!(status.int("paid_usd_cents"), 10_000);
    assert_eq!(
        h.status_history(intent.id).await,
        [
            "awaiting_payment",
            "confirming",
            "awaiting_payment",
            "confirming",
            "paid"
        ]
    );
    assert_eq!(outbox_for(&h, intent.id).await, 4);

    h.mine(3);
    h.sync().await;
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
}

/// Attribution is by address: paying intent A's amount to intent B's
/// address pays B (partly), never A.
async fn money_sent_to_another_intents_address_counts_only_for_that_intent(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let a = h.create("order", "order-a", "USDT", "100").await;
    let other = h.create("order", "order-b", "USDT", "500").await;
    h.pay(&other.address, Asset::Usdt, a.amount_due);
    h.mine(1);
    h.sync().await;

    let a = h.intent(a.id).await;
    assert_state(&a, Status::AwaitingPayment, None);
    assert_eq!(a.amount_final, Amount(0));
    assert!(h.intent_transfers(a.id).await.is_empty());

    let other = h.intent(other.id).await;
    assert_state(&other, Status::AwaitingPayment, None);
    assert_eq!(other.amount_final, Amount(100_000_000));
    assert_eq!(reason(&other), "received 100 USDT of 500 USDT");
    assert_eq!(settlements(&h).await, 0);
}

/// Wallets show EIP-55 mixed case; the chain and paywatch compare lower case.
async fn an_address_written_in_another_case_is_the_same_address(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-case", "USDT", "100").await;
    let shouted = format!("0x{}", intent.address[2..].to_ascii_uppercase());
    assert_ne!(shouted, intent.address);
    h.pay(&shouted, Asset::Usdt, intent.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.intent_transfers(intent.id).await.len(), 1);
}

/// 1,000,000 USD in ETH at 2,500 USD/ETH is 400 ETH: 4 * 10^20 wei, more
/// than a signed 64-bit integer holds. One wei over is an exact excess of 1.
async fn amounts_beyond_64_bits_are_exact_on_both_databases(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-big", "ETH", "1000000").await;
    let due: u128 = 400_000_000_000_000_000_000;
    assert_eq!(intent.amount_due, Amount(due));
    assert!(due > u128::from(u64::MAX));
    h.pay(&intent.address, Asset::Eth, Amount(due + 1));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, Some(Exception::Overpaid));
    assert_eq!(i.amount_final, Amount(due + 1));
    assert_eq!(i.amount_excess, Amount(1));
    assert_eq!(reason(&i), "paid 0.000000000000000001 ETH more than due");
    let view = h.intent_view(intent.id).await;
    assert_eq!(view.get("amount_due"), Some("400000000000000000000"));
    assert_eq!(
        view.get("amount_received_final"),
        Some("400000000000000000001")
    );
    assert_eq!(view.get("amount_excess"), Some("1"));
    assert_eq!(
        h.intent_transfers(intent.id).await[0].get("amount"),
        Some("400000000000000000001")
    );
}

// ---------------------------------------------------------------------------
// 2. underpayment

/// 60 of 100 USDT on Tron by the expiry: needs review; the 40 USDT that
/// comes after the expiry is recorded but does not make it paid.
async fn an_underpayment_at_expiry_needs_review_as_underpaid_and_late_money_does_not_settle_it(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Tron, 1).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-under", "USDT", "100").await;
    assert_eq!(intent.amount_due, Amount(100_000_000));

    h.pay(&intent.address, Asset::Usdt, Amount(60_000_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(i.amount_final, Amount(60_000_000));

    h.pass_expiry(&intent);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Underpaid));
    assert_eq!(
        reason(&i),
        "expired with 60 USDT of 100 USDT received in time"
    );
    assert_eq!(i.amount_final, Amount(60_000_000));
    assert_eq!(i.paid_at_ms, None);
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(h.balance("acct-1").await, 0);
    assert_eq!(
        h.balance_view("acct-1").await,
        None,
        "no ledger entry at all"
    );
    let view = h.intent_view(intent.id).await;
    assert_eq!(view.get("status"), Some("needs_review"));
    assert_eq!(view.get("exception"), Some("underpaid"));
    let status = h.payment_status("topup", "topup-under").await;
    assert_eq!(status.get("payment_status"), Some("needs_review"));
    assert_eq!(status.get("paid_intent_id"), None);
    assert_eq!(status.int("needs_review_count"), 1);
    let payload = last_outbox_payload(&h, intent.id).await;
    assert_eq!(payload["status"], "needs_review");
    assert_eq!(payload["exception"], "underpaid");
    assert_eq!(payload["paid"], false);
    assert_eq!(outbox_for(&h, intent.id).await, 1);

    // The rest arrives after the expiry: still underpaid, now with both figures.
    h.pay(&intent.address, Asset::Usdt, Amount(40_000_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Underpaid));
    assert_eq!(
        reason(&i),
        "expired with 60 USDT of 100 USDT received in time and 40 USDT after expiry"
    );
    assert_eq!(i.amount_final, Amount(100_000_000));
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(h.balance("acct-1").await, 0);
    assert_eq!(
        outbox_for(&h, intent.id).await,
        1,
        "no new status, no new event"
    );
}

// ---------------------------------------------------------------------------
// 3. overpayment

async fn an_overpayment_is_paid_for_its_price_and_its_excess_goes_to_review(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-over", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, Amount(100_500_000));
    h.mine(2);
    h.sync().await;

    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Overpaid));
    assert_eq!(i.amount_final, Amount(100_500_000));
    assert_eq!(i.amount_excess, Amount(500_000));
    assert_eq!(reason(&i), "paid 0.5 USDT more than due");
    assert!(i.paid_at_ms.is_some());
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(
        h.balance("acct-1").await,
        10_000,
        "the price, not the money"
    );
    assert_eq!(ledger_entries(&h).await, 1);

    let view = h.intent_view(intent.id).await;
    assert_eq!(view.get("status"), Some("needs_review"));
    assert_eq!(view.get("exception"), Some("overpaid"));
    assert_eq!(view.get("amount_excess"), Some("500000"));
    assert_eq!(view.get("amount_received_final"), Some("100500000"));
    let status = h.payment_status("topup", "topup-over").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.get("latest_exception"), Some("overpaid"));
    let balance = h.balance_view("acct-1").await.unwrap();
    assert_eq!(balance.int("available_usd_cents"), 10_000);
    assert_eq!(balance.int("entries"), 1);
    let payload = last_outbox_payload(&h, intent.id).await;
    assert_eq!(payload["status"], "needs_review");
    assert_eq!(payload["exception"], "overpaid");
    assert_eq!(payload["paid"], true);

    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(ledger_entries(&h).await, 1);
}

// ---------------------------------------------------------------------------
// 4. late payment

async fn a_payment_after_expiry_with_nothing_before_is_expired_then_needs_review_as_paid_late(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(2).await;
    let intent = h.create("order", "order-late", "LTC", "100").await;
    assert_eq!(intent.amount_due, Amount(100_000_000));

    h.pass_expiry(&intent);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Expired, None);
    assert_eq!(reason(&i), "expired without payment");

    h.pay(&intent.address, Asset::Ltc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::PaidLate));
    assert_eq!(
        reason(&i),
        "1 LTC of 1 LTC arrived after the intent expired"
    );
    assert_eq!(i.amount_final, Amount(100_000_000));
    assert_eq!(i.paid_at_ms, None);
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "expired", "needs_review"]
    );
    let status = h.payment_status("order", "order-late").await;
    assert_eq!(status.get("payment_status"), Some("needs_review"));
    assert_eq!(status.get("latest_exception"), Some("paid_late"));
    assert_eq!(status.get("paid_intent_id"), None);

    // Nothing settled, so the storefront may still offer a fresh intent.
    let retry = h.create("order", "order-late", "LTC", "100").await;
    assert_eq!(retry.status, Status::AwaitingPayment);
    h.mine(2);
    h.sync().await;
    assert_eq!(settlements(&h).await, 0);
    assert_state(
        &h.intent(intent.id).await,
        Status::NeedsReview,
        Some(Exception::PaidLate),
    );
}

/// Received time is min(first seen, block time), compared with the expiry
/// inclusively. Both blocks here are first seen after the expiry.
/// Seen only after the expiry (paywatch was down), a payment is in time when
/// the block after its own was stamped at the expiry or before; its own
/// block's stamp, within a miner's lag of the expiry, proves nothing.
async fn a_block_followed_by_one_stamped_at_the_expiry_is_in_time_and_one_second_later_is_late(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(2).await;
    let on_time = h.create("order", "order-edge-1", "BTC", "100").await;
    let late = h.create("order", "order-edge-2", "BTC", "100").await;
    assert_eq!(on_time.expires_at_ms, late.expires_at_ms);
    let expiry_secs = on_time.expires_at_ms / 1000;

    h.pay(&on_time.address, Asset::Btc, on_time.amount_due);
    h.chain.set_block_time(expiry_secs - 300);
    h.chain.mine();
    h.pay(&late.address, Asset::Btc, late.amount_due);
    h.chain.set_block_time(expiry_secs);
    h.chain.mine();
    h.chain.set_block_time(expiry_secs + 1);
    h.chain.mine();
    h.pass_expiry(&on_time);
    h.sync().await;

    assert_state(&h.intent(on_time.id).await, Status::Paid, None);
    assert_state(
        &h.intent(late.id).await,
        Status::NeedsReview,
        Some(Exception::PaidLate),
    );
    assert_eq!(settlements(&h).await, 1);
}

// ---------------------------------------------------------------------------
// 5. wrong asset

/// 100 USDC sent to a 100 USDT intent's address on Ethereum.
async fn another_asset_at_the_address_needs_review_as_wrong_asset_without_settling(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-usdc", "USDT", "100").await;
    let txid = h.pay(&intent.address, Asset::Usdc, Amount(100_000_000));
    h.mine(1);
    h.sync().await;

    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::WrongAsset));
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(0), Amount(0)),
        "USDC never counts towards a USDT intent"
    );
    assert_eq!(
        reason(&i),
        format!(
            "money other than USDT on ethereum arrived at the address: \
             100000000 base units of USDC on ethereum in {txid}"
        )
    );
    assert_eq!(i.paid_at_ms, None);
    assert_eq!(settlements(&h).await, 0);
    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0].get("asset"), Some("USDC"));
    assert_eq!(transfers[0].int("counts_toward_intent"), 0);
    let status = h.payment_status("order", "order-usdc").await;
    assert_eq!(status.get("payment_status"), Some("needs_review"));
    assert_eq!(status.get("latest_exception"), Some("wrong_asset"));

    // It stays for review past the expiry; nothing ever settles.
    h.pass_expiry(&intent);
    h.mine(1);
    h.sync().await;
    assert_state(
        &h.intent(intent.id).await,
        Status::NeedsReview,
        Some(Exception::WrongAsset),
    );
    assert_eq!(settlements(&h).await, 0);
}

async fn an_unknown_token_is_spam_and_the_native_coin_at_a_token_address_is_wrong_asset(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let token_target = h.create("topup", "topup-token", "USDT", "100").await;
    let eth_target = h.create("topup", "topup-eth", "USDT", "100").await;
    let contract = "0x00000000000000000000000000000000deadbeef".to_owned();
    h.chain.pay(
        &token_target.address,
        AssetId::Token {
            contract: contract.clone(),
        },
        100_000_000,
    );
    h.pay(
        &eth_target.address,
        Asset::Eth,
        Amount(40_000_000_000_000_000),
    );
    h.mine(1);
    h.sync().await;

    // A token none of the methods accepts (address poisoning, look-alike
    // dust) is recorded and shown, and moves nothing.
    let i = h.intent(token_target.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    let transfers = h.intent_transfers(token_target.id).await;
    assert_eq!(
        transfers[0].get("asset"),
        Some(&*format!("token:{contract}"))
    );
    assert_eq!(transfers[0].int("counts_toward_intent"), 0);

    let i = h.intent(eth_target.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::WrongAsset));
    assert!(
        reason(&i).contains("base units of ETH on ethereum"),
        "{i:?}"
    );
    assert_eq!(i.amount_final, Amount(0));

    assert_eq!(settlements(&h).await, 0);
    assert_eq!(h.balance("acct-1").await, 0);
}

/// The full price in USDT plus a stray 3 USDC: the top-up is credited (its
/// price arrived, final and in time), once, and the intent waits for review
/// so the USDC can be returned.
async fn a_wrong_asset_alongside_a_full_payment_settles_once_but_needs_review(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-mixed", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.pay(&intent.address, Asset::Usdc, Amount(3_000_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    // Nothing is final yet: no exception stands on money that may vanish.
    assert_state(&i, Status::Confirming, None);
    assert_eq!(i.amount_pending, Amount(100_000_000));
    assert_eq!(settlements(&h).await, 0, "not final yet");
    assert_eq!(h.balance("acct-1").await, 0);

    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::WrongAsset));
    assert_eq!(i.amount_final, Amount(100_000_000), "only USDT counts");
    assert_eq!(i.amount_excess, Amount(0));
    assert!(reason(&i).contains("3000000 base units of USDC"), "{i:?}");
    assert!(i.paid_at_ms.is_some());
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
    let status = h.payment_status("topup", "topup-mixed").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.get("latest_status"), Some("needs_review"));
    assert_eq!(status.get("latest_exception"), Some("wrong_asset"));
    assert_eq!(status.int("needs_review_count"), 1);

    h.mine(3);
    h.sync().await;
    h.sync().await;
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
}

// ---------------------------------------------------------------------------
// 6. a second payment for a paid reference

async fn a_second_payment_to_a_paid_topup_needs_review_as_duplicate_and_is_not_credited(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-again", "USDT", "500").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(2);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.balance("acct-1").await, 50_000);

    // The customer pays again, to the same address, in a block whose miner
    // stamped it ten minutes before the settlement: "after it was paid" is
    // judged by the order paywatch recorded the money in, not by clocks.
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    let now_s = h.clock.now_ms() / 1000;
    h.chain.set_block_time(now_s - 600);
    h.chain.mine();
    h.sync().await;
    let i = h.intent(intent.id).await;
    // Not final yet: shown as pending money, not yet put before a person.
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_pending, Amount(500_000_000));

    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Duplicate));
    assert_eq!(
        reason(&i),
        "another 500 USDT arrived after the intent was already paid"
    );
    assert_eq!(i.amount_final, Amount(1_000_000_000));
    assert_eq!(i.amount_excess, Amount(500_000_000));
    assert!(i.paid_at_ms.is_some());
    assert_eq!(i.reversed_at_ms, None);
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 50_000, "not credited twice");
    let status = h.payment_status("topup", "topup-again").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.get("latest_exception"), Some("duplicate"));
    let payload = last_outbox_payload(&h, intent.id).await;
    assert_eq!(payload["status"], "needs_review");
    assert_eq!(payload["exception"], "duplicate");
    assert_eq!(payload["paid"], true, "the first payment still stands");
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "paid", "needs_review"]
    );
}

async fn two_intents_for_one_reference_both_paid_settle_the_first_and_flag_the_second_as_duplicate(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(4).await;

    // Both paid in the same block: the older intent settles.
    let first = h.create("topup", "topup-twice", "BTC", "100").await;
    let second = h.create("topup", "topup-twice", "BTC", "100").await;
    h.pay(&first.address, Asset::Btc, first.amount_due);
    h.pay(&second.address, Asset::Btc, second.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Paid, None);
    let s = h.intent(second.id).await;
    assert_state(&s, Status::NeedsReview, Some(Exception::Duplicate));
    assert_eq!(
        reason(&s),
        format!(
            "the reference was already paid by intent {}; this payment must be refunded or reassigned",
            first.id
        )
    );
    assert_eq!(s.paid_at_ms, None);
    assert_eq!(s.amount_final, Amount(200_000));
    assert_eq!(
        h.store
            .settled_intent(IntentKind::Topup, "topup-twice")
            .await
            .unwrap(),
        Some(first.id)
    );
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(ledger_entries(&h).await, 1);
    let status = h.payment_status("topup", "topup-twice").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.int("paid_intent_id"), first.id);
    assert_eq!(status.int("latest_intent_id"), second.id);
    assert_eq!(status.get("latest_exception"), Some("duplicate"));
    assert_eq!(status.int("intent_count"), 2);
    assert_eq!(status.int("needs_review_count"), 1);

    // Paid one after the other, in different blocks.
    let third = h.create("order", "order-twice", "BTC", "100").await;
    let fourth = h.create("order", "order-twice", "BTC", "100").await;
    h.pay(&third.address, Asset::Btc, third.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(third.id).await, Status::Paid, None);
    h.pay(&fourth.address, Asset::Btc, fourth.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(
        &h.intent(fourth.id).await,
        Status::NeedsReview,
        Some(Exception::Duplicate),
    );
    assert_eq!(
        h.payment_status("order", "order-twice")
            .await
            .int("paid_intent_id"),
        third.id
    );

    h.mine(3);
    h.sync().await;
    assert_eq!(settlements(&h).await, 2);
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
}

async fn a_new_intent_for_a_paid_reference_is_refused_as_conflict_and_creates_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(3).await;
    let intent = h.create("order", "order-done", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);

    let before = h.footprint().await;
    let free_before = h.store.free_addresses(Network::Bitcoin).await.unwrap();
    let err = h
        .try_create("order", "order-done", "BTC", "100")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "conflict");
    assert_eq!(
        err.to_string(),
        format!("order order-done is already paid by intent {}", intent.id)
    );
    assert_eq!(h.footprint().await, before);
    assert_eq!(
        h.store.free_addresses(Network::Bitcoin).await.unwrap(),
        free_before
    );
    assert_eq!(
        h.store
            .intents_for_reference(IntentKind::Order, "order-done")
            .await
            .unwrap()
            .len(),
        1
    );

    // References are per kind: a top-up may share the text.
    let topup = h.create("topup", "order-done", "BTC", "100").await;
    assert_eq!(topup.status, Status::AwaitingPayment);
}

// ---------------------------------------------------------------------------
// 7. reorgs before finality

async fn a_reorg_before_finality_returns_a_confirming_payment_to_awaiting_payment(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-reorg", "BTC", "100").await;
    let txid = h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(i.amount_pending, Amount(200_000));

    // The block holding the payment is replaced by one without it.
    let dropped = h.chain.reorg(1);
    assert_eq!(dropped.len(), 1);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!((i.amount_final, i.amount_pending), (Amount(0), Amount(0)));
    assert_eq!(reason(&i), "awaiting 0.002 BTC");
    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(
        transfers.len(),
        1,
        "the orphaned transfer stays as evidence"
    );
    assert_eq!(transfers[0].get("txid"), Some(txid.as_str()));
    assert!(transfers[0].get("orphaned_at").is_some());
    assert_eq!(transfers[0].int("confirmations"), 0);
    assert_eq!(transfers[0].int("is_final"), 0);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM blocks WHERE orphaned_at IS NOT NULL")
            .await,
        1
    );
    let view = h.intent_view(intent.id).await;
    assert_eq!(view.get("status"), Some("awaiting_payment"));
    assert_eq!(view.get("amount_received_pending"), Some("0"));

    h.mine(5);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::AwaitingPayment, None);
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "confirming", "awaiting_payment"]
    );

    // The customer pays again; that one is paid as usual.
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_final, Amount(200_000));
    assert_eq!(settlements(&h).await, 1);
}

async fn a_reorg_that_remines_the_payment_ends_paid_exactly_once(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 3).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-remined", "USDT", "100").await;
    let txid = h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(2);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Confirming, None);

    // Two blocks replaced; the payment goes back to the mempool and into the
    // new branch, which paywatch follows once it is as long as the old one.
    h.chain.reorg_keeping_transactions(2);
    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(
        i.amount_pending,
        Amount(100_000_000),
        "counted once, not twice"
    );
    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(transfers.len(), 2);
    assert!(transfers
        .iter()
        .all(|t| t.get("txid") == Some(txid.as_str())));
    assert!(transfers[0].get("orphaned_at").is_some());
    assert_eq!(transfers[1].get("orphaned_at"), None);
    assert_eq!(h.balance("acct-1").await, 0);

    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(
        (i.amount_final, i.amount_excess),
        (Amount(100_000_000), Amount(0))
    );
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "confirming", "paid"]
    );

    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);
}

async fn a_reorg_in_the_middle_of_a_split_payment_keeps_only_the_surviving_part(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-split-reorg", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, Amount(100_000));
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(i.amount_final, Amount(100_000));

    h.pay(&intent.address, Asset::Btc, Amount(100_000));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(100_000), Amount(100_000))
    );

    h.chain.reorg(1);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(
        (i.amount_final, i.amount_pending),
        (Amount(100_000), Amount(0))
    );
    assert_eq!(reason(&i), "received 0.001 BTC of 0.002 BTC");
    assert_eq!(settlements(&h).await, 0);

    h.pay(&intent.address, Asset::Btc, Amount(100_000));
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_final, Amount(200_000));
    assert_eq!(settlements(&h).await, 1);
    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(transfers.len(), 3);
    assert_eq!(
        transfers
            .iter()
            .filter(|t| t.get("orphaned_at").is_none())
            .count(),
        2
    );
}

async fn a_reorg_after_expiry_that_removes_the_timely_payment_leaves_the_intent_expired(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-expired-reorg", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Confirming, None);

    // Past the expiry the payment is still confirming: it was seen in time.
    h.pass_expiry(&intent);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Confirming, None);
    assert_eq!(reason(&i), "0.002 BTC seen in time, 0 BTC of it final");

    h.chain.reorg(2);
    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Expired, None);
    assert_eq!(reason(&i), "expired without payment");
    assert_eq!((i.amount_final, i.amount_pending), (Amount(0), Amount(0)));
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "confirming", "expired"]
    );
}

async fn a_reorg_after_expiry_that_remines_a_timely_payment_still_counts_it_as_timely(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-remined-late", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    h.pass_expiry(&intent);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Confirming, None);

    // Re-mined in a block stamped after the expiry; it was first seen before it.
    h.chain.reorg_keeping_transactions(2);
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_final, Amount(200_000));
    let transfers = h.intent_transfers(intent.id).await;
    let live: Vec<_> = transfers
        .iter()
        .filter(|t| t.get("orphaned_at").is_none())
        .collect();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].int("is_final"), 1);
    assert_eq!(settlements(&h).await, 1);
}

// ---------------------------------------------------------------------------
// 8. reorgs after finality

async fn a_reorg_after_finality_reverses_a_paid_order_for_review(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("order", "order-reversed", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(2);
    h.sync().await;
    let paid = h.intent(intent.id).await;
    assert_state(&paid, Status::Paid, None);
    h.mine(1);
    h.sync().await;

    // Three blocks deep: the payment had three confirmations, two were enough.
    h.chain.reorg(3);
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Reversed));
    assert_eq!(
        reason(&i),
        "a reorg removed final money after the intent was credited: final now 0 BTC of 0.002 BTC"
    );
    assert_eq!(i.paid_at_ms, paid.paid_at_ms, "when it was paid is history");
    let reversed_at = i.reversed_at_ms.expect("reversed_at set");
    assert_eq!(i.amount_final, Amount(0));
    assert_eq!(
        settlements(&h).await,
        1,
        "the settlement row stays as history"
    );
    assert_eq!(ledger_entries(&h).await, 0, "orders have no ledger");
    let status = h.payment_status("order", "order-reversed").await;
    assert_eq!(status.get("payment_status"), Some("reversed"));
    assert_eq!(status.get("latest_exception"), Some("reversed"));
    let payload = last_outbox_payload(&h, intent.id).await;
    assert_eq!(payload["exception"], "reversed");
    assert_eq!(payload["paid"], false);
    let view = h.intent_view(intent.id).await;
    assert_eq!(view.int("reversed_at"), reversed_at);

    h.mine(3);
    h.sync().await;
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Reversed));
    assert_eq!(i.reversed_at_ms, Some(reversed_at));
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "paid", "needs_review"]
    );
}

async fn a_reorg_after_finality_reverses_a_topup_credit_once_with_an_appended_ledger_entry(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("topup", "topup-reversed", "USDT", "500").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(2);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.balance("acct-1").await, 50_000);
    h.mine(1);
    h.sync().await;

    h.chain.reorg(3);
    h.mine(3);
    let report = h.sync().await;
    assert_eq!(report.reversed, 1);
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Reversed));
    assert!(i.reversed_at_ms.is_some());
    assert_eq!(h.balance("acct-1").await, 0);
    assert_eq!(ledger_entries(&h).await, 2);
    let ledger = h
        .rows("SELECT entry_kind, usd_cents, intent_id FROM ledger_entries ORDER BY id")
        .await;
    assert_eq!(
        ledger
            .iter()
            .map(|r| (r.get("entry_kind").unwrap().to_owned(), r.int("usd_cents")))
            .collect::<Vec<_>>(),
        [
            ("topup_credit".to_owned(), 50_000),
            ("reversal".to_owned(), -50_000)
        ]
    );
    assert!(ledger.iter().all(|r| r.int("intent_id") == intent.id));
    let balance = h.balance_view("acct-1").await.unwrap();
    assert_eq!(balance.int("available_usd_cents"), 0);
    assert_eq!(balance.int("entries"), 2);
    let events = h.store.intent_events(intent.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "status_changed");
    assert_eq!(last.status.as_deref(), Some("needs_review"));
    assert_eq!(last.exception.as_deref(), Some("reversed"));
    assert_eq!(
        h.payment_status("topup", "topup-reversed")
            .await
            .get("payment_status"),
        Some("reversed")
    );

    // Once, however often reconcile looks again.
    for _ in 0..3 {
        h.mine(1);
        assert_eq!(h.sync().await.reversed, 0);
    }
    assert_eq!(ledger_entries(&h).await, 2);
    assert_eq!(h.balance("acct-1").await, 0);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.exception.as_deref() == Some("reversed"))
            .count(),
        1
    );

    // The ledger is append-only: the credit cannot be removed or edited.
    assert!(h
        .store
        .execute_raw("DELETE FROM ledger_entries")
        .await
        .is_err());
    assert!(h
        .store
        .execute_raw("UPDATE ledger_entries SET usd_cents = 0")
        .await
        .is_err());
    assert_eq!(ledger_entries(&h).await, 2);
}

/// A credited top-up's payment is reorged out (reversed), then mined again
/// and final: the credit is not restored behind support's back; the intent
/// stays for review, saying the money is final again.
/// Money a reversal took back that comes back and is final again counts
/// again: a new credit under its own key, nothing deleted.
async fn a_reversed_payment_that_is_mined_again_is_credited_again_by_a_new_entry(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("topup", "topup-back", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);

    // Replaced by a branch as long, whose last block holds it again: not
    // final any more (a shorter branch is followed once it is as long).
    let dropped = h.chain.reorg(3);
    h.mine(2);
    h.chain.rebroadcast(dropped);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::NeedsReview, Some(Exception::Reversed));
    assert_eq!(i.amount_pending, Amount(100_000_000));
    assert_eq!(h.balance("acct-1").await, 0);

    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_final, Amount(100_000_000));
    assert_eq!(i.reversed_at_ms, None);
    let keys: Vec<String> = h
        .rows("SELECT entry_key, usd_cents FROM ledger_entries ORDER BY id")
        .await
        .iter()
        .map(|r| format!("{} {}", r.get("entry_key").unwrap(), r.int("usd_cents")))
        .collect();
    assert_eq!(
        keys,
        [
            format!("topup:{} 10000", intent.id),
            format!("reversal:{} -10000", intent.id),
            format!("topup:{}:2 10000", intent.id),
        ]
    );
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(settlements(&h).await, 1);
    assert_eq!(
        h.status_history(intent.id).await,
        ["awaiting_payment", "paid", "needs_review", "paid"]
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM outbox WHERE topic = 'settlement' AND payload LIKE '%settlement.recredited%'")
            .await,
        1
    );
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

/// A reorg deeper than finality whose new branch holds the same payment,
/// already final again by the time reconcile looks: nothing was lost, so
/// nothing is reversed.
async fn a_deep_reorg_that_remines_the_payment_final_in_the_same_pass_changes_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("topup", "topup-same", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);

    h.chain.reorg_keeping_transactions(3);
    h.mine(3);
    let report = h.sync().await;
    assert_eq!(report.reversed, 0);
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.reversed_at_ms, None);
    assert_eq!(i.amount_final, Amount(100_000_000));
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
}

// ---------------------------------------------------------------------------
// 9. restarts and crashes

async fn a_restarted_stream_resumes_from_the_persisted_cursor_without_loss_or_double_credit(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(2).await;
    let first = h.create("topup", "topup-r1", "USDT", "100").await;
    h.pay(&first.address, Asset::Usdt, first.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Confirming, None);

    // Restart between events: a block is mined while the stream is rebuilt.
    h.restart_stream().await;
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Paid, None);
    assert_eq!(h.balance("acct-1").await, 10_000);

    let second = h.create("topup", "topup-r2", "USDT", "100").await;
    h.pay(&second.address, Asset::Usdt, second.amount_due);
    h.mine(2);
    h.restart_stream().await;
    h.sync().await;
    h.restart_stream().await;
    h.sync().await;
    assert_state(&h.intent(second.id).await, Status::Paid, None);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 2);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM blocks").await,
        i64::try_from(h.chain.blocks().len()).unwrap(),
        "every block once"
    );
    assert_eq!(settlements(&h).await, 2);
    assert_eq!(ledger_entries(&h).await, 2);
    assert_eq!(h.balance("acct-1").await, 20_000);
}

async fn a_new_process_on_the_same_database_picks_up_where_the_old_one_stopped(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(3).await;
    let first = h.create("topup", "topup-p1", "USDT", "100").await;
    let second = h.create("topup", "topup-p2", "USDT", "500").await;
    h.pay(&first.address, Asset::Usdt, first.amount_due);
    h.mine(1);
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Confirming, None);

    // The process stops; meanwhile the second intent is paid and both go final.
    h.pay(&second.address, Asset::Usdt, second.amount_due);
    h.mine(3);
    h.restart_process().await;
    assert_eq!(
        h.watch.len(),
        2,
        "the watch set is rebuilt from the database"
    );
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Paid, None);
    assert_state(&h.intent(second.id).await, Status::Paid, None);
    assert_eq!(h.balance("acct-1").await, 60_000);

    // Ingested, then stopped before reconcile ran: the next process reconciles.
    let third = h.create("topup", "topup-p3", "USDT", "100").await;
    h.pay(&third.address, Asset::Usdt, third.amount_due);
    h.mine(2);
    h.follow_chain().await;
    h.restart_process().await;
    h.sync().await;
    assert_state(&h.intent(third.id).await, Status::Paid, None);

    h.restart_process().await;
    h.mine(1);
    h.sync().await;
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 3);
    assert_eq!(settlements(&h).await, 3);
    assert_eq!(ledger_entries(&h).await, 3);
    assert_eq!(h.balance("acct-1").await, 70_000);
    assert_eq!(
        h.status_history(first.id).await,
        ["awaiting_payment", "confirming", "paid"]
    );
    for id in [second.id, third.id] {
        assert_eq!(
            h.status_history(id).await,
            ["awaiting_payment", "paid"],
            "intent {id}"
        );
    }
}

/// Paid in a block stamped before the expiry, but the watcher was down and
/// first saw it after: received time is the earlier of the two.
async fn downtime_across_the_expiry_does_not_make_a_timely_payment_late(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-downtime", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    // Mined, and another block after it, before the expiry; paywatch reads
    // both only after it.
    h.mine(2);
    h.pass_expiry(&intent);
    h.restart_process().await;
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(settlements(&h).await, 1);
    let row = h
        .row("SELECT block_time, first_seen_at FROM transfers")
        .await;
    assert!(row.int("block_time") <= intent.expires_at_ms);
    assert!(row.int("first_seen_at") > intent.expires_at_ms);
    // Had the payment's block been the last before the expiry, only its own
    // stamp (within a miner's lag of the expiry) would speak for it: review.
}

async fn replaying_the_same_events_is_a_no_op_and_a_stale_replay_resurrects_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "topup-replay", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(2);

    let events = h.stream.next_batch(50).await.unwrap();
    assert_eq!(events.len(), 3, "genesis, the payment's block, one more");
    assert_eq!(
        h.ingest.apply(h.network, &events).await.unwrap(),
        ApplyOutcome::Applied
    );
    let counts = (
        h.count("SELECT COUNT(*) FROM transfers").await,
        h.count("SELECT COUNT(*) FROM blocks").await,
    );
    assert_eq!(counts, (1, 3));
    assert_eq!(
        h.ingest.apply(h.network, &events).await.unwrap(),
        ApplyOutcome::AlreadyApplied
    );
    assert_eq!(
        h.ingest.apply(h.network, &events[1..2]).await.unwrap(),
        ApplyOutcome::AlreadyApplied
    );
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.balance("acct-1").await, 10_000);

    assert_eq!(
        h.ingest.apply(h.network, &events).await.unwrap(),
        ApplyOutcome::AlreadyApplied
    );
    h.sync().await;
    assert_eq!(
        (
            h.count("SELECT COUNT(*) FROM transfers").await,
            h.count("SELECT COUNT(*) FROM blocks").await,
        ),
        counts
    );
    assert_eq!(ledger_entries(&h).await, 1);

    // A reorg's disconnect and connect, applied twice.
    h.chain.reorg(1);
    h.mine(1);
    let reorg = h.stream.next_batch(50).await.unwrap();
    assert!(
        matches!(reorg[0], ChainEvent::Disconnected { .. }),
        "{reorg:?}"
    );
    assert_eq!(
        h.ingest.apply(h.network, &reorg).await.unwrap(),
        ApplyOutcome::Applied
    );
    assert_eq!(
        h.ingest.apply(h.network, &reorg).await.unwrap(),
        ApplyOutcome::AlreadyApplied
    );
    // A stale worker replays the old branch: refused, nothing revived.
    assert!(matches!(
        h.ingest.apply(h.network, &events).await.unwrap(),
        ApplyOutcome::CursorMismatch { .. }
    ));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM blocks WHERE orphaned_at IS NOT NULL")
            .await,
        1
    );
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 1);
    assert_eq!(ledger_entries(&h).await, 1);
    assert_eq!(h.balance("acct-1").await, 10_000);
}

async fn a_crash_in_the_middle_of_a_batch_loses_nothing_and_doubles_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(3).await;
    let first = h.create("topup", "topup-c1", "USDT", "100").await;
    let second = h.create("topup", "topup-c2", "USDT", "500").await;
    let third = h.create("topup", "topup-c3", "USDT", "100").await;
    h.pay(&first.address, Asset::Usdt, first.amount_due);
    h.mine(1);
    h.pay(&second.address, Asset::Usdt, second.amount_due);
    h.mine(1);
    h.mine(1);

    // Only the first two events of the batch are written before the crash.
    let events = h.stream.next_batch(50).await.unwrap();
    assert_eq!(events.len(), 4);
    h.ingest.apply(h.network, &events[..2]).await.unwrap();
    h.restart_stream().await;
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Paid, None);
    assert_state(&h.intent(second.id).await, Status::Paid, None);

    // A batch taken from the stream and lost before it was written at all.
    h.pay(&third.address, Asset::Usdt, third.amount_due);
    h.mine(2);
    let lost = h.stream.next_batch(50).await.unwrap();
    assert_eq!(lost.len(), 2);
    drop(lost);
    h.restart_process().await;
    h.sync().await;
    assert_state(&h.intent(third.id).await, Status::Paid, None);

    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 3);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM blocks").await,
        i64::try_from(h.chain.blocks().len()).unwrap()
    );
    assert_eq!(settlements(&h).await, 3);
    assert_eq!(ledger_entries(&h).await, 3);
    assert_eq!(h.balance("acct-1").await, 70_000);
}

/// Ingest writes a batch in one transaction: when an event in the middle is
/// refused, the events before it are not written either, and the cursor
/// stays where it was.
async fn a_batch_that_fails_half_way_writes_nothing_of_it(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let first = h.create("topup", "topup-atomic-1", "USDT", "100").await;
    let second = h.create("topup", "topup-atomic-2", "USDT", "100").await;
    h.pay(&first.address, Asset::Usdt, first.amount_due);
    h.mine(1);
    h.pay(&second.address, Asset::Usdt, second.amount_due);
    h.mine(1);
    let events = h.stream.next_batch(50).await.unwrap();
    assert_eq!(events.len(), 3);

    // A broken source hands over a Tron transfer in the last Ethereum block.
    let mut broken = events.clone();
    match &mut broken[2] {
        ChainEvent::Connected { transfers, .. } => transfers[0].network = Network::Tron,
        other => panic!("expected a connect, got {other:?}"),
    }
    let err = h.ingest.apply(h.network, &broken).await.unwrap_err();
    assert!(err.to_string().contains("source is broken"), "{err}");
    assert_eq!(h.count("SELECT COUNT(*) FROM blocks").await, 0);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 0);
    assert_eq!(
        h.store
            .chain_status(h.network)
            .await
            .unwrap()
            .unwrap()
            .cursor_hash,
        None
    );
    h.reconciler.run_until_idle().await.unwrap();
    assert_state(&h.intent(first.id).await, Status::AwaitingPayment, None);

    // The good events, from the persisted cursor, go in whole.
    h.restart_stream().await;
    h.sync().await;
    assert_state(&h.intent(first.id).await, Status::Paid, None);
    assert_state(&h.intent(second.id).await, Status::Paid, None);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 2);
    assert_eq!(h.balance("acct-1").await, 20_000);
}

async fn a_node_outage_mid_sync_loses_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-outage", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(2);
    h.chain.fail_next(2);
    for _ in 0..2 {
        let err = h.stream.next_batch(50).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::Paid, None);
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 1);
    assert_eq!(settlements(&h).await, 1);
}

// ---------------------------------------------------------------------------
// 10. concurrent workers

async fn two_ingest_workers_racing_on_the_same_events_record_each_transfer_once(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(4).await;
    let mut intents = Vec::new();
    for n in 0..4 {
        let i = h
            .create("topup", &format!("topup-race-{n}"), "USDT", "100")
            .await;
        h.pay(&i.address, Asset::Usdt, i.amount_due);
        h.mine(1);
        intents.push(i);
    }
    let events = Arc::new(h.stream.next_batch(50).await.unwrap());
    assert_eq!(events.len(), 5);

    // Three workers of three processes: all the events, all again, and a prefix.
    let workers = [
        h.another_ingest().await,
        h.another_ingest().await,
        h.another_ingest().await,
    ];
    let network = h.network;
    let tasks: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(n, ingest)| {
            let events = events.clone();
            tokio::spawn(async move {
                let slice = if n == 2 { &events[..3] } else { &events[..] };
                ingest.apply(network, slice).await.unwrap()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    assert!(
        outcomes.contains(&ApplyOutcome::Applied),
        "somebody applied them: {outcomes:?}"
    );
    assert!(
        !outcomes
            .iter()
            .any(|o| matches!(o, ApplyOutcome::CursorMismatch { .. })),
        "{outcomes:?}"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM transfers").await, 4);
    assert_eq!(h.count("SELECT COUNT(*) FROM blocks").await, 5);

    h.sync().await;
    for i in &intents {
        assert_state(&h.intent(i.id).await, Status::Paid, None);
    }
    assert_eq!(settlements(&h).await, 4);
    assert_eq!(ledger_entries(&h).await, 4);
    assert_eq!(h.balance("acct-1").await, 40_000);
}

async fn two_reconcilers_running_concurrently_settle_and_credit_each_reference_once(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(8).await;
    let mut intents = Vec::new();
    for n in 0..6 {
        intents.push(
            h.create("topup", &format!("topup-rec-{n}"), "USDT", "100")
                .await,
        );
    }
    // Two intents for one reference, paid in the same block.
    let dup_a = h.create("topup", "topup-rec-dup", "USDT", "100").await;
    let dup_b = h.create("topup", "topup-rec-dup", "USDT", "100").await;
    for i in intents.iter().chain([&dup_a, &dup_b]) {
        h.pay(&i.address, Asset::Usdt, i.amount_due);
    }
    h.mine(1);
    h.follow_chain().await;

    let reconcilers = [
        h.another_reconciler(2).await,
        h.another_reconciler(3).await,
        h.reconciler.clone(),
    ];
    let tasks: Vec<_> = reconcilers
        .into_iter()
        .map(|r| tokio::spawn(async move { r.run_until_idle().await.unwrap() }))
        .collect();
    let mut settled = 0;
    for t in tasks {
        settled += t.await.unwrap().settled;
    }
    assert_eq!(
        settled, 7,
        "six references and the duplicated one, once each"
    );
    for i in &intents {
        assert_state(&h.intent(i.id).await, Status::Paid, None);
    }
    let pair = [h.intent(dup_a.id).await, h.intent(dup_b.id).await];
    assert_eq!(
        pair.iter().filter(|i| i.status == Status::Paid).count(),
        1,
        "{pair:?}"
    );
    assert_eq!(
        pair.iter()
            .filter(|i| i.exception == Some(Exception::Duplicate))
            .count(),
        1,
        "{pair:?}"
    );
    assert_eq!(settlements(&h).await, 7);
    assert_eq!(ledger_entries(&h).await, 7);
    assert_eq!(h.balance("acct-1").await, 70_000);

    let again = h.sync().await;
    assert_eq!((again.settled, again.changed), (0, 0));
    assert_eq!(h.balance("acct-1").await, 70_000);
}

/// Five storefront requests at once for a pool of three addresses: three
/// intents, three different addresses, two clean refusals.
async fn concurrent_intent_creation_never_issues_an_address_twice(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(3).await;
    let tasks: Vec<_> = (0..5)
        .map(|n| {
            let service = h.intents.clone();
            let req = request(
                "order",
                &format!("order-rush-{n}"),
                "USDT",
                "ethereum",
                "100",
            );
            tokio::spawn(async move { service.create(&req).await })
        })
        .collect();
    let mut addresses = Vec::new();
    let mut refusals = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(i) => addresses.push(i.address),
            Err(e) => refusals.push(e.code()),
        }
    }
    addresses.sort();
    addresses.dedup();
    assert_eq!(addresses.len(), 3);
    assert_eq!(refusals, ["no_address_available"; 2]);
    let f = h.footprint().await;
    assert_eq!(
        (f.intents, f.issued_addresses, f.linked_addresses),
        (3, 3, 3)
    );
    assert_eq!(h.watch.len(), 3);
}

// ---------------------------------------------------------------------------
// 11. bad input

async fn bad_requests_get_a_clear_error_code_and_leave_the_database_unchanged(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let before = h.footprint().await;
    let free_before = h.store.free_addresses(Network::Ethereum).await.unwrap();

    let cases: Vec<(NewIntent, &str, &str)> = vec![
        (
            request("order", "o-1", "USDC", "tron", "100"),
            "method_unknown",
            "USDC is not a payment method on tron",
        ),
        (
            request("order", "o-1", "DOGE", "ethereum", "100"),
            "method_unknown",
            "unknown asset 'DOGE'",
        ),
        (
            request("order", "o-1", "USDT", "dogechain", "100"),
            "method_unknown",
            "unknown network 'dogechain'",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", "1e5"),
            "amount_invalid",
            "usd_amount: '1e5' is not a plain decimal number",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", "abc"),
            "amount_invalid",
            "usd_amount: 'abc' is not a plain decimal number",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", "-5"),
            "amount_invalid",
            "usd_amount: '-5' is negative",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", ""),
            "amount_invalid",
            "usd_amount: '' is empty",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", "0"),
            "amount_invalid",
            "usd_amount: '0' must be above 0",
        ),
        (
            request("order", "o-1", "USDT", "ethereum", "10.001"),
            "amount_invalid",
            "usd_amount: '10.001' has more than 2 decimal places",
        ),
        (
            request("topup", "t-1", "USDT", "ethereum", "123"),
            "amount_invalid",
            "usd_amount: top-ups are offered at 100, 500, 2000, 10000 USD, not 123",
        ),
        (
            request("subscription", "o-1", "USDT", "ethereum", "100"),
            "invalid_request",
            "kind: 'subscription' is not order or topup",
        ),
        (
            request("order", "  ", "USDT", "ethereum", "100"),
            "invalid_request",
            "reference: must not be empty",
        ),
    ];
    for (req, code, message) in cases {
        let err = h.intents.create(&req).await.unwrap_err();
        assert_eq!(err.code(), code, "{req:?}: {err}");
        assert!(
            err.to_string().contains(message),
            "{req:?}: '{err}' does not say '{message}'"
        );
    }
    assert_eq!(h.footprint().await, before);
    assert_eq!(
        h.store.free_addresses(Network::Ethereum).await.unwrap(),
        free_before
    );
    assert_eq!(h.watch.len(), 0, "nothing was watched");
    assert_eq!(h.count("SELECT COUNT(*) FROM intents").await, 0);
}

async fn a_missing_rate_is_rate_unavailable_and_creates_nothing(b: Backend) {
    let mut without_btc = rates();
    without_btc.remove(&Asset::Btc);
    let mut h = Harness::with_rates(b, Network::Bitcoin, 1, without_btc).await;
    h.import_pool(1).await;
    let before = h.footprint().await;
    let err = h
        .try_create("order", "order-norate", "BTC", "100")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "rate_unavailable");
    assert_eq!(err.to_string(), "no USD rate is configured for BTC");
    assert_eq!(h.footprint().await, before);
    assert_eq!(h.store.free_addresses(Network::Bitcoin).await.unwrap(), 1);
    assert!(h
        .store
        .intents_for_reference(IntentKind::Order, "order-norate")
        .await
        .unwrap()
        .is_empty());
}

async fn an_exhausted_pool_is_no_address_available_and_issues_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let first = h.create("order", "order-pool-1", "BTC", "100").await;
    let before = h.footprint().await;
    assert_eq!(before.issued_addresses, 1);

    let err = h
        .try_create("order", "order-pool-2", "BTC", "100")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "no_address_available");
    assert_eq!(
        err.to_string(),
        "no address available on bitcoin: import more into its pool"
    );
    assert_eq!(h.footprint().await, before);
    assert_eq!(h.store.free_addresses(Network::Bitcoin).await.unwrap(), 0);
    assert!(h
        .store
        .intents_for_reference(IntentKind::Order, "order-pool-2")
        .await
        .unwrap()
        .is_empty());

    // Importing more makes it work again, with a new address.
    h.import_pool(1).await;
    let second = h.create("order", "order-pool-2", "BTC", "100").await;
    assert_ne!(second.address, first.address);
    assert_eq!(h.footprint().await.issued_addresses, 2);
}

async fn unknown_references_and_intents_are_reported_as_absent(b: Backend) {
    let h = Harness::new(b, Network::Bitcoin, 1).await;
    assert!(h
        .store
        .intents_for_reference(IntentKind::Order, "no-such-order")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(h.store.intent(9999).await.unwrap(), None);
    assert_eq!(
        h.store
            .settled_intent(IntentKind::Topup, "no-such-topup")
            .await
            .unwrap(),
        None
    );
    assert!(h.store.intent_events(9999).await.unwrap().is_empty());
    assert_eq!(
        h.store
            .declare_paid(9999, Some("paid"), h.clock.now_ms())
            .await
            .unwrap(),
        Declared::NoSuchIntent
    );
    assert_eq!(h.balance("nobody").await, 0);
    assert!(h
        .rows("SELECT reference FROM paywatch_payment_status WHERE reference = 'no-such-order'")
        .await
        .is_empty());
    assert_eq!(
        h.count("SELECT COUNT(*) FROM payment_declarations").await,
        0
    );
}

// ---------------------------------------------------------------------------
// 12. "I have paid"

async fn i_have_paid_is_recorded_with_its_time_and_changes_no_status(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-declared", "BTC", "100").await;
    h.clock.advance_secs(120);
    let declared_at = h.clock.now_ms();
    assert_eq!(
        h.store
            .declare_paid(intent.id, Some("sent from my wallet"), declared_at)
            .await
            .unwrap(),
        Declared::Recorded
    );

    let i = h.intent(intent.id).await;
    assert_eq!(i.declared_paid_at_ms, Some(declared_at));
    assert_state(&i, Status::AwaitingPayment, None);
    let events = h.store.intent_events(intent.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "declared_paid");
    assert_eq!(last.at_ms, declared_at);
    assert_eq!(last.status, None);
    assert_eq!(last.detail.as_deref(), Some("sent from my wallet"));
    assert_eq!(
        h.count("SELECT COUNT(*) FROM payment_declarations").await,
        1
    );
    assert_eq!(
        h.intent_view(intent.id).await.int("declared_paid_at"),
        declared_at
    );
    assert_eq!(outbox_for(&h, intent.id).await, 0, "no status change");

    h.mine(2);
    h.sync().await;
    assert_state(&h.intent(intent.id).await, Status::AwaitingPayment, None);

    // Declaring again with nothing new writes nothing; a new note is
    // recorded too; the first time stays on the intent.
    h.clock.advance_secs(60);
    assert_eq!(
        h.store
            .declare_paid(intent.id, None, h.clock.now_ms())
            .await
            .unwrap(),
        Declared::AlreadyRecorded {
            first_at_ms: declared_at
        }
    );
    assert_eq!(
        h.store
            .declare_paid(intent.id, Some("the wallet says sent"), h.clock.now_ms())
            .await
            .unwrap(),
        Declared::Recorded
    );
    assert_eq!(
        h.intent(intent.id).await.declared_paid_at_ms,
        Some(declared_at)
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM payment_declarations").await,
        2
    );

    // It still expires like any other intent.
    h.pass_expiry(&intent);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Expired, None);
    assert_eq!(i.declared_paid_at_ms, Some(declared_at));
    assert_eq!(settlements(&h).await, 0);
    let kinds: Vec<String> = h
        .store
        .intent_events(intent.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "declared_paid",
            "declared_paid",
            "status_changed"
        ]
    );
}

// ---------------------------------------------------------------------------
// 13. tolerance

/// One basis point of tolerance (0.01 USDT of 100) on USDT-on-Ethereum only.
async fn a_shortfall_within_the_configured_tolerance_is_paid(b: Backend) {
    let tolerance: HashMap<Method, Tolerance> = [(
        usdt_eth(),
        Tolerance {
            basis_points: 1,
            max: None,
        },
    )]
    .into();
    let mut h = Harness::with_policy(b, Network::Ethereum, 1, tolerance).await;
    h.import_pool(3).await;
    let within = h.create("topup", "topup-tol-1", "USDT", "100").await;
    let beyond = h.create("topup", "topup-tol-2", "USDT", "100").await;
    let other_method = h.create("order", "order-tol-3", "USDC", "100").await;
    h.pay(&within.address, Asset::Usdt, Amount(99_990_000));
    h.pay(&beyond.address, Asset::Usdt, Amount(99_989_999));
    h.pay(&other_method.address, Asset::Usdc, Amount(99_999_999));
    h.mine(1);
    h.sync().await;

    let i = h.intent(within.id).await;
    assert_state(&i, Status::Paid, None);
    assert_eq!(i.amount_final, Amount(99_990_000));
    assert_eq!(i.amount_excess, Amount(0));
    assert_eq!(reason(&i), "paid 99.99 USDT");
    assert_eq!(h.balance("acct-1").await, 10_000, "credited the full price");

    let i = h.intent(beyond.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(i.amount_final, Amount(99_989_999));

    let i = h.intent(other_method.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(settlements(&h).await, 1);

    h.pass_expiry(&within);
    h.sync().await;
    assert_state(
        &h.intent(beyond.id).await,
        Status::NeedsReview,
        Some(Exception::Underpaid),
    );
    assert_state(&h.intent(within.id).await, Status::Paid, None);
    assert_eq!(settlements(&h).await, 1);
}

async fn without_a_tolerance_one_base_unit_short_is_not_paid(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "order-one-short", "USDT", "100").await;
    h.pay(&intent.address, Asset::Usdt, Amount(99_999_999));
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!(reason(&i), "received 99.999999 USDT of 100 USDT");
    h.pass_expiry(&intent);
    h.sync().await;
    assert_state(
        &h.intent(intent.id).await,
        Status::NeedsReview,
        Some(Exception::Underpaid),
    );
    assert_eq!(settlements(&h).await, 0);
}

// ---------------------------------------------------------------------------
// 14. failed transactions

async fn failed_transactions_never_count(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 1).await;
    h.import_pool(2).await;
    let intent = h.create("topup", "topup-failed", "USDT", "100").await;
    let partly = h.create("order", "order-failed", "USDT", "100").await;
    h.chain
        .pay_failed(&intent.address, AssetId::Known(Asset::Usdt), 100_000_000);
    // A failed transfer of another asset is no wrong-asset arrival either.
    h.chain
        .pay_failed(&intent.address, AssetId::Known(Asset::Usdc), 5_000_000);
    h.pay(&partly.address, Asset::Usdt, Amount(30_000_000));
    h.chain
        .pay_failed(&partly.address, AssetId::Known(Asset::Usdt), 70_000_000);
    h.mine(1);
    h.sync().await;

    let i = h.intent(intent.id).await;
    assert_state(&i, Status::AwaitingPayment, None);
    assert_eq!((i.amount_final, i.amount_pending), (Amount(0), Amount(0)));
    let transfers = h.intent_transfers(intent.id).await;
    assert_eq!(transfers.len(), 2, "recorded, as evidence");
    for t in &transfers {
        assert_eq!(t.get("tx_status"), Some("failed"));
        assert_eq!(t.int("counts_toward_intent"), 0);
    }
    let p = h.intent(partly.id).await;
    assert_state(&p, Status::AwaitingPayment, None);
    assert_eq!(p.amount_final, Amount(30_000_000));

    h.pass_expiry(&intent);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_state(&i, Status::Expired, None);
    assert_eq!(reason(&i), "expired without payment");
    let p = h.intent(partly.id).await;
    assert_state(&p, Status::NeedsReview, Some(Exception::Underpaid));
    assert_eq!(
        reason(&p),
        "expired with 30 USDT of 100 USDT received in time"
    );
    assert_eq!(settlements(&h).await, 0);
    assert_eq!(h.balance("acct-1").await, 0);
}

async fn a_reorg_that_shortens_the_chain_above_a_final_payment_keeps_it_paid(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let intent = h.create("topup", "short-chain", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);

    // Two blocks above the payment are replaced by one: the node's own
    // 3-confirmation final height drops below the payment's block, but that
    // block never left the chain, so the payment stays final.
    h.chain.reorg(2);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.status, Status::Paid);
    assert_eq!(i.reversed_at_ms, None);
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(h.count("SELECT COUNT(*) FROM ledger_entries").await, 1);
}

async fn a_reorg_replacing_the_final_block_lowers_finality_until_the_node_confirms_again(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    let intent = h.create("order", "replaced-final", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(2);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);

    // The payment's block is replaced, the payment re-mined in the new
    // branch's last block: a reorg after finality. The settlement is
    // reversed for review until the re-mined payment has 2 confirmations on
    // the new branch; then it stands again.
    let dropped = h.chain.reorg(2);
    h.mine(1);
    h.chain.rebroadcast(dropped);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(
        (i.status, i.exception),
        (Status::NeedsReview, Some(Exception::Reversed))
    );
    assert_eq!(i.amount_final, Amount::ZERO);
    assert_eq!(i.amount_pending, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(
        i.amount_final, intent.amount_due,
        "final again on the new branch"
    );
    assert_eq!(
        (i.status, i.exception, i.reversed_at_ms),
        (Status::Paid, None, None),
        "the money it stood on is back: paid again"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 1);
}

async fn a_new_intent_after_an_expired_one_gets_a_new_address_and_a_new_quote(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(2).await;
    let old = h.create("order", "order-again", "BTC", "100").await;
    h.pass_expiry(&old);
    h.sync().await;
    assert_eq!(h.intent(old.id).await.status, Status::Expired);

    let new = h.create("order", "order-again", "BTC", "100").await;
    assert_ne!(new.address, old.address, "an address is never issued twice");
    assert!(
        new.rate_at_ms > old.rate_at_ms,
        "the amount is quoted again, at a new rate lock"
    );
    assert!(new.expires_at_ms > old.expires_at_ms);

    // Money sent late to the old address stays with the old intent.
    h.pay(&old.address, Asset::Btc, old.amount_due);
    h.pay(&new.address, Asset::Btc, new.amount_due);
    h.mine(1);
    h.sync().await;
    let (old_now, new_now) = (h.intent(old.id).await, h.intent(new.id).await);
    assert_eq!(
        (old_now.status, old_now.exception),
        (Status::NeedsReview, Some(Exception::PaidLate))
    );
    assert_eq!(new_now.status, Status::Paid);
    assert_eq!(
        h.store
            .settled_intent(IntentKind::Order, "order-again")
            .await
            .unwrap(),
        Some(new.id)
    );
}

//! The money path's seams, each defect of issue 16 as the scenario that
//! showed it, end to end through the API on both databases: support's
//! decisions are never undone by the next reconcile, nothing settles on
//! zero or on money that is not final, a payment settles one intent at
//! most, and every change reaches the outbox.

#[macro_use]
mod common;

use common::api::STOREFRONT;
use common::world::{code, World};
use common::{Backend, Harness};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Amount, Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

on_both_databases!(
    an_accepted_late_topup_keeps_its_credit_when_the_customer_then_declares_paid,
    an_accepted_late_order_stays_resolved_and_paid_after_the_next_reconcile,
    an_accepted_short_payment_keeps_its_credit_after_more_blocks_and_a_declaration,
    a_reassign_target_keeps_its_settlement_after_the_next_reconcile,
    dust_after_an_accept_goes_to_review_and_leaves_the_credit_standing,
    a_reorg_that_remines_accepted_money_leaves_the_credit_standing,
    a_rescan_of_the_accepted_payment_leaves_the_credit_standing,
    a_tolerance_as_large_as_the_amount_due_never_settles_a_payment_of_zero,
    a_late_payment_waiting_in_the_mempool_cannot_be_accepted_until_it_is_final,
    a_payment_reassigned_once_cannot_settle_a_second_intent,
    a_reassign_refuses_a_source_whose_own_payment_settled_it,
    every_support_action_writes_its_outbox_row,
    // time: one policy for "in time", one clock
    a_late_payment_in_a_block_a_lagging_miner_stamped_before_the_expiry_is_late,
    a_payment_in_a_block_with_no_time_is_not_on_time_by_its_block,
    a_payment_made_in_time_while_paywatch_was_down_counts_as_in_time,
    money_seen_in_time_that_is_final_only_after_the_confirm_by_deadline_goes_to_review,
    a_reorg_deeper_than_the_confirmations_that_remines_the_payment_never_reverses_the_credit,
    // found by the model-based test
    a_reorg_that_drops_a_reassigned_payment_reverses_the_target_visibly,
    // one snapshot per pass
    a_reconcile_pass_reads_one_state_while_a_reorg_commits_beside_it,
    // orders paid from the balance
    an_order_paid_from_the_balance_is_paid_once_and_crypto_after_it_is_a_duplicate,
);

async fn an_accepted_late_topup_keeps_its_credit_when_the_customer_then_declares_paid(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("topup", "late-topup").await;
    let (st, v) = w.accept(id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    w.declare_paid(id).await;
    w.h.sync().await;

    assert_eq!(w.h.balance("acct-1").await, 10_000, "the credit stands");
    assert_eq!(w.reversals().await, 0);
    let i = w.h.intent(id).await;
    assert_eq!(i.status, Status::Resolved, "{:?}", i.reason);
    assert_eq!(
        w.h.payment_status("topup", "late-topup")
            .await
            .get("payment_status"),
        Some("paid")
    );
    w.assert_money_rules_hold().await;
}

async fn an_accepted_late_order_stays_resolved_and_paid_after_the_next_reconcile(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("order", "late-order").await;
    let (st, v) = w.accept(id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    w.declare_paid(id).await;
    w.h.mine(3);
    w.h.sync().await;

    let i = w.h.intent(id).await;
    assert_eq!(
        (i.status, i.exception),
        (Status::Resolved, None),
        "{:?}",
        i.reason
    );
    assert_eq!(i.reversed_at_ms, None);
    assert_eq!(
        w.h.payment_status("order", "late-order")
            .await
            .get("payment_status"),
        Some("paid")
    );
}

async fn an_accepted_short_payment_keeps_its_credit_after_more_blocks_and_a_declaration(
    b: Backend,
) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "short", "LTC", "100").await;
    w.h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 * 9 / 10));
    w.h.mine(1);
    w.h.pass_expiry(&i);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.exception, Some(Exception::Underpaid));
    let (st, v) = w.accept(i.id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    w.h.mine(2);
    w.h.sync().await;
    w.declare_paid(i.id).await;
    w.h.sync().await;

    assert_eq!(
        w.h.balance("acct-1").await,
        10_000,
        "the accepted credit stands"
    );
    assert_eq!(w.reversals().await, 0);
    assert_eq!(w.h.intent(i.id).await.status, Status::Resolved);
    w.assert_money_rules_hold().await;
}

async fn a_reassign_target_keeps_its_settlement_after_the_next_reconcile(b: Backend) {
    let mut w = World::new(b).await;
    let old = w.h.create("topup", "old-topup", "LTC", "100").await;
    w.h.pass_expiry(&old);
    w.h.sync().await;
    let meant = w.h.create("topup", "new-topup", "LTC", "100").await;
    w.h.pay(&old.address, Asset::Ltc, old.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let (st, v) = w
        .act(
            old.id,
            "re1",
            json!({"action": "reassign", "note": "paid the old address", "actor": "cy",
                   "to_intent": meant.id.to_string()}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    // The target has no transfers of its own: the next look at it must not
    // read that as money gone.
    w.declare_paid(meant.id).await;
    w.h.mine(1);
    w.h.sync().await;

    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.reversals().await, 0);
    let m = w.h.intent(meant.id).await;
    assert_eq!(m.status, Status::Resolved, "{:?}", m.reason);
    w.assert_money_rules_hold().await;
}

async fn dust_after_an_accept_goes_to_review_and_leaves_the_credit_standing(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("topup", "dusted").await;
    let (st, v) = w.accept(id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let address = w.h.intent(id).await.address;

    w.h.pay(&address, Asset::Ltc, Amount(546));
    w.h.mine(1);
    w.h.sync().await;

    assert_eq!(w.h.balance("acct-1").await, 10_000, "the credit stands");
    assert_eq!(w.reversals().await, 0);
    let i = w.h.intent(id).await;
    assert_eq!(
        (i.status, i.exception),
        (Status::NeedsReview, Some(Exception::Duplicate)),
        "new money after the decision is for a person: {:?}",
        i.reason
    );
    w.assert_money_rules_hold().await;
}

async fn a_reorg_that_remines_accepted_money_leaves_the_credit_standing(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("topup", "remined").await;
    let (st, v) = w.accept(id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    // The block that held the accepted payment is replaced; the payment is
    // mined again in its replacement.
    w.h.chain.reorg_keeping_transactions(1);
    w.h.mine(2);
    w.h.sync().await;

    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(
        w.reversals().await,
        0,
        "the money it stood on is still there"
    );
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);
    w.assert_money_rules_hold().await;
}

async fn a_rescan_of_the_accepted_payment_leaves_the_credit_standing(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("topup", "rescanned").await;
    let (st, v) = w.accept(id, "a1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    // A rescan reads the block again and queues the address, recording nothing new.
    let address = w.h.intent(id).await.address;
    let added = w.h.rescan_newest(&address).await;
    assert_eq!(added, Some(0), "nothing new was recorded");
    w.h.sync().await;

    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.reversals().await, 0);
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);
}

async fn a_tolerance_as_large_as_the_amount_due_never_settles_a_payment_of_zero(b: Backend) {
    // 1 LTC is due for 100 USD; a configured tolerance of 5 LTC is capped
    // below the amount due, and nothing received is never paid.
    let ltc = paywatch_core::Method::new(Asset::Ltc, Network::Litecoin).unwrap();
    let tolerance = std::collections::HashMap::from([(
        ltc,
        paywatch::reconcile::Tolerance {
            basis_points: 500,
            max: Some(Amount(500_000_000)),
        },
    )]);
    let mut h = Harness::with_policy(b, Network::Litecoin, 1, tolerance).await;
    h.import_pool(2).await;
    let i = h.create("topup", "zero", "LTC", "100").await;
    h.mine(2);
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(r.status, Status::AwaitingPayment, "{:?}", r.reason);
    assert_eq!(h.balance("acct-1").await, 0);
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 0);

    // 5% short is within the tolerance: paid, and credited at face value.
    h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 * 95 / 100));
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(i.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);
}

async fn a_late_payment_waiting_in_the_mempool_cannot_be_accepted_until_it_is_final(b: Backend) {
    let mut w = World::new(b).await;
    w.h.chain.show_mempool();
    let i = w.h.create("topup", "replaced", "LTC", "100").await;
    w.h.pass_expiry(&i);
    w.h.sync().await;
    let txid = w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.amount_pending, i.amount_due, "seen in the mempool");

    let (st, v) = w.accept(i.id, "a1").await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "not_final"), "{v}");
    assert_eq!(w.h.balance("acct-1").await, 0);

    // Replaced before it was mined: nothing was ever credited.
    assert!(w.h.chain.drop_from_mempool(&txid));
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::Expired, "{:?}", r.reason);
    assert_eq!(r.amount_pending, Amount(0));
    assert_eq!(w.h.balance("acct-1").await, 0);
    assert_eq!(w.h.count("SELECT COUNT(*) FROM settlements").await, 0);
    w.assert_money_rules_hold().await;
}

async fn a_payment_reassigned_once_cannot_settle_a_second_intent(b: Backend) {
    let mut w = World::new(b).await;
    let old = w.paid_late("order", "old").await;
    let first = w.h.create("order", "meant-1", "LTC", "100").await;
    let second = w.h.create("order", "meant-2", "LTC", "100").await;
    let reassign = |to: i64| {
        json!({"action": "reassign", "note": "paid the old address", "actor": "cy",
               "to_intent": to.to_string()})
    };
    let (st, v) = w.act(old, "re1", reassign(first.id)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = w.act(old, "re2", reassign(second.id)).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    assert_eq!(w.h.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        w.h.intent(second.id).await.status,
        Status::AwaitingPayment,
        "the second target was not touched"
    );
}

async fn a_reassign_refuses_a_source_whose_own_payment_settled_it(b: Backend) {
    let mut w = World::new(b).await;
    let paid = w.h.create("order", "paid", "LTC", "100").await;
    w.h.pay(&paid.address, Asset::Ltc, paid.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(paid.id).await.status, Status::Paid);
    let other = w.h.create("order", "other", "LTC", "100").await;
    let (st, v) = w
        .act(
            paid.id,
            "re1",
            json!({"action": "reassign", "note": "n", "actor": "cy", "to_intent": other.id.to_string()}),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    assert_eq!(w.h.count("SELECT COUNT(*) FROM settlements").await, 1);
}

async fn every_support_action_writes_its_outbox_row(b: Backend) {
    let mut w = World::new(b).await;
    let accepted = w.paid_late("topup", "acc").await;
    let before = w.outbox().await;
    let (st, v) = w.accept(accepted, "k1").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let after_accept = w.outbox().await;
    assert!(after_accept > before, "accept wrote no outbox row");
    let payload: Vec<String> =
        w.h.rows(&format!(
            "SELECT payload FROM outbox WHERE intent_id = {accepted} AND id > 0 ORDER BY id DESC"
        ))
        .await
        .iter()
        .map(|r| r.get("payload").unwrap().to_owned())
        .collect();
    assert!(
        payload.iter().any(|p| p.contains("\"resolved\"")),
        "the storefront learns the intent was resolved: {payload:?}"
    );

    let dismissed = w.paid_late("order", "dis").await;
    let before = w.outbox().await;
    let (st, v) = w
        .act(
            dismissed,
            "k2",
            json!({"action": "dismiss", "note": "staff test", "actor": "ana"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(w.outbox().await > before, "dismiss wrote no outbox row");

    let refunded = w.paid_late("order", "ref").await;
    let before = w.outbox().await;
    let (st, v) = w
        .act(
            refunded,
            "k3",
            json!({"action": "refund_required", "note": "cancelled", "actor": "ana",
                   "destination": "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let after_required = w.outbox().await;
    assert!(
        after_required > before,
        "refund_required wrote no outbox row"
    );
    let (st, v) = w
        .act(
            refunded,
            "k4",
            json!({"action": "refund_sent", "note": "sent", "actor": "ana", "txid": "ab12".repeat(16)}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(
        w.outbox().await > after_required,
        "refund_sent wrote no outbox row"
    );

    let source = w.paid_late("order", "src").await;
    let target = w.h.create("order", "dst", "LTC", "100").await;
    let before = w.outbox().await;
    let (st, v) = w
        .act(
            source,
            "k5",
            json!({"action": "reassign", "note": "n", "actor": "ana", "to_intent": target.id.to_string()}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM outbox WHERE intent_id = {} AND id > {before}",
            target.id
        ))
        .await
            > 0,
        "the reassign's target wrote no outbox row"
    );
}

// ---------------------------------------------------------------------------
// time: one policy for "in time", one clock

async fn a_late_payment_in_a_block_a_lagging_miner_stamped_before_the_expiry_is_late(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(1).await;
    let i = h.create("order", "lagging", "LTC", "100").await;
    h.pass_expiry(&i);
    h.sync().await;
    // Sent a minute after the expiry and seen at once, in a block whose
    // miner's clock lags ten minutes (the median-time-past rule allows it).
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.chain
        .set_block_time((i.expires_at_ms - 10 * 60_000) / 1000);
    h.chain.mine();
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::PaidLate)),
        "{:?}",
        r.reason
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 0);
}

async fn a_payment_in_a_block_with_no_time_is_not_on_time_by_its_block(b: Backend) {
    let mut h = Harness::new(b, Network::Solana, 1).await;
    h.import_pool(1).await;
    let i = h.create("order", "timeless", "SOL", "100").await;
    h.pass_expiry(&i);
    h.sync().await;
    // Solana and Tron may give no block time: 0 must not read as 1970.
    h.pay(&i.address, Asset::Sol, i.amount_due);
    h.chain.set_block_time(0);
    h.chain.mine();
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::PaidLate)),
        "{:?}",
        r.reason
    );
}

async fn a_payment_made_in_time_while_paywatch_was_down_counts_as_in_time(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(1).await;
    let i = h.create("order", "downtime", "LTC", "100").await;
    h.sync().await;
    // Mined an hour before the expiry, but read only after it (paywatch was
    // down): the block's time, well clear of any miner's lag, says in time.
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.chain
        .set_block_time((i.expires_at_ms - 60 * 60_000) / 1000);
    h.chain.mine();
    h.pass_expiry(&i);
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::Paid, None),
        "{:?}",
        r.reason
    );
}

async fn money_seen_in_time_that_is_final_only_after_the_confirm_by_deadline_goes_to_review(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    h.import_pool(1).await;
    h.chain.show_mempool();
    let i = h.create("topup", "slow-fee", "LTC", "100").await;
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.sync().await;
    assert_eq!(h.intent(i.id).await.status, Status::Confirming);
    // A fee too low to be mined for two days: the payer held an option on
    // the rate all that time. Final only now, it is for a person to judge.
    h.clock.advance_secs(2 * 24 * 3600);
    h.mine(3);
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::PaidLate)),
        "{:?}",
        r.reason
    );
    assert!(
        r.reason.as_deref().unwrap_or("").contains("confirm"),
        "{:?}",
        r.reason
    );
    assert_eq!(h.balance("acct-1").await, 0);
}

async fn a_reorg_deeper_than_the_confirmations_that_remines_the_payment_never_reverses_the_credit(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(1).await;
    let i = h.create("topup", "deep", "LTC", "100").await;
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);

    // Deeper than the confirmations: the payment's block and two above it
    // are replaced, and the payment is mined again at once. Written as the
    // watcher writes with `events_per_transaction = 1`, a reconcile free to
    // run between any two of its transactions.
    h.chain.reorg_keeping_transactions(3);
    h.mine(4);
    h.events_per_transaction = 1;
    h.reconcile_between_writes = true;
    h.sync().await;

    assert_eq!(
        h.count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'reversal'")
            .await,
        0
    );
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(h.intent(i.id).await.status, Status::Paid);
}

// ---------------------------------------------------------------------------
// found by the model-based test (tests/money_model.rs)

/// The target of a reassign has no transfers of its own: a reorg that drops
/// the payment it stands on touches only the source's address. The target
/// must be looked at too, or its settlement stands on nothing, silently.
async fn a_reorg_that_drops_a_reassigned_payment_reverses_the_target_visibly(b: Backend) {
    let mut w = World::new(b).await;
    let old = w.paid_late("order", "old").await;
    let meant = w.h.create("topup", "meant", "LTC", "100").await;
    let (st, v) = w
        .act(
            old,
            "re1",
            json!({"action": "reassign", "note": "paid the old address", "actor": "cy",
                   "to_intent": meant.id.to_string()}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    // The payment's block, and two above it, are replaced by blocks without it.
    w.h.mine(2);
    w.h.sync().await;
    w.h.chain.reorg(3);
    w.h.mine(4);
    w.h.sync().await;

    let m = w.h.intent(meant.id).await;
    assert_eq!(
        (m.status, m.exception),
        (Status::NeedsReview, Some(Exception::Reversed)),
        "{:?}",
        m.reason
    );
    assert_eq!(w.h.balance("acct-1").await, 0, "the credit is taken back");
    assert_eq!(w.reversals().await, 1);
    w.assert_money_rules_hold().await;
}

// ---------------------------------------------------------------------------
// one snapshot per reconcile pass

/// A pass reads the transfers, then (statements later) the final heights.
/// Read in two states, the payment's row from before a reorg and the final
/// height from after it, the payment would count as final in a chain that
/// never existed: credited, then reversed. One snapshot per pass reads one
/// state or the other, and neither credits.
async fn a_reconcile_pass_reads_one_state_while_a_reorg_commits_beside_it(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(1).await;
    let i = h.create("topup", "snapshot", "LTC", "100").await;
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(
        h.intent(i.id).await.status,
        Status::Confirming,
        "seen, not final"
    );

    // The payment's block is replaced by one without it, and another block
    // follows: the node now calls that height final.
    h.chain.reorg(1);
    h.mine(2);
    let events = h.stream.next_batch(50).await.unwrap();
    let final_height = h.stream.confirmed_final_height().await.unwrap().unwrap();
    let tip = h.chain.height();

    // A reconcile pass, stopped once it has read the transfers.
    let pause = paywatch::store::ReadPause::default();
    let reconciler = paywatch::reconcile::Reconciler::new(
        h.store.pausing_reads(pause.clone()),
        h.clock.clone(),
        std::collections::HashMap::new(),
        500,
    );
    h.store
        .declare_paid(i.id, None, paywatch::clock::Clock::now_ms(&*h.clock))
        .await
        .unwrap();
    let pass = tokio::spawn(async move { reconciler.run_once().await });
    pause.reached.notified().await;

    // The reorg commits meanwhile, whole, with its final height (on SQLite
    // its one writer waits for the pass instead).
    let ingest = h.another_ingest().await;
    let write = tokio::spawn(async move {
        ingest
            .apply_with_progress(Network::Litecoin, &events, Some((tip, final_height)))
            .await
    });
    for _ in 0..50 {
        if write.is_finished() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    pause.resume.notify_one();
    pass.await.unwrap().unwrap();
    write.await.unwrap().unwrap();
    h.reconciler.run_until_idle().await.unwrap();

    assert_eq!(
        h.count("SELECT COUNT(*) FROM ledger_entries").await,
        0,
        "in no state that existed was the payment final: nothing was ever credited"
    );
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 0);
    let r = h.intent(i.id).await;
    assert_eq!(r.status, Status::AwaitingPayment, "{:?}", r.reason);
}

// ---------------------------------------------------------------------------
// orders paid from the balance

async fn an_order_paid_from_the_balance_is_paid_once_and_crypto_after_it_is_a_duplicate(
    b: Backend,
) {
    let mut w = World::new(b).await;
    for reference in ["t-1", "t-2"] {
        let t = w.h.create("topup", reference, "LTC", "100").await;
        w.h.pay(&t.address, Asset::Ltc, t.amount_due);
    }
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 20_000);
    // The customer opened a crypto checkout for the order, then paid from
    // the balance instead.
    let open = w.h.create("order", "gpu-1", "LTC", "100").await;

    let debit = |key: &'static str, body: Value| {
        let client = &w.client;
        async move {
            client
                .call(
                    Method::POST,
                    "/v1/accounts/acct-1/debits",
                    Some(STOREFRONT),
                    Some(key),
                    Some(body.to_string()),
                )
                .await
        }
    };
    let (st, v) = debit("pay-gpu-1", json!({"usd_amount": "100", "order": "gpu-1"})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        v["order"],
        json!({"reference": "gpu-1", "paid_via": "balance"})
    );
    assert_eq!(v["available_usd_cents"], json!(10_000));
    // A retry takes nothing again; the same key for another order is refused.
    let (st, _) = debit("pay-gpu-1", json!({"usd_amount": "100", "order": "gpu-1"})).await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = debit("pay-gpu-1", json!({"usd_amount": "100", "order": "gpu-2"})).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    // An order is paid once, whichever way.
    let (st, v) = debit("again", json!({"usd_amount": "100", "order": "gpu-1"})).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already paid"),
        "{v}"
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    // Not enough left for a 200 USD order: nothing is taken, nothing paid.
    let (st, v) = debit("big", json!({"usd_amount": "200", "order": "gpu-2"})).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "insufficient_balance"),
        "{v}"
    );
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM settlements WHERE reference = 'gpu-2'")
            .await,
        0
    );

    // The storefront sees the order paid, and how.
    let row = w.h.payment_status("order", "gpu-1").await;
    assert_eq!(row.get("payment_status"), Some("paid"));
    let via =
        w.h.row("SELECT paid_via FROM paywatch_payment_status WHERE reference = 'gpu-1'")
            .await;
    assert_eq!(via.get("paid_via"), Some("balance"));
    let (st, listed) = w
        .client
        .call(
            Method::GET,
            "/v1/intents?kind=order&reference=gpu-1",
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{listed}");
    assert_eq!(listed["settlement"]["via"], json!("balance"));
    assert_eq!(listed["settlement"]["intent_id"], Value::Null);
    assert_eq!(listed["settlement"]["usd_cents"], json!(10_000));
    // Its open intent learned it in the same transaction, and no new one is made.
    assert!(w
        .h
        .intent(open.id)
        .await
        .reason
        .unwrap()
        .contains("balance"));
    assert!(w
        .h
        .try_create("order", "gpu-1", "LTC", "100")
        .await
        .is_err());

    // Crypto that arrives for it anyway is a duplicate for support.
    w.h.pay(&open.address, Asset::Ltc, open.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let i = w.h.intent(open.id).await;
    assert_eq!(
        (i.status, i.exception),
        (Status::NeedsReview, Some(Exception::Duplicate)),
        "{:?}",
        i.reason
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(
        w.h.count(
            "SELECT COUNT(*) FROM outbox WHERE topic = 'settlement' AND intent_id IS NULL \
             AND payload LIKE '%\"via\":\"balance\"%'"
        )
        .await,
        1,
        "the storefront's feed tells of the order paid from the balance"
    );
    w.assert_money_rules_hold().await;
}

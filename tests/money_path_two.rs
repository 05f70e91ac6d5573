//! The money path, round two (issue 36): each defect a fresh read of
//! `src/reconcile/` found, as the scenario that showed it, through the API
//! on both databases. A settlement is judged by the terms it was made
//! under; money sent after the expiry is never excess at the locked rate;
//! money after any decision is news; a re-mined copy of the settling
//! payment is that payment, never refundable; a token that is no method's
//! asset never moves an intent.

#[macro_use]
mod common;

use std::collections::HashMap;

use common::api::STOREFRONT;
use common::world::{code, World};
use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::reconcile::{Exception, Reconciler, Status, Tolerance};
use paywatch_core::{Amount, Asset, AssetId, Method, Network, Transfer};
use reqwest::{Method as Http, StatusCode};
use serde_json::{json, Value};

/// A customer's own Litecoin address, where a refund goes.
const LTC_REFUND: &str = "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s";

fn ltc() -> Method {
    Method::new(Asset::Ltc, Network::Litecoin).unwrap()
}

fn tolerance(basis_points: u32) -> HashMap<Method, Tolerance> {
    HashMap::from([(
        ltc(),
        Tolerance {
            basis_points,
            max: None,
        },
    )])
}

/// What the storefront reads to know whether a reference is paid, and how:
/// `paywatch_payment_status.paid` and `paid_via`.
async fn paid(h: &Harness, kind: &str, reference: &str) -> (i64, Option<String>) {
    let row = h
        .row(&format!(
            "SELECT paid, paid_via FROM paywatch_payment_status \
             WHERE kind = '{kind}' AND reference = '{reference}'"
        ))
        .await;
    (row.int("paid"), row.get("paid_via").map(str::to_owned))
}

/// As a declaration, a support action or a rescan would: every intent is
/// looked at again.
async fn queue_every_intent(h: &Harness) {
    h.store
        .execute_raw(
            "INSERT INTO reconcile_queue (network, address) SELECT network, address FROM intents",
        )
        .await
        .unwrap();
}

on_both_databases!(
    a_stricter_tolerance_and_dust_never_reverse_a_settlement_made_under_the_looser_one,
    money_sent_after_expiry_beside_an_on_time_payment_is_late_never_excess_at_the_locked_rate,
    a_payment_after_support_dismissed_an_empty_intent_opens_a_case,
    a_payment_to_a_reassign_target_that_had_received_nothing_opens_a_case,
    a_remined_copy_of_the_settling_payment_cannot_be_claimed_for_a_refund,
    a_token_that_is_no_method_asset_never_moves_an_intent,
    wrong_asset_money_that_arrived_before_settlement_can_be_refunded,
    an_order_paid_from_the_balance_is_credited_back_once_and_never_past_its_debit,
    a_wrong_network_refund_goes_back_on_the_network_the_money_came_on,
    a_reversed_top_up_is_paid_again_by_a_new_intent_and_its_money_coming_back_is_a_duplicate,
    a_reversed_order_is_paid_from_the_balance,
    a_sibling_intents_timely_payment_settles_a_reversed_reference,
    a_top_up_reversed_twice_over_two_intents_is_credited_once_net,
    support_accepts_a_reversed_intents_new_payment,
    same_asset_dust_under_the_settled_floor_never_reopens_a_paid_intent,
    a_refunded_duplicate_never_holds_up_a_settlement_whose_own_payment_left,
    a_case_names_each_payment_its_lateness_its_claim_and_what_the_settlement_stands_on,
    a_settlement_names_the_payments_it_stands_on_and_keeps_them_when_a_reorg_reverses_it,
    // found by the model-based test (tests/money_model.rs)
    a_payment_after_support_closed_a_reversed_intent_opens_a_case,
    // refunds checked on chain
    a_refund_reads_refunded_only_once_its_transaction_is_final_paying_the_destination,
    a_refund_paying_too_little_opens_a_case_until_the_transaction_that_pays_it_is_recorded,
    a_refund_never_seen_by_its_deadline_opens_a_case,
    a_reverted_refund_opens_a_case,
    a_refund_the_previous_release_recorded_is_followed_on_chain,
    a_checksummed_ethereum_refund_destination_is_matched_to_its_transfer,
    one_transaction_is_never_recorded_for_two_refunds,
    a_refund_owed_in_two_assets_is_paid_by_two_transactions,
);

/// Found 1: a top-up settled 0.4% short under 50 bp; an instance with the
/// tolerance set to 0 then saw dust at the address, and reversed it.
async fn a_stricter_tolerance_and_dust_never_reverse_a_settlement_made_under_the_looser_one(
    b: Backend,
) {
    let mut h = Harness::with_policy(b, Network::Litecoin, 1, tolerance(50)).await;
    h.import_pool(2).await;
    let i = h.create("topup", "short", "LTC", "100").await;
    h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 * 996 / 1000));
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(i.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);

    // A rolling change: one instance already runs with 0 bp, one still with 50.
    let strict = Reconciler::new(h.another_store().await, h.clock.clone(), tolerance(0), 100);
    let loose = h.another_reconciler(100).await;
    h.pay(&i.address, Asset::Ltc, Amount(100_000));
    h.mine(1);
    h.follow_chain().await;
    strict.run_until_idle().await.unwrap();
    assert_eq!(h.balance("acct-1").await, 10_000, "the settlement stands");
    let r = h.intent(i.id).await;
    assert_ne!(r.exception, Some(Exception::Reversed), "{:?}", r.reason);

    // Each instance looks again, in turn: nothing flips.
    for _ in 0..2 {
        queue_every_intent(&h).await;
        loose.run_until_idle().await.unwrap();
        queue_every_intent(&h).await;
        strict.run_until_idle().await.unwrap();
    }
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'reversal'")
            .await,
        0
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM settlements WHERE reversed_at IS NOT NULL")
            .await,
        0
    );
    // The settlement says what it was made under.
    let s = h
        .row(&format!(
            "SELECT tolerance_bp FROM settlements WHERE intent_id = {}",
            i.id
        ))
        .await;
    assert_eq!(s.get("tolerance_bp"), Some("50"));
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

/// Found 2: the amount due paid on time but slow to confirm; after the
/// expiry, a second, larger payment is mined first. When the first settles,
/// the second must be late money, not an excess support can credit at the
/// rate locked before the price fell.
async fn money_sent_after_expiry_beside_an_on_time_payment_is_late_never_excess_at_the_locked_rate(
    b: Backend,
) {
    let mut w = World::new(b).await;
    w.h.chain.show_mempool();
    let i = w.h.create("topup", "late-excess", "LTC", "100").await;
    let first = w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Confirming);

    // The first waits (a low fee); the expiry passes; the second is mined.
    assert!(w.h.chain.drop_from_mempool(&first));
    w.h.pass_expiry(&i);
    w.h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0));
    w.h.mine(1);
    w.h.sync().await;

    // The first is sped up (CPFP keeps its txid) and mined.
    w.h.chain.rebroadcast(vec![Transfer {
        network: Network::Litecoin,
        asset: AssetId::Known(Asset::Ltc),
        txid: first,
        index: 0,
        to: i.address.clone(),
        from: Some("scripted-payer".into()),
        amount: i.amount_due,
        success: true,
        matures_at: None,
    }]);
    w.h.mine(1);
    w.h.sync().await;

    let r = w.h.intent(i.id).await;
    assert_eq!(
        w.h.balance("acct-1").await,
        10_000,
        "paid once, for its price"
    );
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_ne!(r.exception, Some(Exception::Overpaid), "{:?}", r.reason);
    assert_eq!(r.exception, Some(Exception::Duplicate), "{:?}", r.reason);
    let reason = r.reason.clone().unwrap_or_default();
    assert!(reason.contains("after the intent expired"), "{reason}");

    // Support cannot credit it at the locked rate; it can be refunded.
    let (st, v) = w
        .act(
            i.id,
            "a1",
            json!({"action": "accept", "note": "credit it", "actor": "ana"}),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    let (st, v) = w
        .act(
            i.id,
            "r1",
            json!({"action": "refund_required", "note": "send it back", "actor": "ana",
                   "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    w.assert_money_rules_hold().await;
}

/// Found 3: support dismissed an expired order that had received nothing;
/// the customer's payment then arrived, and nothing told anyone.
async fn a_payment_after_support_dismissed_an_empty_intent_opens_a_case(b: Backend) {
    let mut w = World::new(b).await;
    let i = w.h.create("order", "dismissed-empty", "LTC", "100").await;
    w.h.pass_expiry(&i);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Expired);
    let (st, v) = w
        .act(
            i.id,
            "d1",
            json!({"action": "dismiss", "note": "abandoned cart", "actor": "ana"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.intent(i.id).await.status, Status::Resolved);
    let events_before = w.outbox_of(i.id).await;

    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;

    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert!(r.exception.is_some(), "{:?}", r.reason);
    assert_eq!(r.reason_code.as_deref(), Some("paid_after_decision"));
    assert!(
        w.outbox_of(i.id).await > events_before,
        "the storefront hears of it"
    );
    w.assert_money_rules_hold().await;
}

/// Found 3, its other half: a reassign's target had no transfers (the usual
/// case); when the customer paid it as well, that money went unseen.
async fn a_payment_to_a_reassign_target_that_had_received_nothing_opens_a_case(b: Backend) {
    let mut w = World::new(b).await;
    let source = w.h.create("order", "first-try", "LTC", "100").await;
    w.h.pass_expiry(&source);
    w.h.sync().await;
    w.h.pay(&source.address, Asset::Ltc, source.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        w.h.intent(source.id).await.exception,
        Some(Exception::PaidLate)
    );
    let target = w.h.create("order", "second-try", "LTC", "100").await;
    let (st, v) = w
        .act(
            source.id,
            "m1",
            json!({"action": "reassign", "to_intent": target.id.to_string(), "note": "same customer",
                   "actor": "ana"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.intent(target.id).await.status, Status::Resolved);

    w.h.pay(&target.address, Asset::Ltc, target.amount_due);
    w.h.mine(1);
    w.h.sync().await;

    let r = w.h.intent(target.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(r.exception, Some(Exception::Duplicate), "{:?}", r.reason);
    w.assert_money_rules_hold().await;
}

/// Found 5: a reorg past finality re-mined the settling payment under a new
/// row; support's refund_required took it for new money and claimed it,
/// while the settlement still stood on it.
async fn a_remined_copy_of_the_settling_payment_cannot_be_claimed_for_a_refund(b: Backend) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "remined", "LTC", "100").await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(3);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);

    // Deeper than the one confirmation: the payment is mined again elsewhere.
    w.h.chain.reorg_keeping_transactions(3);
    w.h.mine(4);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    let (st, v) = w
        .act(
            i.id,
            "r1",
            json!({"action": "refund_required", "note": "customer wants it back", "actor": "ana",
                   "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM refunds").await,
        0,
        "the payment the settlement stands on is not refundable"
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.reversals().await, 0);
    w.assert_money_rules_hold().await;
}

/// Found 8: any contract's `Transfer` to a watched address (fake "USDT",
/// look-alike dust) sent the intent to review, and re-opened paid ones.
async fn a_token_that_is_no_method_asset_never_moves_an_intent(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Ethereum, 1).await).await;
    let spam = AssetId::Token {
        contract: "0x00000000000000000000000000000000deadbeef".into(),
    };
    let open = w.h.create("order", "open", "USDT", "100").await;
    let paid = w.h.create("topup", "paid", "USDT", "100").await;
    w.h.pay(&paid.address, Asset::Usdt, paid.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(paid.id).await.status, Status::Paid);

    w.h.chain.pay(&open.address, spam.clone(), 100_000_000);
    w.h.chain.pay(&paid.address, spam, 1);
    w.h.mine(2);
    w.h.sync().await;

    let r = w.h.intent(open.id).await;
    assert_eq!(r.status, Status::AwaitingPayment, "{:?}", r.reason);
    let r = w.h.intent(paid.id).await;
    assert_eq!(r.status, Status::Paid, "{:?}", r.reason);
    // Recorded all the same, for an operator to see.
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM transfers WHERE asset LIKE 'token:%'")
            .await,
        2
    );
    // A real wrong asset (another method's) still goes to review.
    w.h.pay(&open.address, Asset::Usdc, open.amount_due);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(open.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::WrongAsset)),
        "{:?}",
        r.reason
    );
    w.assert_money_rules_hold().await;
}

/// Found 7: USDC sent to a USDT intent, then the USDT. The intent settled
/// with the USDC beside it; refund_required said there was nothing to
/// refund, accept said already paid, and only dismiss was left.
async fn wrong_asset_money_that_arrived_before_settlement_can_be_refunded(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Ethereum, 1).await).await;
    let i = w.h.create("topup", "usdc-first", "USDT", "100").await;
    w.h.pay(&i.address, Asset::Usdc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    w.h.pay(&i.address, Asset::Usdt, i.amount_due);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::WrongAsset)),
        "{:?}",
        r.reason
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000, "the USDT paid it");

    let (st, v) = w
        .act(
            i.id,
            "r1",
            json!({"action": "refund_required", "note": "send the USDC back", "actor": "ana",
                   "destination": "0x52908400098527886e0f7030069857d2e4169ee7"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    // The refund claims the USDC, never the USDT the settlement stands on.
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM decision_payments WHERE claims = 1 AND asset = 'USDC'")
            .await,
        1
    );
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM decision_payments WHERE claims = 1 AND asset = 'USDT'")
            .await,
        0
    );
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::Resolved, "{:?}", r.reason);
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    w.assert_money_rules_hold().await;
}

/// Credits back: an order paid from the balance is cancelled, in part then
/// whole; the account gets its money back once per key, never more than
/// the debit took, each credit on the feed.
async fn an_order_paid_from_the_balance_is_credited_back_once_and_never_past_its_debit(b: Backend) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "funds", "LTC", "100").await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    let post = |path: &str, key: &str, body: Value| {
        let (path, key, body) = (path.to_owned(), key.to_owned(), body.to_string());
        let client = &w.client;
        async move {
            client
                .call(Http::POST, &path, Some(STOREFRONT), Some(&key), Some(body))
                .await
        }
    };
    let (st, v) = post(
        "/v1/accounts/acct-1/debits",
        "d1",
        json!({"usd_amount": "30.00", "order": "gpu-7"}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 7_000);

    let credits = "/v1/accounts/acct-1/credits";
    let (st, v) = post(
        credits,
        "c1",
        json!({"usd_amount": "20.00", "debit": "d1", "memo": "one GPU-hour unused"}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["available_usd_cents"], 9_000, "{v}");
    // A retry posts nothing again.
    let (st, v) = post(
        credits,
        "c1",
        json!({"usd_amount": "20.00", "debit": "d1", "memo": "one GPU-hour unused"}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 9_000);
    // The same key for another amount is another request.
    let (st, v) = post(credits, "c1", json!({"usd_amount": "5.00", "debit": "d1"})).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    // Never past the debit.
    let (st, v) = post(credits, "c2", json!({"usd_amount": "10.01", "debit": "d1"})).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "credit_exceeds_debit"),
        "{v}"
    );
    assert_eq!(w.h.balance("acct-1").await, 9_000);
    let (st, v) = post(credits, "c3", json!({"usd_amount": "10.00", "debit": "d1"})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    // Only a debit of this account can be credited back.
    let (st, v) = post(
        credits,
        "c4",
        json!({"usd_amount": "1.00", "debit": "nope"}),
    )
    .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"), "{v}");
    let (st, v) = post(
        "/v1/accounts/acct-2/credits",
        "c5",
        json!({"usd_amount": "1.00", "debit": "d1"}),
    )
    .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"), "{v}");

    // Each credit is a ledger entry on the feed, naming the order.
    assert_eq!(
        w.h.count(
            "SELECT COUNT(*) FROM outbox WHERE topic = 'ledger' \
             AND payload LIKE '%credit_back:%' AND payload LIKE '%gpu-7%'"
        )
        .await,
        2
    );
    // The order stays paid: what the storefront does with it is its own.
    assert_eq!(
        w.h.payment_status("order", "gpu-7")
            .await
            .get("payment_status"),
        Some("paid")
    );
    w.assert_money_rules_hold().await;
}

/// USDT for a Tron intent sent on Ethereum to its address's twin: the
/// refund goes back on Ethereum, where the money is, so its destination is
/// an Ethereum address, never a Tron one.
async fn a_wrong_network_refund_goes_back_on_the_network_the_money_came_on(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Ethereum, 1).await).await;
    let tron: Vec<String> = (1..=2u8)
        .map(|n| paywatch_tron::encode_address(&[n; 20]))
        .collect();
    w.h.store
        .import_addresses(Network::Tron, &tron, w.h.clock.now_ms())
        .await
        .unwrap();
    let i =
        w.h.intents
            .create(&paywatch::intents::NewIntent {
                kind: "order".into(),
                reference: "usdt-on-tron".into(),
                account: "acct-1".into(),
                asset: "USDT".into(),
                network: "tron".into(),
                usd_amount: "100".into(),
            })
            .await
            .unwrap();
    let (_, twin) = paywatch::twin::twin(Network::Tron, &i.address).expect("a twin");
    w.h.watch.insert(&twin);
    w.h.pay(&twin, Asset::Usdt, i.amount_due);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::WrongNetwork)),
        "{:?}",
        r.reason
    );

    let refund = |destination: &str| {
        json!({"action": "refund_required", "note": "sent on the wrong network", "actor": "ana",
               "destination": destination})
    };
    // A Tron address would send it where the money is not.
    let (st, v) = w.act(i.id, "r0", refund(&i.address)).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("ethereum"), "{v}");
    let (st, v) = w
        .act(
            i.id,
            "r1",
            refund("0x52908400098527886e0f7030069857d2e4169ee7"),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        w.h.count(
            "SELECT COUNT(*) FROM decision_payments WHERE claims = 1 AND network = 'ethereum'"
        )
        .await,
        1
    );
    assert_eq!(w.h.intent(i.id).await.status, Status::Resolved);
    w.assert_money_rules_hold().await;
}

// ---------------------------------------------------------------------------
// found by the model-based test (tests/money_model.rs)

/// A reorg took the settling payment out; the payer sent again after the
/// expiry, and support required that late money refunded, closing the
/// reversed case. A third payment, mined after that decision, stood under
/// nothing: the reversed settlement's branch read "closed by support since
/// the reversal" as the last word, without the check for money after it
/// that every other closed case has.
async fn a_payment_after_support_closed_a_reversed_intent_opens_a_case(b: Backend) {
    let mut w = World::new(b).await;
    let i =
        w.h.create("topup", "reversed-then-closed", "LTC", "100")
            .await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    // The payment's block is replaced by one without it, after the expiry.
    w.h.pass_expiry(&i);
    w.h.chain.reorg(1);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.exception, Some(Exception::Reversed), "{:?}", r.reason);

    // The payer pays again, late; support has it refunded.
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let (st, v) = w
        .act(
            i.id,
            "rr1",
            json!({"action": "refund_required", "note": "paid again after the expiry",
                   "actor": "ana", "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.intent(i.id).await.status, Status::Resolved);
    let events_before = w.outbox_of(i.id).await;

    // And a third payment arrives after that decision.
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;

    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(r.exception, Some(Exception::Duplicate), "{:?}", r.reason);
    assert_eq!(r.reason_code.as_deref(), Some("paid_after_decision"));
    assert!(
        w.outbox_of(i.id).await > events_before,
        "the storefront hears of it"
    );
    assert_eq!(
        w.reversals().await,
        1,
        "nothing is credited or reversed again"
    );
    assert_eq!(
        w.h.balance("acct-1").await,
        0,
        "late money is never credited by itself"
    );
    w.assert_money_rules_hold().await;
}

/// Found 4: a reversed reference could never be paid again, and
/// `reversed_at` read as "paid": the storefront's new intent was refused.
/// Now the reversal frees it; the first payment coming back afterwards is a
/// duplicate, never a second credit.
async fn a_reversed_top_up_is_paid_again_by_a_new_intent_and_its_money_coming_back_is_a_duplicate(
    b: Backend,
) {
    let mut w = World::new(b).await;
    let first =
        w.h.create("topup", "reversed-then-repaid", "LTC", "100")
            .await;
    w.h.pay(&first.address, Asset::Ltc, first.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(first.id).await.status, Status::Paid);
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    // A reorg past finality takes the payment away.
    let dropped = w.h.chain.reorg(1);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(first.id).await;
    assert_eq!(r.exception, Some(Exception::Reversed), "{:?}", r.reason);
    assert_eq!(w.h.balance("acct-1").await, 0);
    assert_eq!(paid(&w.h, "topup", "reversed-then-repaid").await.0, 0);

    // The storefront asks for the money again, and the customer pays.
    let again =
        w.h.try_create("topup", "reversed-then-repaid", "LTC", "100")
            .await
            .expect("a reversed reference takes a new intent");
    w.h.pay(&again.address, Asset::Ltc, again.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(again.id).await.status, Status::Paid);
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(paid(&w.h, "topup", "reversed-then-repaid").await.0, 1);
    assert_eq!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM settlements_superseded WHERE intent_id = {}",
            first.id
        ))
        .await,
        1,
        "the reversed settlement is kept"
    );

    // The first payment is broadcast again and mined: it is a duplicate
    // for review, never credited a second time.
    w.h.chain.rebroadcast(dropped);
    w.h.mine(1);
    w.h.sync().await;
    let r = w.h.intent(first.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(r.exception, Some(Exception::Duplicate), "{:?}", r.reason);
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.reversals().await, 1);
    w.assert_money_rules_hold().await;
}

/// Found 4: a debit for an order whose chain settlement was reversed was
/// refused as "already paid".
async fn a_reversed_order_is_paid_from_the_balance(b: Backend) {
    let mut w = World::new(b).await;
    let funds = w.h.create("topup", "funds", "LTC", "100").await;
    w.h.pay(&funds.address, Asset::Ltc, funds.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let order = w.h.create("order", "gpu-9", "LTC", "30").await;
    w.h.pay(&order.address, Asset::Ltc, order.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(order.id).await.status, Status::Paid);
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    w.h.chain.reorg(1);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(order.id).await;
    assert_eq!(r.exception, Some(Exception::Reversed), "{:?}", r.reason);
    assert_eq!(paid(&w.h, "order", "gpu-9").await.0, 0);

    let (st, v) = w
        .client
        .call(
            Http::POST,
            "/v1/accounts/acct-1/debits",
            Some(STOREFRONT),
            Some("pay-gpu-9"),
            Some(json!({"usd_amount": "30.00", "order": "gpu-9"}).to_string()),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 7_000);
    assert_eq!(
        paid(&w.h, "order", "gpu-9").await,
        (1, Some("balance".into()))
    );
    w.assert_money_rules_hold().await;
}

/// Found 4: an order asked twice, both paid on time in one block; the
/// first settled and the second was a duplicate. A reorg drops both, and
/// only the second is mined again: it settles the order.
async fn a_sibling_intents_timely_payment_settles_a_reversed_reference(b: Backend) {
    let mut w = World::new(b).await;
    let one = w.h.create("order", "asked-twice", "LTC", "30").await;
    let two = w.h.create("order", "asked-twice", "LTC", "30").await;
    w.h.pay(&one.address, Asset::Ltc, one.amount_due);
    w.h.pay(&two.address, Asset::Ltc, two.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let settler =
        w.h.store
            .settled_intent(paywatch::IntentKind::Order, "asked-twice")
            .await
            .unwrap()
            .expect("one of them settled the order");
    let (winner, sibling) = if settler == one.id {
        (one, two)
    } else {
        (two, one)
    };
    let r = w.h.intent(sibling.id).await;
    assert_eq!(r.exception, Some(Exception::Duplicate), "{:?}", r.reason);

    let dropped = w.h.chain.reorg(1);
    w.h.chain.rebroadcast(
        dropped
            .into_iter()
            .filter(|t| t.to == sibling.address)
            .collect(),
    );
    w.h.mine(2);
    w.h.sync().await;

    let r = w.h.intent(sibling.id).await;
    assert_eq!(r.status, Status::Paid, "{:?}", r.reason);
    let r = w.h.intent(winner.id).await;
    assert_ne!(r.status, Status::Paid, "{:?}", r.reason);
    assert_eq!(
        w.h.store
            .settled_intent(paywatch::IntentKind::Order, "asked-twice")
            .await
            .unwrap(),
        Some(sibling.id)
    );
    assert_eq!(paid(&w.h, "order", "asked-twice").await.0, 1);
    w.assert_money_rules_hold().await;
}

/// Found 4, the case a freed reference opens: two intents of one top-up
/// take turns. The first settles and is reversed; the second settles and
/// is reversed; the first's payment comes back and settles again. The
/// first is credited twice over its life, each under its own key, and the
/// account ends with one top-up's worth.
async fn a_top_up_reversed_twice_over_two_intents_is_credited_once_net(b: Backend) {
    let mut w = World::new(b).await;
    let one = w.h.create("topup", "ping-pong", "LTC", "100").await;
    let two = w.h.create("topup", "ping-pong", "LTC", "100").await;
    w.h.pay(&one.address, Asset::Ltc, one.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(one.id).await.status, Status::Paid);
    let dropped_one = w.h.chain.reorg(1);
    w.h.mine(2);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 0);

    w.h.pay(&two.address, Asset::Ltc, two.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(two.id).await.status, Status::Paid);
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    w.h.chain.reorg(1);
    w.h.chain.rebroadcast(dropped_one);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(one.id).await;
    assert_eq!(r.status, Status::Paid, "{:?}", r.reason);
    assert!(
        r.paid_at_ms.is_some() && r.reversed_at_ms.is_none(),
        "the intent reads paid again, not reversed: {r:?}"
    );
    let r = w.h.intent(two.id).await;
    assert_ne!(r.status, Status::Paid, "{:?}", r.reason);
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM ledger_entries WHERE entry_key = 'topup:{}:2'",
            one.id
        ))
        .await,
        1,
        "the second credit of one intent has a key of its own"
    );
    w.assert_money_rules_hold().await;
}

/// Found 8, the same-asset half: look-alike USDT dust at a paid address
/// re-opened the intent. Under the dust floor its settlement was made
/// under, it is recorded and listed for an operator but never moves the
/// intent, whatever floor is configured later; money at the floor is news.
async fn same_asset_dust_under_the_settled_floor_never_reopens_a_paid_intent(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Tron, 1).await).await;
    let usdt = Method::new(Asset::Usdt, Network::Tron).unwrap();
    // 0.1 USDT (6 decimals).
    w.h.reconciler =
        w.h.reconciler
            .clone()
            .with_dust_floors(HashMap::from([(usdt, Amount(100_000))]));
    let i = w.h.create("topup", "dusted", "USDT", "100").await;
    w.h.pay(&i.address, Asset::Usdt, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);
    let events = w.outbox_of(i.id).await;

    // Look-alike dust, then the floor removed: the settlement keeps its own.
    w.h.pay(&i.address, Asset::Usdt, Amount(99_999));
    w.h.mine(2);
    w.h.sync().await;
    w.h.reconciler = w.h.reconciler.clone().with_dust_floors(HashMap::new());
    w.h.pay(&i.address, Asset::Usdt, Amount(1));
    w.h.mine(2);
    w.h.sync().await;
    queue_every_intent(&w.h).await;
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::Paid, None),
        "{:?}",
        r.reason
    );
    assert_eq!(
        r.amount_final, i.amount_due,
        "dust is no part of the payment"
    );
    assert_eq!(
        w.outbox_of(i.id).await,
        events,
        "the storefront hears nothing"
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    w.assert_money_rules_hold().await;

    // Listed for an operator, with why.
    let (st, v) = w
        .client
        .call(
            Http::GET,
            "/v1/review-queue",
            Some(common::api::OPERATOR),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let dust: Vec<&Value> = v["spam_transfers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["reason"] == "dust_after_settlement")
        .collect();
    assert_eq!(dust.len(), 2, "{v}");
    assert!(dust.iter().all(|t| t["intent_id"] == i.id), "{v}");

    // Money at the floor is a payment a person looks at.
    w.h.pay(&i.address, Asset::Usdt, Amount(100_000));
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::Duplicate)),
        "{:?}",
        r.reason
    );
    w.assert_money_rules_hold().await;
}

/// Found 4, support's way: a reversed top-up's payer paid again after the
/// expiry; accept was refused as "already paid" (`reversed_at` read as
/// paid). Accepting the new payment settles it again, credited once more
/// under a key of its own; the payment it stands on is named.
async fn support_accepts_a_reversed_intents_new_payment(b: Backend) {
    let mut w = World::new(b).await;
    let i =
        w.h.create("topup", "reversed-then-accepted", "LTC", "100")
            .await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    w.h.pass_expiry(&i);
    w.h.chain.reorg(1);
    w.h.mine(2);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 0);

    // Paid again, late: a case, never settled by itself.
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(w.h.balance("acct-1").await, 0);

    let (st, v) = w.accept(i.id, "accept-again").await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.outcome),
        (
            Status::Resolved,
            Some(paywatch::reconcile::Outcome::PaidBySupport)
        ),
        "{:?}",
        r.reason
    );
    assert!(
        r.paid_at_ms.is_some() && r.reversed_at_ms.is_none(),
        "the intent reads paid again, not reversed: {r:?}"
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM ledger_entries WHERE entry_key = 'topup:{}:2'",
            i.id
        ))
        .await,
        1
    );
    assert_eq!(paid(&w.h, "topup", "reversed-then-accepted").await.0, 1);
    // Accepted once: a second accept is refused.
    let (st, v) = w.accept(i.id, "accept-thrice").await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    w.assert_money_rules_hold().await;
}

/// Found 6: a settlement by the chain stands on the payments that paid it,
/// never on money support has owed back since. The customer pays twice;
/// the duplicate is required for refund; a reorg past finality takes both
/// and only the duplicate comes back. Counting it would leave 100 USD
/// credited on a payment that left the chain while the customer is
/// refunded the one that stayed.
async fn a_refunded_duplicate_never_holds_up_a_settlement_whose_own_payment_left(b: Backend) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "paid-twice", "LTC", "100").await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);
    let twice = w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    let (st, v) = w
        .act(
            i.id,
            "refund-twice",
            json!({"action": "refund_required", "note": "paid twice", "actor": "ana",
                   "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.intent(i.id).await.status, Status::Resolved);
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    reorg_keeping_only(&mut w, i.id, &twice).await;
    assert_eq!(w.h.balance("acct-1").await, 0, "the credit is taken back");
    w.assert_money_rules_hold().await;
}

/// The last two blocks go; of their payments only `kept` is broadcast
/// again and mined, the rest gone for good, which reverses the intent's
/// settlement.
async fn reorg_keeping_only(w: &mut World, intent: i64, kept: &str) {
    let dropped = w.h.chain.reorg(2);
    w.h.chain
        .rebroadcast(dropped.into_iter().filter(|t| t.txid == kept).collect());
    w.h.mine(3);
    w.h.sync().await;
    let r = w.h.intent(intent).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::Reversed)),
        "{:?}",
        r.reason
    );
}

/// Payments have identities, and support sees lateness (found 2, found 6):
/// the case lists each transfer by its chain identity, says which were made
/// after the expiry, which decision claims which, and what the settlement
/// stands on, as the status machine reads them.
async fn a_case_names_each_payment_its_lateness_its_claim_and_what_the_settlement_stands_on(
    b: Backend,
) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "case-reading", "LTC", "100").await;
    let on_time = w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);
    w.h.pass_expiry(&i);
    let late = w.h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 / 2));
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::NeedsReview);
    let (st, v) = w
        .act(
            i.id,
            "refund-late",
            json!({"action": "refund_required", "note": "sent after expiry", "actor": "ana",
                   "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    let case = w.case(i.id).await;
    let transfers = case["transfers"].as_array().expect("transfers");
    let row = |txid: &str| {
        transfers
            .iter()
            .find(|t| t["txid"] == txid)
            .unwrap_or_else(|| panic!("{txid} on the case: {case}"))
            .clone()
    };
    let (paid, refunded) = (row(&on_time), row(&late));
    for (t, txid) in [(&paid, &on_time), (&refunded, &late)] {
        assert_eq!(
            t["payment"],
            format!("litecoin:{txid}:{}", t["index"]),
            "{t}"
        );
    }
    assert_eq!(
        (&paid["late"], &paid["settles"], &paid["claimed_by"]),
        (&json!(false), &json!(true), &Value::Null),
        "{paid}"
    );
    assert_eq!(
        (&refunded["late"], &refunded["settles"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(
        refunded["claimed_by"]["action"], "refund_required",
        "{refunded}"
    );
    assert!(refunded["claimed_by"]["decision_id"].as_i64().is_some());
}

/// The payments a settlement stands on, as the store names them.
async fn stands_on(h: &Harness, intent: i64) -> Vec<String> {
    let mut txids: Vec<String> = h
        .rows(&format!(
            "SELECT txid FROM settlement_payments WHERE intent_id = {intent}"
        ))
        .await
        .iter()
        .map(|r| r.get("txid").expect("txid").to_owned())
        .collect();
    txids.sort();
    txids
}

fn sorted(mut txids: Vec<String>) -> Vec<String> {
    txids.sort();
    txids
}

/// Payments have identities: a settlement names the payments it stands on.
/// A timely duplicate joins them until support owes it back; a reorg that
/// takes out one of the settling payments for good reverses the settlement,
/// which keeps naming what it stood on.
async fn a_settlement_names_the_payments_it_stands_on_and_keeps_them_when_a_reorg_reverses_it(
    b: Backend,
) {
    let mut w = World::new(b).await;
    let i = w.h.create("topup", "named", "LTC", "100").await;
    let half = Amount(i.amount_due.0 / 2);
    let first = w.h.pay(&i.address, Asset::Ltc, half);
    w.h.mine(1);
    let second =
        w.h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 - half.0));
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::Paid);
    let settling = sorted(vec![first.clone(), second.clone()]);
    assert_eq!(stands_on(&w.h, i.id).await, settling);

    let twice = w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.status, Status::NeedsReview);
    assert_eq!(
        stands_on(&w.h, i.id).await,
        sorted(vec![first.clone(), second.clone(), twice.clone()]),
        "timely money the settlement would stand on if the first payments left"
    );
    let (st, v) = w
        .act(
            i.id,
            "refund-twice",
            json!({"action": "refund_required", "note": "paid twice", "actor": "ana",
                   "destination": LTC_REFUND}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        stands_on(&w.h, i.id).await,
        settling,
        "money owed back is never what a settlement stands on"
    );
    w.assert_money_rules_hold().await;

    reorg_keeping_only(&mut w, i.id, &twice).await;
    assert_eq!(
        stands_on(&w.h, i.id).await,
        settling,
        "a reversed settlement names what the reorg took it off"
    );
    assert_eq!(w.h.balance("acct-1").await, 0);
    w.assert_money_rules_hold().await;
}

// ---------------------------------------------------------------------------
// refunds checked on chain

/// The refund's row in the storefront's view: its state on chain, and why
/// it does not match.
async fn refund_state(h: &Harness, id: i64) -> (Option<String>, Option<String>) {
    let row = h
        .row(&format!(
            "SELECT refund_state, refund_mismatch FROM paywatch_intents WHERE intent_id = {id}"
        ))
        .await;
    (
        row.get("refund_state").map(str::to_owned),
        row.get("refund_mismatch").map(str::to_owned),
    )
}

/// The `refund.checked` events of intent `id`, their states in order.
async fn refund_events(h: &Harness, id: i64) -> Vec<String> {
    h.rows(&format!(
        "SELECT payload FROM outbox WHERE intent_id = {id} AND topic = 'refund' ORDER BY id"
    ))
    .await
    .iter()
    .map(|r| {
        let v: Value = serde_json::from_str(r.get("payload").unwrap()).unwrap();
        v["refund_state"].as_str().unwrap().to_owned()
    })
    .collect()
}

async fn require_refund(w: &World, id: i64, key: &str, destination: &str) {
    let (st, v) = w
        .act(
            id,
            key,
            json!({"action": "refund_required", "note": "customer asked", "actor": "ana",
                   "destination": destination}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

async fn refund_sent(w: &World, id: i64, key: &str, txid: &str) -> (StatusCode, Value) {
    w.act(
        id,
        key,
        json!({"action": "refund_sent", "note": "sent from the hot wallet", "actor": "ana",
               "txid": txid}),
    )
    .await
}

/// Support's refund is followed by the watcher: `sent_unconfirmed` until
/// its transaction is final paying the destination, then `refunded` with
/// an event; a reorg that takes the transaction out says so again.
async fn a_refund_reads_refunded_only_once_its_transaction_is_final_paying_the_destination(
    b: Backend,
) {
    let mut w = World::with_harness(Harness::new(b, Network::Litecoin, 2).await).await;
    let i = w.h.create("order", "refund-me", "LTC", "100").await;
    w.h.pass_expiry(&i);
    w.h.sync().await;
    w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    w.h.mine(2);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.exception, Some(Exception::PaidLate));

    require_refund(&w, i.id, "r1", LTC_REFUND).await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("required")
    );
    let txid = w.h.pay(LTC_REFUND, Asset::Ltc, i.amount_due);
    let (st, v) = refund_sent(&w, i.id, "r2", &txid).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("sent_unconfirmed")
    );

    // Mined, one confirmation of two: seen, not final.
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("sent_unconfirmed")
    );
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await,
        (Some("refunded".into()), None)
    );
    assert_eq!(refund_events(&w.h, i.id).await, ["refunded"]);
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::Resolved, "{:?}", r.reason);
    let case = w.case(i.id).await;
    assert_eq!(case["refund"]["state"], "refunded", "{case}");
    assert_eq!(case["refund"]["network"], "litecoin", "{case}");
    w.assert_money_rules_hold().await;

    // A reorg past finality takes the refund's transaction out: no longer
    // refunded, and said so. Broadcast again, it is mined again: not final
    // at one confirmation, then refunded again, each told.
    let dropped = w.h.chain.reorg(2);
    w.h.mine(3);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("sent_unconfirmed"),
        "a refund whose transaction left the chain is no longer refunded"
    );
    w.h.chain.rebroadcast(dropped);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("sent_unconfirmed"),
        "mined again, one confirmation of two"
    );
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("refunded"),
        "re-mined and final again"
    );
    assert_eq!(
        refund_events(&w.h, i.id).await,
        ["refunded", "sent_unconfirmed", "refunded"]
    );
    // Gone for good: unconfirmed until its deadline, then a case.
    w.h.chain.reorg(2);
    w.h.mine(3);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("sent_unconfirmed")
    );
    w.h.clock.advance_secs(86_400);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await.0.as_deref(),
        Some("mismatch")
    );
    assert_eq!(w.h.intent(i.id).await.status, Status::NeedsReview);
    assert_eq!(
        refund_events(&w.h, i.id).await,
        [
            "refunded",
            "sent_unconfirmed",
            "refunded",
            "sent_unconfirmed",
            "mismatch"
        ]
    );
    w.assert_money_rules_hold().await;
}

/// A refund's transaction that pays less than what is owed opens a case
/// with the reason; nothing else may close it; the transaction that pays
/// it, recorded with `refund_sent` again, puts it right.
async fn a_refund_paying_too_little_opens_a_case_until_the_transaction_that_pays_it_is_recorded(
    b: Backend,
) {
    let mut w = World::new(b).await;
    let id = w.paid_late("order", "short-refund").await;
    let due = w.h.intent(id).await.amount_due;
    require_refund(&w, id, "r1", LTC_REFUND).await;
    let short = w.h.pay(LTC_REFUND, Asset::Ltc, Amount(due.0 - 1_000));
    let (st, v) = refund_sent(&w, id, "r2", &short).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(1);
    w.h.sync().await;

    let r = w.h.intent(id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(r.reason_code.as_deref(), Some("refund_mismatch"));
    let (state, why) = refund_state(&w.h, id).await;
    assert_eq!(state.as_deref(), Some("mismatch"));
    let why = why.expect("the mismatch says why");
    assert!(why.contains("less than") && why.contains(&short), "{why}");
    assert_eq!(refund_events(&w.h, id).await, ["mismatch"]);
    let (st, v) = w.accept(id, "r3").await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert!(v.to_string().contains("refund_sent"), "{v}");

    let full = w.h.pay(LTC_REFUND, Asset::Ltc, due);
    let (st, v) = refund_sent(&w, id, "r4", &full).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, id).await,
        (Some("refunded".into()), None)
    );
    let r = w.h.intent(id).await;
    assert_eq!(r.status, Status::Resolved, "{:?}", r.reason);
    assert_eq!(refund_events(&w.h, id).await, ["mismatch", "refunded"]);
    // Once refunded, the transaction stands: nothing replaces it.
    let (st, v) = refund_sent(&w, id, "r5", &short).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    w.assert_money_rules_hold().await;
}

/// A transaction id nobody can find on the network by the refund's
/// deadline (`reconcile.refund_check_secs`, a day) opens a case.
async fn a_refund_never_seen_by_its_deadline_opens_a_case(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("order", "lost-refund").await;
    require_refund(&w, id, "r1", LTC_REFUND).await;
    let (st, v) = refund_sent(&w, id, "r2", &"ab12".repeat(16)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, id).await.0.as_deref(),
        Some("sent_unconfirmed")
    );
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);

    w.h.clock.advance_secs(86_400);
    w.h.sync().await;
    let r = w.h.intent(id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    assert_eq!(r.reason_code.as_deref(), Some("refund_mismatch"));
    let (state, why) = refund_state(&w.h, id).await;
    assert_eq!(state.as_deref(), Some("mismatch"));
    assert!(why.unwrap().contains("by the refund's deadline"));
    assert_eq!(refund_events(&w.h, id).await, ["mismatch"]);
    // Looked at once past the deadline: the next passes have nothing to do.
    assert_eq!(w.h.sync().await.examined, 0);
    w.assert_money_rules_hold().await;
}

/// A refund whose transaction failed on chain (reverted) moved nothing:
/// a case, with the reason.
async fn a_reverted_refund_opens_a_case(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Tron, 1).await).await;
    let i = w.h.create("order", "reverted-refund", "TRX", "100").await;
    w.h.pass_expiry(&i);
    w.h.sync().await;
    w.h.pay(&i.address, Asset::Trx, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.exception, Some(Exception::PaidLate));
    let destination = paywatch_tron::encode_address(&[9; 20]);
    require_refund(&w, i.id, "r1", &destination).await;
    let txid =
        w.h.chain
            .pay_failed(&destination, AssetId::Known(Asset::Trx), i.amount_due.0);
    let (st, v) = refund_sent(&w, i.id, "r2", &txid).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(1);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
    let (state, why) = refund_state(&w.h, i.id).await;
    assert_eq!(state.as_deref(), Some("mismatch"));
    assert!(why.unwrap().contains("failed"));
    w.assert_money_rules_hold().await;
}

/// During a rolling upgrade an instance of the previous release records
/// `refund_required` (and may record `refund_sent`) without the refund's
/// network or state: reconcile reads such a refund as the previous release
/// meant it, on the network the money came on, and follows it on chain.
async fn a_refund_the_previous_release_recorded_is_followed_on_chain(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("order", "old-instance-refund").await;
    let due = w.h.intent(id).await.amount_due;
    require_refund(&w, id, "r1", LTC_REFUND).await;
    // As the previous release writes it: no network, no state, its txid;
    // its support action queues the intent, as every action does.
    let txid = w.h.pay(LTC_REFUND, Asset::Ltc, due);
    w.h.store
        .execute_raw(&format!(
            "UPDATE refunds SET network = NULL, state = NULL, txid = '{txid}', \
             sent_at = required_at WHERE intent_id = {id}"
        ))
        .await
        .unwrap();
    w.h.store
        .execute_raw(&format!(
            "INSERT INTO reconcile_queue (network, address) \
             SELECT network, address FROM intents WHERE id = {id}"
        ))
        .await
        .unwrap();
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, id).await,
        (Some("refunded".into()), None)
    );
    assert_eq!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM refunds WHERE intent_id = {id} AND network = 'litecoin'"
        ))
        .await,
        1,
        "the network is written back once judged"
    );
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);
    w.assert_money_rules_hold().await;
}

/// The previous release kept an Ethereum destination as pasted, with its
/// checksum's capitals; the watcher records transfers lower-case. The
/// refund's transaction to it is still its refund.
async fn a_checksummed_ethereum_refund_destination_is_matched_to_its_transfer(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Ethereum, 1).await).await;
    let i = w.h.create("order", "checksummed", "ETH", "100").await;
    w.h.pass_expiry(&i);
    w.h.sync().await;
    w.h.pay(&i.address, Asset::Eth, i.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.exception, Some(Exception::PaidLate));
    let lower = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed";
    let checksummed = paywatch_evm::checksummed(&paywatch_evm::parse_address(lower).unwrap());
    assert_ne!(checksummed, lower);
    require_refund(&w, i.id, "r1", &checksummed).await;
    // As an instance of the previous release recorded it.
    w.h.store
        .execute_raw(&format!(
            "UPDATE refunds SET destination = '{checksummed}', network = NULL, state = NULL \
             WHERE intent_id = {}",
            i.id
        ))
        .await
        .unwrap();
    let txid = w.h.pay(lower, Asset::Eth, i.amount_due);
    let (st, v) = refund_sent(&w, i.id, "r2", &txid).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await,
        (Some("refunded".into()), None)
    );
    assert_eq!(
        w.h.count(&format!(
            "SELECT COUNT(*) FROM refunds WHERE intent_id = {} AND destination = '{lower}' \
             AND network = 'ethereum'",
            i.id
        ))
        .await,
        1,
        "written back as the watcher spells it"
    );
    w.assert_money_rules_hold().await;
}

/// Each refund is judged alone, so one transaction recorded for two
/// refunds would read both refunded while paying one: refused, naming the
/// other intent.
async fn one_transaction_is_never_recorded_for_two_refunds(b: Backend) {
    let mut w = World::new(b).await;
    let first = w.paid_late("order", "first-refund").await;
    let second = w.paid_late("order", "second-refund").await;
    let due = w.h.intent(first).await.amount_due;
    require_refund(&w, first, "r1", LTC_REFUND).await;
    require_refund(&w, second, "r2", LTC_REFUND).await;
    let txid = w.h.pay(LTC_REFUND, Asset::Ltc, due);
    let (st, v) = refund_sent(&w, first, "r3", &txid).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = refund_sent(&w, second, "r4", &txid).await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    assert!(
        v.to_string().contains(&format!("refund of intent {first}")),
        "{v}"
    );
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, first).await.0.as_deref(),
        Some("refunded")
    );
    assert_eq!(
        refund_state(&w.h, second).await.0.as_deref(),
        Some("required")
    );
    w.assert_money_rules_hold().await;
}

/// USDC and ETH sent to a USDT intent are owed back in two assets, which
/// no one Ethereum transaction can carry: support records one transaction
/// per asset, and the refund is judged on both together. Before, the second
/// replaced the first, and the refund read a mismatch whichever came last.
async fn a_refund_owed_in_two_assets_is_paid_by_two_transactions(b: Backend) {
    let mut w = World::with_harness(Harness::new(b, Network::Ethereum, 1).await).await;
    let i = w.h.create("order", "two-assets", "USDT", "100").await;
    let usdc = Amount(7_000_000);
    let eth = Amount(3_000_000_000_000_000);
    w.h.pay(&i.address, Asset::Usdc, usdc);
    w.h.pay(&i.address, Asset::Eth, eth);
    w.h.mine(2);
    w.h.sync().await;
    let r = w.h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception),
        (Status::NeedsReview, Some(Exception::WrongAsset)),
        "{:?}",
        r.reason
    );
    let destination = "0x52908400098527886e0f7030069857d2e4169ee7";
    require_refund(&w, i.id, "r1", destination).await;

    let usdc_back = w.h.pay(destination, Asset::Usdc, usdc);
    let (st, v) = refund_sent(&w, i.id, "r2", &usdc_back).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(2);
    w.h.sync().await;
    let (state, why) = refund_state(&w.h, i.id).await;
    assert_eq!(state.as_deref(), Some("mismatch"));
    let why = why.expect("the mismatch says why");
    assert!(why.contains("ETH is owed"), "{why}");

    let eth_back = w.h.pay(destination, Asset::Eth, eth);
    let (st, v) = refund_sent(&w, i.id, "r3", &eth_back).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    w.h.mine(2);
    w.h.sync().await;
    assert_eq!(
        refund_state(&w.h, i.id).await,
        (Some("refunded".into()), None)
    );
    let r = w.h.intent(i.id).await;
    assert_eq!(r.status, Status::Resolved, "{:?}", r.reason);
    assert_eq!(refund_events(&w.h, i.id).await, ["mismatch", "refunded"]);
    let case = w.case(i.id).await;
    assert_eq!(
        case["refund"]["txids"],
        json!([usdc_back, eth_back]),
        "{}",
        case["refund"]
    );
    assert_eq!(case["refund"]["txid"], json!(eth_back));
    w.assert_money_rules_hold().await;
}

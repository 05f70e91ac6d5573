//! Overpayments (issue 20, found 8): the order or top-up is paid for its
//! price, and an excess beyond the tolerance is the payer's money, so it
//! goes to support, who refunds it, credits its worth to the account's
//! balance, or dismisses it. Each is decided once, and a credited excess
//! follows its payment through a reorg.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, SUPPORT};
use common::{Backend, Harness};
use paywatch::reconcile::{Exception, Status};
use paywatch::store::IntentRecord;
use paywatch_core::{Amount, Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

on_both_databases!(
    an_overpaid_top_up_credits_its_price_and_its_excess_waits_for_support,
    support_credits_an_excess_once_at_the_locked_rate,
    a_refund_of_the_excess_claims_no_payment_and_keeps_the_order_paid,
    a_reorg_takes_back_a_credited_excess_with_its_payment_and_gives_it_back_with_it,
    an_accepted_excess_is_taken_back_when_only_the_payment_carrying_it_leaves_the_chain
);

/// A top-up of 100 USD paid half as much again, final.
async fn overpaid_top_up(h: &mut Harness, reference: &str) -> IntentRecord {
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let i = h.create("topup", reference, "BTC", "100").await;
    h.pay(
        &i.address,
        Asset::Btc,
        Amount(i.amount_due.0 + i.amount_due.0 / 2),
    );
    h.mine(3);
    h.sync().await;
    i
}

async fn act(api: &ApiClient, id: i64, key: &str, body: Value) -> (StatusCode, Value) {
    api.call(
        Method::POST,
        &format!("/v1/cases/{id}/actions"),
        Some(SUPPORT),
        Some(key),
        Some(body.to_string()),
    )
    .await
}

async fn intent_row(h: &Harness, id: i64) -> common::Row {
    h.row(&format!(
        "SELECT status, outcome, refund_status, paid_at FROM paywatch_intents \
         WHERE intent_id = {id}"
    ))
    .await
}

async fn order_status(h: &Harness, kind: &str, reference: &str) -> common::Row {
    h.row(&format!(
        "SELECT payment_status, CAST(paid AS BIGINT) AS paid, latest_exception, latest_outcome \
         FROM paywatch_payment_status WHERE kind = '{kind}' AND reference = '{reference}'"
    ))
    .await
}

async fn ledger_kinds(h: &Harness, account: &str) -> Vec<(String, i64)> {
    h.rows(&format!(
        "SELECT entry_kind, usd_cents FROM paywatch_ledger WHERE account = '{account}' \
         ORDER BY entry_id"
    ))
    .await
    .iter()
    .map(|r| (r.get("entry_kind").unwrap().to_owned(), r.int("usd_cents")))
    .collect()
}

async fn an_overpaid_top_up_credits_its_price_and_its_excess_waits_for_support(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    let i = overpaid_top_up(&mut h, "over-1").await;

    let now = h.intent(i.id).await;
    assert_eq!(
        (now.status, now.exception),
        (Status::NeedsReview, Some(Exception::Overpaid)),
        "an excess beyond the tolerance is for a person"
    );
    assert_eq!(now.amount_excess, Amount(i.amount_due.0 / 2));
    assert!(now.paid_at_ms.is_some(), "paid for its price meanwhile");
    assert_eq!(
        h.balance("acct-1").await,
        10_000,
        "the price, not the money"
    );
    let status = order_status(&h, "topup", "over-1").await;
    assert_eq!(status.get("payment_status"), Some("paid"));
    assert_eq!(status.int("paid"), 1);
    assert_eq!(status.get("latest_exception"), Some("overpaid"));

    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (st, queue) = api
        .call(Method::GET, "/v1/review-queue", Some(OPERATOR), None, None)
        .await;
    assert_eq!(st, StatusCode::OK, "{queue}");
    let item = &queue["items"][0];
    assert_eq!(item["intent"]["id"], json!(i.id), "{queue}");
    assert_eq!(item["exception"], "overpaid");

    // More passes change nothing and credit nothing again.
    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 10_000);
    assert_eq!(h.intent(i.id).await.status, Status::NeedsReview);
}

async fn support_credits_an_excess_once_at_the_locked_rate(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    let i = overpaid_top_up(&mut h, "over-2").await;
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;

    let accept = json!({"action": "accept", "note": "credit the rest", "actor": "ana"});
    let (st, v) = act(&api, i.id, "excess-1", accept.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        h.balance("acct-1").await,
        15_000,
        "the price, and the excess at the rate the intent locked"
    );
    assert_eq!(
        ledger_kinds(&h, "acct-1").await,
        [
            ("topup_credit".to_owned(), 10_000),
            ("adjustment".to_owned(), 5_000)
        ]
    );
    let now = h.intent(i.id).await;
    assert_eq!(now.status, Status::Resolved);
    let view = intent_row(&h, i.id).await;
    assert_eq!(view.get("outcome"), Some("paid_by_support"));
    assert_eq!(
        order_status(&h, "topup", "over-2").await.int("paid"),
        1,
        "still paid once"
    );
    let events = h.store.events_after(0, 200).await.unwrap();
    assert!(
        events.iter().any(|e| e.topic == "ledger"
            && e.payload.contains("\"entry_kind\":\"adjustment\"")
            && e.payload.contains("\"usd_cents\":5000")),
        "the storefront's feed has the credit"
    );

    // A replay does nothing again; another accept, or a refund, is refused.
    let (st, _) = act(&api, i.id, "excess-1", accept).await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = act(
        &api,
        i.id,
        "excess-2",
        json!({"action": "accept", "note": "again", "actor": "bo"}),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let (st, v) = act(
        &api,
        i.id,
        "excess-3",
        json!({"action": "refund_required", "note": "refund too", "actor": "bo",
               "destination": "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"}),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 15_000, "credited once");
    assert_no_broken_rule(&h).await;

    // A second credit of the excess, as a double-crediting bug would post
    // it under another key: `paywatch check` names it.
    h.store
        .execute_raw(&format!(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, \
             created_at) VALUES ('acct-1', 5000, 'adjustment', 'bug:{0}', {0}, 0)",
            i.id
        ))
        .await
        .unwrap();
    let check = h.store.check_invariants().await.unwrap();
    let named: Vec<(&str, &str)> = check
        .violations
        .iter()
        .map(|v| (v.rule, v.detail.as_str()))
        .collect();
    let expected = format!(
        "intent {}: excess credits less their taking back come to 10000 cents of 5000, settled",
        i.id
    );
    assert_eq!(
        named,
        [(
            "an overpayment's excess credited at most once net, and only while its money stands",
            expected.as_str()
        )]
    );
}

async fn assert_no_broken_rule(h: &Harness) {
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

async fn a_refund_of_the_excess_claims_no_payment_and_keeps_the_order_paid(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let i = h.create("order", "gpu-over", "BTC", "100").await;
    let excess = i.amount_due.0 / 4;
    h.pay(&i.address, Asset::Btc, Amount(i.amount_due.0 + excess));
    h.mine(3);
    h.sync().await;
    assert_eq!(h.intent(i.id).await.exception, Some(Exception::Overpaid));

    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let destination = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";
    let (st, v) = act(
        &api,
        i.id,
        "refund-excess",
        json!({"action": "refund_required", "note": "send back the rest", "actor": "ana",
               "destination": destination}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let decision = h
        .row(&format!(
            "SELECT CAST(amount AS TEXT) AS amount, (SELECT CAST(COUNT(*) AS BIGINT) FROM decision_payments p \
             WHERE p.decision_id = d.id) AS payments FROM decisions d WHERE intent_id = {}",
            i.id
        ))
        .await;
    assert_eq!(
        decision.get("amount"),
        Some(excess.to_string().as_str()),
        "the refund is of the excess"
    );
    assert_eq!(decision.int("payments"), 0, "the payment settled the order");
    let view = intent_row(&h, i.id).await;
    assert_eq!(view.get("outcome"), Some("refund_required"));
    assert_eq!(view.get("refund_status"), Some("required"));
    assert!(view.get("paid_at").is_some(), "{view:?}");
    let status = order_status(&h, "order", "gpu-over").await;
    assert_eq!(status.int("paid"), 1);
    assert_eq!(status.get("latest_outcome"), Some("refund_required"));
    assert_eq!(h.balance("acct-1").await, 0, "an order credits nothing");
}

async fn a_reorg_takes_back_a_credited_excess_with_its_payment_and_gives_it_back_with_it(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    let i = overpaid_top_up(&mut h, "over-4").await;
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (st, v) = act(
        &api,
        i.id,
        "excess-4",
        json!({"action": "accept", "note": "credit the rest", "actor": "ana"}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(h.balance("acct-1").await, 15_000);

    // A reorg past finality drops the payment: nothing of it stands.
    let dropped = h.chain.reorg(3);
    h.mine(3);
    h.sync().await;
    let now = h.intent(i.id).await;
    assert_eq!(now.exception, Some(Exception::Reversed));
    assert_eq!(h.balance("acct-1").await, 0, "price and excess taken back");
    assert_no_broken_rule(&h).await;

    // Its sender broadcasts it again; mined and final: both come back, once.
    h.chain.rebroadcast(dropped);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 15_000);
    let kinds = ledger_kinds(&h, "acct-1").await;
    assert_eq!(
        kinds,
        [
            ("topup_credit".to_owned(), 10_000),
            ("adjustment".to_owned(), 5_000),
            ("reversal".to_owned(), -10_000),
            ("adjustment".to_owned(), -5_000),
            ("topup_credit".to_owned(), 10_000),
            ("adjustment".to_owned(), 5_000),
        ]
    );
    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 15_000);
    assert_no_broken_rule(&h).await;
}

/// Issue 36, found 6: an accepted excess stayed credited when only the
/// payment carrying it vanished, the one that paid the price still on the
/// chain. The top-up stays paid; the excess's credit is taken back and a
/// person told; when the payment comes back, so does the credit, once.
async fn an_accepted_excess_is_taken_back_when_only_the_payment_carrying_it_leaves_the_chain(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let i = h.create("topup", "over-5", "BTC", "100").await;
    h.pay(&i.address, Asset::Btc, i.amount_due);
    h.mine(1);
    h.pay(&i.address, Asset::Btc, Amount(i.amount_due.0 / 2));
    h.mine(3);
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(r.exception, Some(Exception::Overpaid), "{:?}", r.reason);
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (st, v) = act(
        &api,
        i.id,
        "excess-5",
        json!({"action": "accept", "note": "credit the rest", "actor": "ana"}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(h.balance("acct-1").await, 15_000);

    // A reorg past finality takes the block of the second payment only.
    let dropped = h.chain.reorg(3);
    h.mine(3);
    h.sync().await;
    let r = h.intent(i.id).await;
    assert_eq!(
        (r.status, r.exception, r.reason_code.as_deref()),
        (
            Status::NeedsReview,
            Some(Exception::Reversed),
            Some("excess_reversed_by_reorg")
        ),
        "{:?}",
        r.reason
    );
    assert_eq!(
        h.balance("acct-1").await,
        10_000,
        "the price stays, the excess goes"
    );
    assert_no_broken_rule(&h).await;

    h.chain.rebroadcast(dropped);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 15_000);
    assert_eq!(h.intent(i.id).await.status, Status::Resolved);
    assert_eq!(
        ledger_kinds(&h, "acct-1").await,
        [
            ("topup_credit".to_owned(), 10_000),
            ("adjustment".to_owned(), 5_000),
            ("adjustment".to_owned(), -5_000),
            ("adjustment".to_owned(), 5_000),
        ]
    );
    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 15_000, "credited back once");
    assert_no_broken_rule(&h).await;
}

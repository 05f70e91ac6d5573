//! States a checkout page can show (issue 20, found 2): how many
//! confirmations are needed beside how many there are, a reversed intent
//! that never reads as paid, a stable customer-safe reason code, and a
//! refund with its status, each in the storefront's views and its API.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, STOREFRONT, SUPPORT};
use common::{Backend, Harness};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Amount, Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

on_both_databases!(
    a_page_can_show_two_of_six_confirmations,
    a_reversed_intent_never_reads_as_paid,
    a_refund_reaches_the_storefront_with_its_status_and_without_support_s_note
);

async fn get_intent(api: &ApiClient, id: i64) -> Value {
    let (st, v) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{id}"),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

async fn a_page_can_show_two_of_six_confirmations(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 6).await;
    h.import_pool(1).await;
    h.mine(10);
    h.sync().await;
    let intent = h.create("order", "six", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(2);
    h.sync().await;
    let r = h
        .row(&format!(
            "SELECT CAST(confirmations AS BIGINT) AS confirmations, \
             CAST(confirmations_required AS BIGINT) AS confirmations_required, \
             CAST(is_final AS BIGINT) AS is_final FROM paywatch_intent_transfers \
             WHERE intent_id = {}",
            intent.id
        ))
        .await;
    assert_eq!(
        (
            r.int("confirmations"),
            r.int("confirmations_required"),
            r.int("is_final")
        ),
        (2, 6, 0)
    );
    h.mine(4);
    h.sync().await;
    let r = h
        .row(&format!(
            "SELECT CAST(confirmations AS BIGINT) AS confirmations, \
             CAST(confirmations_required AS BIGINT) AS confirmations_required, \
             CAST(is_final AS BIGINT) AS is_final, reason_code FROM paywatch_intent_transfers t \
             JOIN paywatch_intents i USING (intent_id) WHERE intent_id = {}",
            intent.id
        ))
        .await;
    assert_eq!(
        (
            r.int("confirmations"),
            r.int("confirmations_required"),
            r.int("is_final")
        ),
        (6, 6, 1),
        "final exactly when the count reaches what is required"
    );
    assert_eq!(r.get("reason_code"), Some("paid"));
}

async fn a_reversed_intent_never_reads_as_paid(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 2).await;
    h.import_pool(1).await;
    h.mine(3);
    h.sync().await;
    let intent = h.create("order", "reversed", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let paid = get_intent(&api, intent.id).await;
    assert!(paid["paid_at_ms"].is_i64(), "{paid}");
    assert_eq!(paid["reason_code"], "paid");

    h.chain.reorg(3);
    h.mine(3);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.exception, Some(Exception::Reversed));
    let view = h
        .row(&format!(
            "SELECT paid_at, reversed_at, reason_code FROM paywatch_intents WHERE intent_id = {}",
            intent.id
        ))
        .await;
    assert_eq!(view.get("paid_at"), None, "the view: {view:?}");
    assert!(view.get("reversed_at").is_some());
    assert_eq!(view.get("reason_code"), Some("reversed_by_reorg"));
    let shown = get_intent(&api, intent.id).await;
    assert_eq!(shown["paid_at_ms"], Value::Null, "the API: {shown}");
    assert_eq!(shown["reason_code"], "reversed_by_reorg");
    assert_eq!(shown["received_in_full"], false);
    assert_eq!(
        h.payment_status("order", "reversed")
            .await
            .get("payment_status"),
        Some("reversed")
    );
}

async fn a_refund_reaches_the_storefront_with_its_status_and_without_support_s_note(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    h.import_pool(1).await;
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let i = h.create("order", "refunded", "LTC", "100").await;
    h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 / 2));
    h.mine(1);
    h.pass_expiry(&i);
    h.sync().await;
    assert_eq!(h.intent(i.id).await.exception, Some(Exception::Underpaid));
    let shown = get_intent(&api, i.id).await;
    assert_eq!(shown["reason_code"], "underpaid");
    assert_eq!(
        shown["amount_outstanding"],
        (i.amount_due.0 / 2).to_string()
    );
    assert_eq!(shown["refund"], Value::Null);

    let note = "VIP customer, internal: waive the fee";
    let destination = "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s";
    let act = |key: &'static str, body: Value| {
        let api = &api;
        async move {
            api.call(
                Method::POST,
                &format!("/v1/cases/{}/actions", i.id),
                Some(SUPPORT),
                Some(key),
                Some(body.to_string()),
            )
            .await
        }
    };
    let (st, v) = act(
        "refund-1",
        json!({"action": "refund_required", "note": note, "actor": "bo", "destination": destination}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let view = h
        .row(&format!(
            "SELECT outcome, reason, reason_code, refund_status, refund_destination, refund_txid \
             FROM paywatch_intents WHERE intent_id = {}",
            i.id
        ))
        .await;
    assert_eq!(view.get("outcome"), Some("refund_required"));
    assert_eq!(view.get("reason_code"), Some("resolved_by_support"));
    assert_eq!(view.get("refund_status"), Some("required"));
    assert_eq!(view.get("refund_destination"), Some(destination));
    assert_eq!(view.get("refund_txid"), None);
    assert!(
        !view.get("reason").unwrap_or_default().contains("VIP"),
        "support's note stays with operators: {view:?}"
    );
    let shown = get_intent(&api, i.id).await;
    assert_eq!(shown["refund"]["status"], "required");
    assert_eq!(shown["refund"]["destination"], destination);

    let txid = "ab12cd".repeat(16)[..64].to_owned();
    let (st, v) = act(
        "refund-2",
        json!({"action": "refund_sent", "note": "sent", "actor": "bo", "txid": txid}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let view = h
        .row(&format!(
            "SELECT outcome, refund_status, refund_txid, refund_sent_at FROM paywatch_intents \
             WHERE intent_id = {}",
            i.id
        ))
        .await;
    assert_eq!(view.get("outcome"), Some("refunded"));
    assert_eq!(view.get("refund_status"), Some("sent"));
    assert_eq!(view.get("refund_txid"), Some(txid.as_str()));
    assert!(view.get("refund_sent_at").is_some());
    let shown = get_intent(&api, i.id).await;
    assert_eq!(shown["refund"]["status"], "sent");
    assert_eq!(shown["refund"]["txid"], txid);
    assert_eq!(shown["outcome"], "refunded");

    // The feed told the storefront each step, and never the note.
    let events = h.store.events_after(0, 100).await.unwrap();
    let decisions: Vec<Value> = events
        .iter()
        .filter(|e| e.topic == "decision")
        .map(|e| serde_json::from_str(&e.payload).unwrap())
        .collect();
    let actions: Vec<&str> = decisions
        .iter()
        .map(|d| d["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["refund_required", "refund_sent"]);
    assert!(
        events.iter().all(|e| !e.payload.contains("VIP")),
        "no event carries support's note"
    );
}

//! Support and operator flows over the HTTP API, end to end on both
//! databases: a late payment accepted, a refund, a reassign and a dismiss,
//! each written to the audit log once however often it is replayed, and the
//! review queue and watcher health operators read.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, STOREFRONT, SUPPORT};
use common::{Backend, Harness};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Amount, Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

struct World {
    h: Harness,
    client: ApiClient,
}

impl World {
    async fn new(b: Backend) -> World {
        let mut h = Harness::new(b, Network::Litecoin, 1).await;
        h.import_pool(6).await;
        let ctx = context_with_role_tokens(&h);
        let client = ApiClient::serve(ctx).await;
        let _ = &mut h;
        World { h, client }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| b.to_string());
        self.client.call(method, path, Some(token), key, body).await
    }

    async fn act(&self, id: i64, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            &format!("/v1/cases/{id}/actions"),
            SUPPORT,
            Some(key),
            Some(body),
        )
        .await
    }

    async fn count(&self, sql: &str) -> i64 {
        self.h.count(sql).await
    }

    /// An intent paid in full only after it expired: needs review, late.
    async fn paid_late(&mut self, kind: &str, reference: &str) -> i64 {
        let i = self.h.create(kind, reference, "LTC", "100").await;
        self.h.pass_expiry(&i);
        self.h.sync().await;
        self.h.pay(&i.address, Asset::Ltc, i.amount_due);
        self.h.mine(1);
        self.h.sync().await;
        let r = self.h.intent(i.id).await;
        assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
        assert_eq!(r.exception, Some(Exception::PaidLate));
        i.id
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

on_both_databases!(
    accepting_a_late_topup_credits_it_once_however_often_it_is_replayed,
    a_refund_is_required_then_sent_and_each_step_is_audited,
    a_transfer_reassigned_to_the_intent_it_was_meant_for_settles_that_one,
    a_dismissed_case_settles_nothing_and_search_finds_cases,
);

async fn accepting_a_late_topup_credits_it_once_however_often_it_is_replayed(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("topup", "late-topup").await;

    let (st, queue) = w
        .call(Method::GET, "/v1/review-queue", OPERATOR, None, None)
        .await;
    assert_eq!(st, StatusCode::OK, "{queue}");
    let item = &queue["items"][0];
    assert_eq!(item["intent"]["id"], json!(id));
    assert_eq!(item["exception"], json!("paid_late"));
    assert!(
        item["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{item}"
    );
    assert!(item["age_ms"].as_i64().unwrap() > 0);
    assert_eq!(item["transfers"].as_array().unwrap().len(), 1, "{item}");

    // Refused: the storefront may not resolve, and a note is required.
    let accept =
        json!({"action": "accept", "note": "paid 2 minutes late; customer asked", "actor": "ana"});
    let (st, v) = w
        .call(
            Method::POST,
            &format!("/v1/cases/{id}/actions"),
            STOREFRONT,
            Some("a1"),
            Some(accept.clone()),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::FORBIDDEN, "forbidden"));
    let (st, v) = w
        .act(
            id,
            "a1",
            json!({"action": "accept", "note": " ", "actor": "ana"}),
        )
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{v}"
    );
    let (st, v) = w
        .act(id, "a1", json!({"action": "accept", "actor": "ana"}))
        .await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("note"),
        "{st} {v}"
    );
    assert_eq!(w.count("SELECT COUNT(*) FROM audit_log").await, 0);

    let (st, case) = w.act(id, "a1", accept.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["intent"]["status"], json!("resolved"));
    assert_eq!(w.h.balance("acct-1").await, 10_000, "credited 100 USD");
    let audit = case["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["actor"], json!("ana"));
    assert_eq!(audit[0]["role"], json!("support"));
    assert_eq!(audit[0]["action"], json!("accept"));

    // Replayed: nothing twice. Another key to accept again is refused.
    let (st, again) = w.act(id, "a1", accept.clone()).await;
    assert_eq!(st, StatusCode::OK, "{again}");
    assert_eq!(again["audit_id"], case["audit_id"]);
    let (st, v) = w.act(id, "a2", accept).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already paid"),
        "{v}"
    );
    // The reconciler leaves support's verdict and credits nothing more.
    w.h.mine(2);
    w.h.sync().await;
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.count("SELECT COUNT(*) FROM audit_log").await, 1);
    assert_eq!(w.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        w.count("SELECT COUNT(*) FROM intent_events WHERE kind = 'support_accept'")
            .await,
        1
    );
    let (_, queue) = w
        .call(Method::GET, "/v1/review-queue", SUPPORT, None, None)
        .await;
    assert_eq!(
        queue["items"].as_array().unwrap().len(),
        0,
        "it left the queue"
    );
    // The audit log cannot be rewritten.
    assert!(w
        .h
        .store
        .execute_raw("UPDATE audit_log SET note = 'nothing happened'")
        .await
        .is_err());
}

async fn a_refund_is_required_then_sent_and_each_step_is_audited(b: Backend) {
    let mut w = World::new(b).await;
    let i = w.h.create("order", "under", "LTC", "100").await;
    w.h.pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 / 2));
    w.h.mine(1);
    w.h.pass_expiry(&i);
    w.h.sync().await;
    assert_eq!(w.h.intent(i.id).await.exception, Some(Exception::Underpaid));

    let (st, v) = w
        .act(
            i.id,
            "r0",
            json!({"action": "refund_sent", "note": "sent", "actor": "bo", "txid": "ab12".repeat(16)}),
        )
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "conflict"),
        "no refund is owed yet: {v}"
    );
    let (st, v) = w
        .act(
            i.id,
            "r1",
            json!({"action": "refund_required", "note": "customer cancelled", "actor": "bo"}),
        )
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("destination"),
        "{st} {v}"
    );
    let (st, case) = w
        .act(
            i.id,
            "r1",
            json!({"action": "refund_required", "note": "customer cancelled", "actor": "bo",
                   "destination": "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["intent"]["status"], json!("resolved"));
    assert_eq!(
        case["refund"]["destination"],
        json!("ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s")
    );
    assert_eq!(case["refund"]["txid"], Value::Null);
    let (st, case) = w
        .act(i.id, "r2", json!({"action": "refund_sent", "note": "sent from hot wallet", "actor": "bo", "txid": "ab12cd".repeat(16)[..64]}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["refund"]["txid"], json!("ab12cd".repeat(16)[..64]));
    // A second transaction while the first is unconfirmed is added to it
    // (money owed in two assets, a first one short), never a replacement.
    let (st, case) = w
        .act(
            i.id,
            "r3",
            json!({"action": "refund_sent", "note": "the rest", "actor": "bo", "txid": "ff".repeat(32)}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(
        case["refund"]["txids"],
        json!(["ab12cd".repeat(16)[..64], "ff".repeat(32)])
    );
    assert_eq!(case["refund"]["txid"], json!("ff".repeat(32)));
    let (_, case) = w
        .call(
            Method::GET,
            &format!("/v1/cases/{}", i.id),
            SUPPORT,
            None,
            None,
        )
        .await;
    let actions: Vec<&str> = case["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["refund_required", "refund_sent", "refund_sent"]);
    assert_eq!(case["transfers"].as_array().unwrap().len(), 1);
    assert_eq!(case["rate_lock"]["usd_per_coin"], json!(i.rate_usd));
    assert_eq!(
        w.count("SELECT COUNT(*) FROM settlements").await,
        0,
        "a refund settles nothing"
    );
}

async fn a_transfer_reassigned_to_the_intent_it_was_meant_for_settles_that_one(b: Backend) {
    let mut w = World::new(b).await;
    // The customer paid an old, expired intent's address for a new order of
    // the same amount.
    let old = w.h.create("order", "old-order", "LTC", "100").await;
    w.h.pass_expiry(&old);
    w.h.sync().await;
    let meant = w.h.create("order", "new-order", "LTC", "100").await;
    assert_eq!(meant.amount_due, old.amount_due);
    w.h.pay(&old.address, Asset::Ltc, old.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(
        w.h.intent(old.id).await.exception,
        Some(Exception::PaidLate)
    );

    let (_, queue) = w
        .call(Method::GET, "/v1/review-queue", OPERATOR, None, None)
        .await;
    let candidates = &queue["items"][0]["transfers"][0]["candidate_intents"];
    assert_eq!(candidates, &json!([meant.id]), "{queue}");

    let body = json!({"action": "reassign", "note": "paid the old address for the new order",
                      "actor": "cy", "to_intent": meant.id.to_string()});
    let (st, case) = w.act(old.id, "re1", body.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    let m = w.h.intent(meant.id).await;
    assert_eq!(m.status, Status::Resolved, "{:?}", m.reason);
    assert!(m
        .reason
        .unwrap_or_default()
        .contains(&format!("intent {}", old.id)));
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM settlements WHERE reference = 'new-order' AND intent_id = {}",
            meant.id
        ))
        .await,
        1,
        "the order it was meant for is paid"
    );
    assert_eq!(w.h.intent(old.id).await.status, Status::Resolved);
    let (st, _) = w.act(old.id, "re1", body).await;
    assert_eq!(st, StatusCode::OK, "replayed");
    assert_eq!(w.count("SELECT COUNT(*) FROM settlements").await, 1);
    let (st, v) = w
        .act(
            old.id,
            "re1",
            json!({"action": "dismiss", "note": "x", "actor": "cy"}),
        )
        .await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "conflict"),
        "one key, one action: {v}"
    );
}

async fn a_dismissed_case_settles_nothing_and_search_finds_cases(b: Backend) {
    let mut w = World::new(b).await;
    let id = w.paid_late("order", "dismiss-me").await;
    let address = w.h.intent(id).await.address;
    let txid: String = {
        let (_, case) = w
            .call(
                Method::GET,
                &format!("/v1/cases/{id}"),
                OPERATOR,
                None,
                None,
            )
            .await;
        case["transfers"][0]["txid"].as_str().unwrap().to_owned()
    };
    for query in [
        "reference=dismiss-me".to_owned(),
        "account=acct-1".to_owned(),
        format!("address={address}"),
        format!("txid={txid}"),
    ] {
        let (st, found) = w
            .call(
                Method::GET,
                &format!("/v1/cases?{query}"),
                SUPPORT,
                None,
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{found}");
        let ids: Vec<i64> = found["intents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, [id], "{query}");
    }
    let (st, v) = w.call(Method::GET, "/v1/cases", SUPPORT, None, None).await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));

    let (st, case) = w
        .act(
            id,
            "d1",
            json!({"action": "dismiss", "note": "test payment by our own staff", "actor": "dee"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["intent"]["status"], json!("resolved"));
    assert!(case["intent"]["reason"]
        .as_str()
        .unwrap()
        .contains("dismissed"));
    assert_eq!(w.count("SELECT COUNT(*) FROM settlements").await, 0);
    let (st, v) = w
        .act(
            id,
            "d2",
            json!({"action": "launder", "note": "n", "actor": "dee"}),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));

    let (st, health) = w
        .call(Method::GET, "/v1/watchers", OPERATOR, None, None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(health["watchers"][0]["network"], json!("litecoin"));
    assert_eq!(health["watchers"][0]["gaps"], json!([]));
    w.h.store
        .execute_raw(
            "INSERT INTO chain_gaps (network, from_height, to_height, accepted_at, accepted_by, \
             reason) VALUES ('litecoin', 7, 9, 1000, 'ops-alice', 'pruned past it')",
        )
        .await
        .unwrap();
    let (_, health) = w
        .call(Method::GET, "/v1/watchers", SUPPORT, None, None)
        .await;
    assert_eq!(
        health["watchers"][0]["gaps"],
        json!([{"from_height": "7", "to_height": "9", "accepted_at_ms": 1000,
            "accepted_by": "ops-alice", "reason": "pruned past it"}]),
        "support sees the heights never read, to answer who paid in them"
    );
    let (st, _) = w
        .call(Method::GET, "/v1/watchers", STOREFRONT, None, None)
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
}

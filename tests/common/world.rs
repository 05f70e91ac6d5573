//! A scenario world for the money path's tests: a harness on a scripted
//! Litecoin chain (or another network), with the API served over it so
//! support acts and the storefront calls as they would.

use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::api::{context_with_role_tokens, ApiClient, STOREFRONT, SUPPORT};
use super::{Backend, Harness};

pub struct World {
    pub h: Harness,
    pub client: ApiClient,
}

impl World {
    pub async fn new(b: Backend) -> World {
        World::with_harness(Harness::new(b, Network::Litecoin, 1).await).await
    }

    pub async fn with_harness(mut h: Harness) -> World {
        h.import_pool(8).await;
        let client = ApiClient::serve(context_with_role_tokens(&h)).await;
        World { h, client }
    }

    pub async fn act(&self, id: i64, key: &str, body: Value) -> (StatusCode, Value) {
        self.client
            .call(
                Method::POST,
                &format!("/v1/cases/{id}/actions"),
                Some(SUPPORT),
                Some(key),
                Some(body.to_string()),
            )
            .await
    }

    /// The case of intent `id`, as support reads it.
    pub async fn case(&self, id: i64) -> Value {
        let (st, case) = self
            .client
            .call(
                Method::GET,
                &format!("/v1/cases/{id}"),
                Some(SUPPORT),
                None,
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{case}");
        case
    }

    pub async fn accept(&self, id: i64, key: &str) -> (StatusCode, Value) {
        self.act(
            id,
            key,
            json!({"action": "accept", "note": "customer asked", "actor": "ana"}),
        )
        .await
    }

    /// The storefront's "I have paid", as a customer presses it.
    pub async fn declare_paid(&self, id: i64) {
        let (st, v) = self
            .client
            .call(
                Method::POST,
                &format!("/v1/intents/{id}/declared-paid"),
                Some(STOREFRONT),
                None,
                Some(json!({"note": "I have paid"}).to_string()),
            )
            .await;
        assert!(st.is_success(), "{st} {v}");
    }

    /// An intent paid in full only after it expired: needs review, late.
    pub async fn paid_late(&mut self, kind: &str, reference: &str) -> i64 {
        let i = self.h.create(kind, reference, "LTC", "100").await;
        self.h.pass_expiry(&i);
        self.h.sync().await;
        self.h.pay(&i.address, Asset::Ltc, i.amount_due);
        self.h.mine(1);
        self.h.sync().await;
        let r = self.h.intent(i.id).await;
        assert_eq!(
            (r.status, r.exception),
            (Status::NeedsReview, Some(Exception::PaidLate)),
            "{:?}",
            r.reason
        );
        i.id
    }

    pub async fn reversals(&self) -> i64 {
        self.h
            .count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'reversal'")
            .await
    }

    pub async fn outbox(&self) -> i64 {
        self.h
            .count("SELECT COALESCE(MAX(id), 0) FROM outbox")
            .await
    }

    /// Outbox rows about intent `id`.
    pub async fn outbox_of(&self, id: i64) -> i64 {
        self.h
            .count(&format!(
                "SELECT COUNT(*) FROM outbox WHERE intent_id = {id}"
            ))
            .await
    }

    pub async fn assert_money_rules_hold(&self) {
        let check = self.h.store.check_invariants().await.unwrap();
        assert!(check.violations.is_empty(), "{:?}", check.violations);
    }
}

/// The error code of an API answer.
pub fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

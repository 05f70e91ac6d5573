//! Balances a storefront can show (issue 20, found 7): available and
//! pending beside each other, a ledger that names the top-up credited and
//! the order each debit paid, and zeros (not a missing row) for an account
//! with nothing, through the API and the views.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, STOREFRONT};
use common::{Backend, Harness};
use paywatch::reconcile::Status;
use paywatch_core::{Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

on_both_databases!(a_confirming_top_up_is_pending_then_available_and_the_ledger_names_each_entry);

async fn get(api: &ApiClient, path: &str) -> Value {
    let (st, v) = api
        .call(Method::GET, path, Some(STOREFRONT), None, None)
        .await;
    assert_eq!(st, StatusCode::OK, "{path}: {v}");
    v
}

async fn a_confirming_top_up_is_pending_then_available_and_the_ledger_names_each_entry(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(1).await;
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let nothing = get(&api, "/v1/accounts/acct-1/balance").await;
    assert_eq!(
        nothing,
        json!({"account": "acct-1", "available_usd_cents": 0, "available_usd": "0.00",
               "pending_usd_cents": 0, "pending_usd": "0.00", "entries": 0,
               "last_entry_at_ms": null}),
        "an account with nothing has a balance of zero"
    );

    let topup = h.create("topup", "top-1", "BTC", "100").await;
    h.pay(&topup.address, Asset::Btc, topup.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(topup.id).await.status, Status::Confirming);
    let confirming = get(&api, "/v1/accounts/acct-1/balance").await;
    assert_eq!(
        (
            &confirming["available_usd_cents"],
            &confirming["pending_usd_cents"]
        ),
        (&json!(0), &json!(10_000)),
        "{confirming}"
    );

    h.mine(2);
    h.sync().await;
    let credited = get(&api, "/v1/accounts/acct-1/balance").await;
    assert_eq!(
        (
            &credited["available_usd_cents"],
            &credited["pending_usd_cents"],
            &credited["entries"]
        ),
        (&json!(10_000), &json!(0), &json!(1)),
        "{credited}"
    );
    let (st, v) = api
        .call(
            Method::POST,
            "/v1/accounts/acct-1/debits",
            Some(STOREFRONT),
            Some("pay-order-7"),
            Some(json!({"usd_amount": "30", "order": "order-7"}).to_string()),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    let page = get(&api, "/v1/accounts/acct-1/ledger?limit=1").await;
    assert_eq!(page["more"], true);
    let first = &page["entries"][0];
    assert_eq!(
        (
            &first["entry_kind"],
            &first["usd_cents"],
            &first["kind"],
            &first["reference"]
        ),
        (
            &json!("topup_credit"),
            &json!(10_000),
            &json!("topup"),
            &json!("top-1")
        )
    );
    let rest = get(
        &api,
        &format!("/v1/accounts/acct-1/ledger?after={}", page["next_after"]),
    )
    .await;
    assert_eq!(rest["more"], false);
    let debit = &rest["entries"][0];
    assert_eq!(
        (
            &debit["entry_kind"],
            &debit["usd_cents"],
            &debit["kind"],
            &debit["reference"]
        ),
        (
            &json!("debit"),
            &json!(-3_000),
            &json!("order"),
            &json!("order-7")
        ),
        "a debit names the order it paid"
    );

    // The views say the same.
    let row = h
        .row(
            "SELECT available_usd_cents, pending_usd_cents, entries FROM paywatch_balances \
             WHERE account = 'acct-1'",
        )
        .await;
    assert_eq!(
        (
            row.int("available_usd_cents"),
            row.int("pending_usd_cents"),
            row.int("entries")
        ),
        (7_000, 0, 2)
    );
    let refs: Vec<String> = h
        .rows("SELECT reference FROM paywatch_ledger WHERE account = 'acct-1' ORDER BY entry_id")
        .await
        .iter()
        .map(|r| r.get("reference").unwrap().to_owned())
        .collect();
    assert_eq!(refs, ["top-1", "order-7"]);
}

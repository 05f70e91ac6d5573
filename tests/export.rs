//! The accounting export (issue 19): a known set of settlements, on both
//! databases, written as CSV and JSON lines with every field an accountant
//! reconciles on, pages and time bounds respected.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, STOREFRONT, SUPPORT};
use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::export::{write_settlements, Format, COLUMNS};
use paywatch::reconcile::{BalancePayment, DebitOutcome, Status};
use paywatch_core::{Asset, Network};
use reqwest::{Method, StatusCode};

on_both_databases!(
    settlements_export_with_amounts_rates_transactions_and_how_they_settled,
    a_settlement_support_decided_names_the_decision_and_who_took_it,
    a_reversed_settlement_paid_again_is_exported_beside_the_one_that_stands,
);

async fn export(h: &Harness, from: i64, to: i64, format: Format) -> String {
    let mut out = Vec::new();
    write_settlements(&h.store, from, to, format, &mut out)
        .await
        .expect("export");
    String::from_utf8(out).unwrap()
}

async fn settlements_export_with_amounts_rates_transactions_and_how_they_settled(backend: Backend) {
    let mut h = Harness::new(backend, Network::Bitcoin, 2).await;
    h.import_pool(10).await;
    let start = h.clock.now_ms();
    let topup = h.create("topup", "T-1", "BTC", "100").await;
    let order = h.create("order", "A,1 \"big\"", "BTC", "100").await;
    for i in [&topup, &order] {
        h.pay(&i.address, Asset::Btc, i.amount_due);
    }
    h.mine(2);
    h.sync().await;
    assert_eq!(h.intent(order.id).await.status, Status::Paid);
    // An order paid from the balance the top-up credited.
    let paid = h
        .reconciler
        .debit(&BalancePayment {
            account: "acct-1",
            cents: 5_000,
            key: "debit-1",
            memo: None,
            order: Some("B-2"),
        })
        .await
        .unwrap();
    assert!(matches!(paid, DebitOutcome::Posted { .. }), "{paid:?}");
    let end = h.clock.now_ms() + 1;

    let csv = export(&h, start, end, Format::Csv).await;
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], COLUMNS.join(","));
    assert_eq!(lines.len(), 4, "{csv}");
    let txid = h
        .intent_transfers(order.id)
        .await
        .first()
        .and_then(|t| t.get("txid").map(str::to_owned))
        .expect("a transfer");
    let order_line = lines
        .iter()
        .find(|l| l.contains("\"A,1 \"\"big\"\"\""))
        .unwrap_or_else(|| panic!("the order, quoted:\n{csv}"));
    let amount = order.amount_due.0;
    for field in [
        ",order,".to_owned(),
        ",chain,".to_owned(),
        format!(",BTC,bitcoin,{amount},0.002,50000,"),
        ",10000,100.00,".to_owned(),
        format!(",{txid}@"),
        ",false,".to_owned(),
    ] {
        assert!(order_line.contains(&field), "{field} not in {order_line}");
    }
    let balance_line = lines.iter().find(|l| l.contains(",B-2,")).unwrap();
    assert!(
        balance_line.contains(",balance,")
            && balance_line.contains(",5000,50.00,")
            && balance_line.contains(",debit:debit-1,"),
        "{balance_line}"
    );

    // JSON lines: the same rows, one object each, the same names.
    let jsonl = export(&h, start, end, Format::JsonLines).await;
    let objects: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 3);
    let topup_row = objects.iter().find(|o| o["reference"] == "T-1").unwrap();
    assert_eq!(topup_row["kind"], "topup");
    assert_eq!(topup_row["settled_by"], "chain");
    assert_eq!(
        topup_row["amount_base_units"],
        topup.amount_due.0.to_string()
    );
    assert_eq!(topup_row["usd"], "100.00");
    assert!(topup_row["transactions"].as_str().unwrap().contains('@'));

    // The range is half-open, and an empty one is refused.
    assert_eq!(export(&h, end, end + 1, Format::JsonLines).await, "");
    let mut sink = Vec::new();
    assert!(
        write_settlements(&h.store, end, end, Format::Csv, &mut sink)
            .await
            .is_err()
    );

    // Over HTTP, for operators and support: the same bytes, as a download.
    let client = ApiClient::serve(context_with_role_tokens(&h)).await;
    let url = format!(
        "{}/v1/exports/settlements?from={start}&to={end}&format=csv",
        client.base
    );
    let answer = reqwest::Client::new()
        .get(&url)
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        answer.headers()["content-type"].to_str().unwrap(),
        "text/csv; charset=utf-8"
    );
    assert!(answer.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .contains(&format!("settlements-{start}-{end}.csv")));
    assert_eq!(answer.text().await.unwrap(), csv);
    let path = format!("/v1/exports/settlements?from={start}&to={end}");
    let (status, _) = client
        .call(Method::GET, &path, Some(STOREFRONT), None, None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "not the storefront's");
    let (status, body) = client
        .call(
            Method::GET,
            "/v1/exports/settlements?to=5",
            Some(OPERATOR),
            None,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("from"),
        "{body}"
    );
}

/// A top-up paid after it expired, which support accepted: its row says it
/// settled by support, with the decision's id, its action and who took it,
/// so an accountant can trace a credit nobody's chain rule made.
async fn a_settlement_support_decided_names_the_decision_and_who_took_it(backend: Backend) {
    let mut h = Harness::new(backend, Network::Bitcoin, 1).await;
    h.import_pool(2).await;
    let start = h.clock.now_ms();
    let late = h.create("topup", "LATE-1", "BTC", "100").await;
    h.pass_expiry(&late);
    h.sync().await;
    h.pay(&late.address, Asset::Btc, late.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(late.id).await.status, Status::NeedsReview);
    assert_eq!(
        export(&h, start, h.clock.now_ms() + 1, Format::Csv)
            .await
            .lines()
            .count(),
        1
    );

    let client = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (status, body) = client
        .call(
            Method::POST,
            &format!("/v1/cases/{}/actions", late.id),
            Some(SUPPORT),
            Some("accept-late-1"),
            Some(
                serde_json::json!({"action": "accept", "note": "paid an hour late", "actor": "ana"})
                    .to_string(),
            ),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    h.sync().await;
    let end = h.clock.now_ms() + 1;

    let jsonl = export(&h, start, end, Format::JsonLines).await;
    let rows: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{jsonl}");
    let row = &rows[0];
    assert_eq!(row["reference"], "LATE-1");
    assert_eq!(row["settled_by"], "support");
    assert_eq!(row["decision_action"], "accept");
    assert_eq!(row["decision_actor"], "ana");
    let decision: i64 = h
        .count(&format!(
            "SELECT MAX(id) FROM decisions WHERE intent_id = {}",
            late.id
        ))
        .await;
    assert_eq!(
        row["decision_id"].to_string().trim_matches('"'),
        decision.to_string()
    );
    assert_eq!(row["usd"], "100.00");
    assert!(row["transactions"].as_str().unwrap().contains('@'));
    let csv = export(&h, start, end, Format::Csv).await;
    let line = csv.lines().nth(1).expect("one row");
    assert!(
        line.contains(",support,") && line.contains(&format!(",{decision},accept,ana,")),
        "{line}"
    );
}

/// A top-up settled, reversed by a reorg, then paid by a new intent: the
/// ledger holds two credits and a reversal, so the books must show both
/// settlements, the first marked reversed and superseded.
async fn a_reversed_settlement_paid_again_is_exported_beside_the_one_that_stands(backend: Backend) {
    let mut h = Harness::new(backend, Network::Litecoin, 1).await;
    h.import_pool(4).await;
    let start = h.clock.now_ms();
    let first = h.create("topup", "T-9", "LTC", "100").await;
    h.pay(&first.address, Asset::Ltc, first.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(first.id).await.status, Status::Paid);
    h.chain.reorg(1);
    h.mine(2);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 0);
    let again = h.create("topup", "T-9", "LTC", "100").await;
    h.pay(&again.address, Asset::Ltc, again.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(again.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);
    let end = h.clock.now_ms() + 1;

    let jsonl = export(&h, start, end, Format::JsonLines).await;
    let rows: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{jsonl}");
    let (old, new) = (&rows[0], &rows[1]);
    assert_eq!(old["intent_id"], first.id.to_string());
    assert_eq!(old["reversed"], "true");
    assert_ne!(old["reversed_at_ms"], "");
    assert_ne!(old["superseded_at_ms"], "", "{jsonl}");
    assert_eq!(new["intent_id"], again.id.to_string());
    assert_eq!(
        (new["reversed"].as_str(), new["superseded_at_ms"].as_str()),
        (Some("false"), Some(""))
    );
    for r in &rows {
        assert_eq!(
            (r["reference"].as_str(), r["usd_cents"].as_str()),
            (Some("T-9"), Some("10000"))
        );
    }
    // The CSV holds the same two rows, the reversed one first.
    let csv = export(&h, start, end, Format::Csv).await;
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.lines().nth(1).unwrap().contains(",true,"), "{csv}");
}

//! The storefront's event feed (issue 20): every change of an order or
//! top-up is an event, in the order its transaction committed, readable
//! from a cursor by the storefront role (`paywatch_events`) and through the
//! API (`GET /v1/events`), with a NOTIFY hint on PostgreSQL.

#[macro_use]
mod common;

use std::time::Duration;

use common::api::{context_with_role_tokens, ApiClient, STOREFRONT};
use common::private_postgres::PrivatePostgres;
use common::{Backend, Harness, TestDb};
use paywatch::clock::Clock;
use paywatch::store::FeedEvent;
use paywatch_core::{Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

on_both_databases!(
    a_paid_order_reads_as_events_in_commit_order_and_a_reader_resumes_from_its_cursor,
    events_past_the_retention_are_pruned_and_a_reader_behind_them_is_told_where_to_resume,
    without_webhooks_events_past_the_retention_are_pruned
);

fn body(e: &FeedEvent) -> Value {
    serde_json::from_str(&e.payload).expect("an event body is JSON")
}

/// (topic, event name, status if any) of each event.
fn shape(events: &[FeedEvent]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            let b = body(e);
            (
                e.topic.clone(),
                b["event"].as_str().unwrap_or_default().to_owned(),
                b["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    v.iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect()
}

async fn a_paid_order_reads_as_events_in_commit_order_and_a_reader_resumes_from_its_cursor(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(2).await;
    let intent = h.create("order", "feed-1", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let seen = h.store.events_after(0, 100).await.unwrap();
    assert_eq!(
        shape(&seen),
        owned(&[("intent.status", "intent.status", "confirming")])
    );
    let cursor = seen[0].cursor;

    h.mine(2);
    h.sync().await;
    let rest = h.store.events_after(cursor, 100).await.unwrap();
    assert_eq!(
        shape(&rest),
        owned(&[
            ("intent.status", "intent.status", "paid"),
            ("settlement", "settlement.settled", ""),
        ]),
        "resuming from the last cursor gives what came after it, once"
    );
    // The status event is a snapshot a receiver needs nothing else for.
    let paid = body(&rest[0]);
    assert_eq!(
        (
            &paid["amount_due"],
            &paid["amount_final"],
            &paid["amount_outstanding"],
            &paid["reason_code"],
            &paid["asset"],
            &paid["network"],
        ),
        (
            &json!("200000"),
            &json!("200000"),
            &json!("0"),
            &json!("paid"),
            &json!("BTC"),
            &json!("bitcoin"),
        ),
        "{paid}"
    );
    assert!(paid["paid_at_ms"].is_i64(), "{paid}");
    let confirming = body(&seen[0]);
    assert_eq!(confirming["amount_pending"], "200000", "{confirming}");
    assert_eq!(confirming["paid_at_ms"], Value::Null);
    let all: Vec<FeedEvent> = seen.iter().chain(rest.iter()).cloned().collect();
    for pair in all.windows(2) {
        assert!(pair[0].cursor < pair[1].cursor, "cursors increase");
    }
    for e in &all {
        assert_eq!(
            (e.kind.as_deref(), e.reference.as_deref(), e.intent_id),
            (Some("order"), Some("feed-1"), Some(intent.id))
        );
        let b = body(e);
        assert_eq!(b["cursor"], e.cursor, "the body carries its cursor");
        assert_eq!(b["created_at_ms"], e.created_at_ms);
        assert_eq!(b["reference"], "feed-1");
    }

    // Page by page, one event at a time, the same feed.
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = h.store.events_after(after, 1).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.cursor;
        paged.extend(page);
    }
    assert_eq!(paged, all);

    // The API serves the same feed, with where to ask next.
    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (st, page) = api
        .call(
            Method::GET,
            "/v1/events?after=0&limit=2",
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{page}");
    assert_eq!(page["more"], true);
    assert_eq!(page["next_after"], all[1].cursor);
    let cursors: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["cursor"].as_i64().unwrap())
        .collect();
    assert_eq!(cursors, [all[0].cursor, all[1].cursor]);
    assert_eq!(page["events"][1]["data"]["status"], "paid");
    assert_eq!(page["events"][1]["reference"], "feed-1");
    let (st, page) = api
        .call(
            Method::GET,
            &format!("/v1/events?after={}", all[1].cursor),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{page}");
    assert_eq!(page["more"], false);
    assert_eq!(page["events"][0]["data"]["event"], "settlement.settled");
    let last = all.last().unwrap().cursor;
    let (st, page) = api
        .call(
            Method::GET,
            &format!("/v1/events?after={last}"),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{page}");
    assert_eq!(page["events"], Value::Array(Vec::new()));
    assert_eq!(page["next_after"], last, "an empty page keeps the cursor");
    for bad in ["after=-1", "after=x", "limit=0", "limit=1001"] {
        let (st, v) = api
            .call(
                Method::GET,
                &format!("/v1/events?{bad}"),
                Some(STOREFRONT),
                None,
                None,
            )
            .await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{bad}: {v}");
        let name = bad.split('=').next().unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(name)
                || v.to_string().contains(name),
            "{bad}: the error names {name}: {v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_is_told_the_new_cursor_and_the_reference_at_commit() {
    let mut h = Harness::new(Backend::Postgres, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let mut listener = sqlx::postgres::PgListener::connect(&h.db.url)
        .await
        .unwrap();
    listener.listen("paywatch_outbox").await.unwrap();
    let intent = h.create("topup", "feed-hint", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let feed = h.store.events_after(0, 100).await.unwrap();
    assert!(
        feed.iter().any(|e| e.topic == "ledger"),
        "a credited top-up posts a ledger event: {:?}",
        shape(&feed)
    );
    let hint = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification at commit")
        .unwrap();
    let hint: Value = serde_json::from_str(hint.payload()).expect("the hint is JSON");
    assert_eq!(hint["kind"], "topup");
    assert_eq!(hint["reference"], "feed-hint");
    assert_eq!(
        hint["cursor"],
        feed.last().unwrap().cursor,
        "the hint names the newest cursor of that commit's events: {hint}"
    );
}

// Issue 20, found 1: the storefront role could not read the outbox, so it
// had no feed at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storefront_role_reads_the_feed_and_never_the_tables_behind_it() {
    let pg = PrivatePostgres::start();
    pg.run_roles_file();
    let db = TestDb::at(&format!(
        "postgres://paywatch:owner-pw@127.0.0.1:{}/paywatch",
        pg.port
    ))
    .await;
    // Granted once the views exist, as the file says.
    pg.run_roles_file();
    let mut h = Harness::on(db, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let intent = h.create("order", "feed-role", "BTC", "100").await;
    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;

    let shop = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!(
            "postgres://storefront:shop-pw@127.0.0.1:{}/paywatch",
            pg.port
        ))
        .await
        .unwrap();
    let rows: Vec<(i64, String, Option<String>)> = sqlx::query_as(
        "SELECT cursor, topic, reference FROM paywatch_events WHERE cursor > $1 ORDER BY cursor",
    )
    .bind(0_i64)
    .fetch_all(&shop)
    .await
    .expect("the storefront reads the feed");
    assert!(
        rows.iter()
            .any(|(_, t, r)| t == "settlement" && r.as_deref() == Some("feed-role")),
        "the settlement is in the storefront's feed: {rows:?}"
    );
    let refused = sqlx::query("SELECT payload FROM outbox")
        .fetch_all(&shop)
        .await
        .expect_err("the outbox table itself stays closed to the storefront");
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    shop.close().await;
    // The private server goes with `pg`; its database needs no dropping.
    h.store.close().await;
}

async fn paid_order(h: &mut Harness, reference: &str) {
    let i = h.create("order", reference, "BTC", "100").await;
    h.pay(&i.address, Asset::Btc, i.amount_due);
    h.mine(3);
    h.sync().await;
}

async fn events_past_the_retention_are_pruned_and_a_reader_behind_them_is_told_where_to_resume(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    // Webhooks configured: an event stays until its delivery is sent.
    h.store.register_webhook_endpoint(0).await.unwrap();
    h.import_pool(3).await;
    paid_order(&mut h, "old-1").await;
    paid_order(&mut h, "old-2").await;
    let old = h.store.events_after(0, 100).await.unwrap();
    h.clock.advance_secs(2 * 86_400);
    paid_order(&mut h, "new-1").await;
    let cutoff = h.clock.now_ms() - 86_400_000;
    let all = h.store.events_after(0, 100).await.unwrap();
    let new: Vec<FeedEvent> = all[old.len()..].to_vec();
    assert!(new.iter().all(|e| e.reference.as_deref() == Some("new-1")));

    // No delivery has been sent: every event stays, to be sent.
    assert_eq!(h.store.prune_events(cutoff, 1_000).await.unwrap(), 0);
    assert_eq!(h.store.feed_pruned_through().await.unwrap(), 0);
    assert_eq!(h.store.events_after(0, 100).await.unwrap(), all);

    // A receiver took all but the first event; that one is still refused.
    let kept = old[0].cursor;
    h.store
        .execute_raw(&format!(
            "UPDATE webhook_deliveries SET delivered_at = 1 \
             WHERE outbox_id IN (SELECT id FROM outbox WHERE seq <> {kept})"
        ))
        .await
        .unwrap();
    let pruned = h.store.prune_events(cutoff, 1_000).await.unwrap();
    assert_eq!(pruned, u64::try_from(old.len() - 1).unwrap());
    let horizon = h.store.feed_pruned_through().await.unwrap();
    assert_eq!(horizon, old.last().unwrap().cursor);
    let left = h.store.events_after(0, 100).await.unwrap();
    assert_eq!(left[0].cursor, kept, "the event still to be sent stays");
    assert_eq!(&left[1..], &new[..], "newer events stay");
    assert_eq!(
        h.count(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE outbox_id NOT IN (SELECT id FROM outbox)"
        )
        .await,
        0,
        "no delivery row outlives its event"
    );
    assert_eq!(
        h.store.prune_events(cutoff, 1_000).await.unwrap(),
        0,
        "pruning again finds nothing"
    );

    let api = ApiClient::serve(context_with_role_tokens(&h)).await;
    let (st, v) = api
        .call(
            Method::GET,
            "/v1/events?after=0",
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::GONE, "{v}");
    assert_eq!(v["error"]["code"], "feed_pruned");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("after={horizon}")), "{message}");
    assert_eq!(v["error"]["resume_after"], horizon, "and as a number: {v}");
    let (st, v) = api
        .call(
            Method::GET,
            &format!("/v1/events?after={horizon}"),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["events"].as_array().unwrap().len(), new.len());
}

// Issue 21, found 6: every event was enrolled for webhooks even with no URL
// set, and an undelivered event is never pruned, so a paywatch that sends no
// webhooks pruned nothing.
async fn without_webhooks_events_past_the_retention_are_pruned(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(2).await;
    paid_order(&mut h, "old-1").await;
    let old = h.store.events_after(0, 100).await.unwrap();
    h.clock.advance_secs(2 * 86_400);
    paid_order(&mut h, "new-1").await;
    let cutoff = h.clock.now_ms() - 86_400_000;
    let pruned = h.store.prune_events(cutoff, 1_000).await.unwrap();
    assert!(pruned > 0, "nothing pruned of {} old events", old.len());
    assert!(h.store.feed_pruned_through().await.unwrap() > 0);
}

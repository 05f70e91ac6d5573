//! Amounts a storefront never compares itself (issue 20, found 6): on
//! SQLite amounts are decimal text, so `amount_received_final >= amount_due`
//! holds for '99999' against '200000'. paywatch says how much is still
//! missing, exactly, and whether the money received is in full.

#[macro_use]
mod common;

use common::{Backend, Harness, TestDb};
use paywatch_core::{Amount, Asset, Network};

on_both_databases!(
    an_underpayment_with_fewer_digits_than_the_price_never_reads_as_received_in_full,
    an_intent_with_money_final_before_the_upgrade_says_what_is_outstanding
);

async fn outstanding(h: &Harness, id: i64) -> (String, i64) {
    let r = h
        .row(&format!(
            "SELECT CAST(amount_outstanding AS TEXT) AS outstanding, \
             CAST(received_in_full AS BIGINT) AS in_full \
             FROM paywatch_intents WHERE intent_id = {id}"
        ))
        .await;
    (r.get("outstanding").unwrap().to_owned(), r.int("in_full"))
}

async fn an_underpayment_with_fewer_digits_than_the_price_never_reads_as_received_in_full(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(3).await;
    let short = h.create("order", "short-1", "BTC", "100").await;
    assert_eq!(short.amount_due, Amount(200_000));
    assert_eq!(
        outstanding(&h, short.id).await,
        ("200000".to_owned(), 0),
        "nothing received: the whole price is outstanding"
    );
    // 99,999 sat: as text, '99999' sorts after '200000'.
    h.pay(&short.address, Asset::Btc, Amount(99_999));
    let exact = h.create("order", "exact-1", "BTC", "100").await;
    h.pay(&exact.address, Asset::Btc, Amount(200_000));
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(short.id).await.amount_final, Amount(99_999));
    assert_eq!(outstanding(&h, short.id).await, ("100001".to_owned(), 0));
    assert_eq!(outstanding(&h, exact.id).await, ("0".to_owned(), 1));
    // Overpaid: nothing outstanding, never a negative amount.
    let over = h.create("order", "over-1", "BTC", "100").await;
    h.pay(&over.address, Asset::Btc, Amount(1_000_000));
    h.mine(1);
    h.sync().await;
    assert_eq!(outstanding(&h, over.id).await, ("0".to_owned(), 1));
}

async fn an_intent_with_money_final_before_the_upgrade_says_what_is_outstanding(b: Backend) {
    let db = TestDb::empty(b).await;
    db.store.migrate_until(14).await.unwrap();
    // A wei amount beyond 64 bits: SQLite's own arithmetic would round it.
    db.store
        .execute_raw(
            "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, \
             amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, status, \
             amount_final, updated_at) VALUES ('order', 'old', 'acct', 'ETH', 'ethereum', \
             '0x00000000000000000000000000000000000000bb', 18, '20000000000000000001', 1000000, \
             '500', 'fixed', 1, 1, 2, 'needs_review', '10000000000000000000', 3)",
        )
        .await
        .unwrap();
    db.store.migrate().await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CAST(amount_outstanding AS TEXT), CAST(received_in_full AS BIGINT) \
         FROM paywatch_intents WHERE reference = 'old'",
    )
    .fetch_all(&sqlx::AnyPool::connect(&db.url).await.unwrap())
    .await
    .unwrap();
    assert_eq!(rows, [("10000000000000000001".to_owned(), 0)]);
}

//! Each hot query of a long-running install is served by an index, on
//! PostgreSQL, so it stays as fast in year three as on day one (issue 21,
//! found 5). Over a history of settled rows, each query must be planned on
//! the index made for it: another index can avoid a sequential scan while
//! still reading every row of a network through a filter. The queries are
//! the store's own, built by the same functions.

use sqlx::{Connection, Executor, PgConnection, Row};

use super::{blocks, cases, finality, metrics_read, Dialect, Store};

fn admin_url() -> String {
    std::env::var("PAYWATCH_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// Rows of history per table: enough that the planner's statistics tell an
/// index lookup from a scan, as they would after a year.
const HISTORY: i64 = 50_000;

/// A fresh, migrated database holding a history of settled intents, their
/// transfers and blocks, plus a few open ones, analysed; and a connection
/// to it.
async fn planner() -> PgConnection {
    let admin = admin_url();
    let name = format!("pwindex_{}_{}", std::process::id(), crate::store::now_ms());
    let server = Store::connect(&format!("{admin}/postgres"))
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is required for this test ({admin}): {e}"));
    server
        .execute_raw(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    server.close().await;
    let url = format!("{admin}/{name}");
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    store.close().await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    for sql in [
        format!(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
             SELECT 'bitcoin', 'b' || n, n, 'b' || (n - 1), n, n * 1000 \
             FROM generate_series(1, {HISTORY}) n"
        ),
        // Settled for years, and a few still open or in review.
        format!(
            "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, \
             amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, \
             status, updated_at) \
             SELECT 'order', 'order-' || n, 'acct-' || (n % 5000), 'BTC', 'bitcoin', 'bc1q' || n, 8, \
             100000 + n % 100, 5000, '50000', 'fixed', n, n, n + 1, \
             CASE WHEN n % 5000 = 0 THEN 'needs_review' WHEN n % 4999 = 0 THEN 'confirming' \
                  ELSE 'paid' END, n \
             FROM generate_series(1, {HISTORY}) n"
        ),
        format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, amount, tx_status, first_seen_at) \
             SELECT 'bitcoin', 'BTC', 'tx' || n, 0, 'b' || n, n, n, 'bc1q' || n, 100000 + n % 100, \
             'success', n FROM generate_series(1, {HISTORY}) n"
        ),
        "ANALYZE".to_owned(),
    ] {
        conn.execute(sql.as_str()).await.unwrap();
    }
    conn
}

/// The plan of `sql` with `binds` (text, or integers when they parse).
async fn plan(conn: &mut PgConnection, sql: &str, binds: &[&str]) -> String {
    let explain = format!("EXPLAIN {sql}");
    let mut query = sqlx::query(&explain);
    for b in binds {
        query = match b.parse::<i64>() {
            Ok(n) => query.bind(n),
            Err(_) => query.bind(*b),
        };
    }
    let rows = query.fetch_all(conn).await.expect("explained");
    rows.iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The indexes a query must be planned on.
type Indexes = &'static [&'static str];
/// What a query is for, its SQL, its values, and the indexes it must use.
type HotQuery<'a> = (&'static str, String, Vec<&'a str>, Indexes);

#[tokio::test]
async fn every_hot_query_reads_an_index_not_the_history() {
    let mut conn = planner().await;
    // Searched for as support pastes them: two spellings of one address.
    let addresses: &'static [String] = Vec::leak(vec!["bc1q77".into(), "BC1Q77".into()]);
    let txids: &'static [String] = Vec::leak(vec!["tx77".into()]);
    let mut hot: Vec<HotQuery<'_>> = vec![
        (
            "blocks connected since an address was issued",
            blocks::BLOCKS_CONNECTED_SINCE.to_owned(),
            vec!["bitcoin", "49990000", "100"],
            &["blocks_by_connected_at"],
        ),
        (
            "intents queued on a rise of the final height",
            finality::queue_money_open_sql(Dialect::Postgres),
            vec!["bitcoin"],
            &["intents_money_open"],
        ),
        (
            "a transfer's candidate intents",
            cases::candidate_intents_sql(),
            vec!["77", "10"],
            &["intents_open_by_amount"],
        ),
        (
            "the review queue",
            cases::review_queue_sql(),
            vec!["50"],
            &["intents_needing_review"],
        ),
    ];
    // A search's values, then its limit.
    let search =
        |what, (sql, mut binds): (String, Vec<&'static str>), indexes| -> HotQuery<'static> {
            binds.push("20");
            (what, sql, binds, indexes)
        };
    hot.extend([
        search(
            "support's search by reference alone",
            cases::find_intents_sql(Some("order-77"), None, &[], &[]),
            &["intents_by_reference_alone"],
        ),
        search(
            "support's search by account",
            cases::find_intents_sql(None, Some("acct-77"), &[], &[]),
            &["intents_by_account"],
        ),
        search(
            "support's search by address alone",
            cases::find_intents_sql(None, None, addresses, &[]),
            &["intents_by_address", "intents_by_twin"],
        ),
        search(
            "support's search by txid",
            cases::find_intents_sql(None, None, &[], txids),
            &["transfers_by_txid"],
        ),
    ]);
    // Each scrape of the metrics.
    for (status, sql) in metrics_read::open_status_sql(Dialect::Postgres) {
        let index: Indexes = match status {
            "awaiting_payment" => &["intents_expiring"],
            "confirming" => &["intents_money_open"],
            _ => &["intents_needing_review"],
        };
        hot.push(("a metrics scrape's open intents", sql, Vec::new(), index));
    }
    for (what, sql, binds, indexes) in hot {
        let plan = plan(&mut conn, &sql, &binds).await;
        for index in indexes {
            assert!(
                plan.contains(index),
                "{what} does not use {index}:\n{sql}\n{plan}"
            );
        }
        for table in ["intents", "blocks", "transfers"] {
            assert!(
                !plan.contains(&format!("Seq Scan on {table}")),
                "{what} scans {table}:\n{sql}\n{plan}"
            );
        }
    }
}

//! Each hot query of a long-running install is served by an index, on
//! PostgreSQL, so it stays as fast in year three as on day one (issue 21,
//! found 5). Over a history of settled rows, each query must be planned on
//! the index made for it: another index can avoid a sequential scan while
//! still reading every row of a network through a filter. The queries are
//! the store's own, built by the same functions.

use sqlx::{Connection, Executor, PgConnection, Row};

use super::{hot_queries, Store};

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
    for sql in hot_queries::history_sql(HISTORY) {
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

#[tokio::test]
async fn every_hot_query_reads_an_index_not_the_history() {
    let mut conn = planner().await;
    for q in hot_queries::hot_queries(HISTORY) {
        let binds: Vec<&str> = q.binds.iter().map(String::as_str).collect();
        let plan = plan(&mut conn, &q.sql, &binds).await;
        for index in q.indexes {
            assert!(
                plan.contains(index),
                "{} does not use {index}:\n{}\n{plan}",
                q.what,
                q.sql
            );
        }
        for table in ["intents", "blocks", "transfers"] {
            assert!(
                !plan.contains(&format!("Seq Scan on {table}")),
                "{} scans {table}:\n{}\n{plan}",
                q.what,
                q.sql
            );
        }
    }
}

//! An upgrade applied to a live PostgreSQL database: while `paywatch
//! migrate` builds an index on a table the daemon writes, the daemon's
//! writers and the storefront's readers go on. A plain `CREATE INDEX` takes
//! a lock that waits behind any open write and queues every later one
//! behind itself, so one slow transaction stopped the whole service for as
//! long as the build took.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestDb};
use sqlx::{Connection, Executor, PgConnection, Row};

/// The last migration of the release before online-safe migrations.
const BEFORE: i64 = 23;

async fn pg(url: &str) -> PgConnection {
    PgConnection::connect(url).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_built_during_an_upgrade_never_blocks_the_daemons_writers() {
    let db = TestDb::empty(Backend::Postgres).await;
    db.store.migrate_until(BEFORE).await.unwrap();

    // A watcher mid-batch: its transaction wrote a block and has not committed.
    let mut watcher = pg(&db.url).await;
    watcher.execute("BEGIN").await.unwrap();
    watcher
        .execute(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
             VALUES ('bitcoin', 'b1', 1, 'b0', 1, 1)",
        )
        .await
        .unwrap();

    // The upgrade starts meanwhile, and waits for that transaction.
    let store = db.store.clone();
    let migrating = tokio::spawn(async move { store.migrate().await });
    let mut observer = pg(&db.url).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = observer
            .fetch_one(
                "SELECT COUNT(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND state = 'active' \
                 AND query ILIKE '%CREATE INDEX%' AND wait_event_type = 'Lock'",
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline && !migrating.is_finished(),
            "the index build never waited for the open transaction"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Another writer (the next block, an intent) and a storefront read each
    // answer within three seconds while the build waits.
    let mut other = pg(&db.url).await;
    other.execute("SET statement_timeout = '3s'").await.unwrap();
    for sql in [
        "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
         VALUES ('litecoin', 'l1', 1, 'l0', 1, 1)",
        "SELECT COUNT(*) FROM blocks",
        "SELECT COUNT(*) FROM paywatch_payment_status",
    ] {
        other
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("blocked behind the migration: {sql}: {e}"));
    }

    // Once the watcher commits, the upgrade finishes, with every index valid.
    watcher.execute("COMMIT").await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), migrating)
        .await
        .expect("the upgrade finishes once the open transaction ends")
        .unwrap()
        .expect("migrated");
    let invalid: i64 = observer
        .fetch_one("SELECT COUNT(*) FROM pg_index WHERE NOT indisvalid")
        .await
        .unwrap()
        .get(0);
    assert_eq!(invalid, 0, "an index was left invalid");
    let built: i64 = observer
        .fetch_one("SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'blocks_by_connected_at'")
        .await
        .unwrap()
        .get(0);
    assert_eq!(built, 1);
}

/// `CREATE INDEX CONCURRENTLY` that fails half-way (a deadlock, the migrate
/// process killed, a cancelled statement) leaves an invalid index behind,
/// which `IF NOT EXISTS` would then take as built: the next `migrate`
/// drops it and builds it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_build_that_failed_half_way_is_built_again_by_the_next_migrate() {
    let db = TestDb::empty(Backend::Postgres).await;
    db.store.migrate_until(BEFORE).await.unwrap();
    let mut conn = pg(&db.url).await;
    // Two intents at one address on two networks: a unique build on the
    // address alone fails after creating its index entry, invalid.
    for (network, reference) in [("ethereum", "a"), ("tron", "b")] {
        conn.execute(
            format!(
                "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, \
                 amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, \
                 status, updated_at) VALUES ('order', '{reference}', 'acct', 'USDT', '{network}', \
                 'same', 6, 1, 100, '1', 'par', 1, 1, 2, 'awaiting_payment', 1)"
            )
            .as_str(),
        )
        .await
        .unwrap();
    }
    let failed = conn
        .execute("CREATE UNIQUE INDEX CONCURRENTLY intents_by_address ON intents (address)")
        .await;
    assert!(failed.is_err(), "the unique build must fail");
    async fn invalid(conn: &mut PgConnection) -> i64 {
        conn.fetch_one(
            "SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = 'intents_by_address' AND NOT i.indisvalid",
        )
        .await
        .unwrap()
        .get(0)
    }
    assert_eq!(
        invalid(&mut conn).await,
        1,
        "the failed build left an invalid index"
    );

    db.store.migrate().await.expect("migrated");
    assert_eq!(
        invalid(&mut conn).await,
        0,
        "the invalid index was kept as built"
    );
    let usable: i64 = conn
        .fetch_one(
            "SELECT COUNT(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname = 'intents_by_address' AND i.indisvalid AND NOT i.indisunique",
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        usable, 1,
        "intents_by_address was not built again as the migration says"
    );
}

/// During a rolling upgrade an instance of the older release restarts on a
/// database the new release already migrated, and a rollback reinstalls the
/// older binary: its migrate must accept the migrations it does not know
/// (it failed with VersionMissing), on both databases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_release_starts_on_a_schema_a_newer_one_migrated() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let db = TestDb::new(backend).await;
        db.store
            .migrate_until(BEFORE)
            .await
            .unwrap_or_else(|e| panic!("{backend:?}: the older release refused: {e}"));
        db.store.require_current_schema().await.unwrap();
    }
}

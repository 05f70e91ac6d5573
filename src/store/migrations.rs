use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::AnyPool;

use super::{Dialect, StoreError};

type Embedded = &'static [(i64, &'static str, &'static str)];

const POSTGRES: Embedded = &[
    (
        1,
        "core",
        include_str!("../../migrations/postgres/0001_core.sql"),
    ),
    (
        2,
        "storefront views",
        include_str!("../../migrations/postgres/0002_storefront_views.sql"),
    ),
    (
        3,
        "mempool transfers",
        include_str!("../../migrations/postgres/0003_mempool.sql"),
    ),
    (
        4,
        "transfers by height",
        include_str!("../../migrations/postgres/0004_transfers_by_height.sql"),
    ),
    (
        5,
        "twin addresses",
        include_str!("../../migrations/postgres/0005_twin_addresses.sql"),
    ),
    (
        6,
        "storefront api",
        include_str!("../../migrations/postgres/0006_storefront_api.sql"),
    ),
    (
        7,
        "support cases",
        include_str!("../../migrations/postgres/0007_support_cases.sql"),
    ),
    (
        8,
        "webhooks",
        include_str!("../../migrations/postgres/0008_webhooks.sql"),
    ),
    (
        9,
        "rescan requests",
        include_str!("../../migrations/postgres/0009_rescans.sql"),
    ),
    (
        10,
        "watcher leases",
        include_str!("../../migrations/postgres/0010_watcher_leases.sql"),
    ),
    (
        11,
        "money path",
        include_str!("../../migrations/postgres/0011_money_path.sql"),
    ),
    (
        12,
        "sessions and token names",
        include_str!("../../migrations/postgres/0012_sessions_and_token_names.sql"),
    ),
    (
        13,
        "chain gaps",
        include_str!("../../migrations/postgres/0013_chain_gaps.sql"),
    ),
    (
        14,
        "event feed",
        include_str!("../../migrations/postgres/0014_event_feed.sql"),
    ),
    (
        15,
        "amounts compared",
        include_str!("../../migrations/postgres/0015_amounts_compared.sql"),
    ),
    (
        16,
        "checkout states",
        include_str!("../../migrations/postgres/0016_checkout_states.sql"),
    ),
    (
        17,
        "storefront contract v1",
        include_str!("../../migrations/postgres/0017_contract_v1.sql"),
    ),
    (
        18,
        "balances and ledger",
        include_str!("../../migrations/postgres/0018_balances_and_ledger.sql"),
    ),
    (
        19,
        "order status",
        include_str!("../../migrations/postgres/0019_order_status.sql"),
    ),
    (
        20,
        "feed retention",
        include_str!("../../migrations/postgres/0020_feed_retention.sql"),
    ),
    (
        21,
        "webhooks per order",
        include_str!("../../migrations/postgres/0021_webhooks_per_order.sql"),
    ),
    (
        22,
        "reference owners",
        include_str!("../../migrations/postgres/0022_reference_owners.sql"),
    ),
    (
        23,
        "webhook endpoint",
        include_str!("../../migrations/postgres/0023_webhook_endpoint.sql"),
    ),
    (
        24,
        "blocks by connected_at",
        include_str!("../../migrations/postgres/0024_blocks_by_connected_at.sql"),
    ),
    (
        25,
        "intents with money open",
        include_str!("../../migrations/postgres/0025_intents_money_open.sql"),
    ),
    (
        26,
        "intents by address",
        include_str!("../../migrations/postgres/0026_intents_by_address.sql"),
    ),
    (
        27,
        "intents by reference",
        include_str!("../../migrations/postgres/0027_intents_by_reference.sql"),
    ),
    (
        28,
        "open intents by amount",
        include_str!("../../migrations/postgres/0028_intents_open_by_amount.sql"),
    ),
    (
        29,
        "intents needing review",
        include_str!("../../migrations/postgres/0029_intents_needing_review.sql"),
    ),
    (
        30,
        "chain samples",
        include_str!("../../migrations/postgres/0030_chain_samples.sql"),
    ),
    (
        31,
        "restores",
        include_str!("../../migrations/postgres/0031_restores.sql"),
    ),
    (
        32,
        "derivation keys",
        include_str!("../../migrations/postgres/0032_derivation_keys.sql"),
    ),
    (
        33,
        "money settings",
        include_str!("../../migrations/postgres/0033_money_settings.sql"),
    ),
    (
        34,
        "blocks pruned below",
        include_str!("../../migrations/postgres/0034_blocks_pruned_below.sql"),
    ),
    (
        35,
        "settlements by time",
        include_str!("../../migrations/postgres/0035_settlements_by_time.sql"),
    ),
    (
        36,
        "dormant addresses",
        include_str!("../../migrations/postgres/0036_dormant_addresses.sql"),
    ),
    (
        37,
        "live addresses",
        include_str!("../../migrations/postgres/0037_addresses_live.sql"),
    ),
    (
        38,
        "dormant addresses by id",
        include_str!("../../migrations/postgres/0038_addresses_dormant.sql"),
    ),
    (
        39,
        "view tokens",
        include_str!("../../migrations/postgres/0039_view_tokens.sql"),
    ),
    (
        40,
        "intents by view token",
        include_str!("../../migrations/postgres/0040_intents_by_view_token.sql"),
    ),
    (
        41,
        "outbox by intent",
        include_str!("../../migrations/postgres/0041_outbox_by_intent.sql"),
    ),
    (
        42,
        "intents by creation time",
        include_str!("../../migrations/postgres/0042_intents_by_created.sql"),
    ),
    (
        43,
        "settled terms",
        include_str!("../../migrations/postgres/0043_settled_terms.sql"),
    ),
    (
        44,
        "coinbase maturity",
        include_str!("../../migrations/postgres/0044_coinbase_maturity.sql"),
    ),
    (
        45,
        "transfers maturing",
        include_str!("../../migrations/postgres/0045_transfers_maturing.sql"),
    ),
    (
        46,
        "spam transfers",
        include_str!("../../migrations/postgres/0046_transfers_spam.sql"),
    ),
    (
        47,
        "credits back",
        include_str!("../../migrations/postgres/0047_credits_back.sql"),
    ),
    (
        48,
        "ledger by returned entry",
        include_str!("../../migrations/postgres/0048_ledger_by_returns_entry.sql"),
    ),
    (
        49,
        "balance gaps",
        include_str!("../../migrations/postgres/0049_balance_gaps.sql"),
    ),
    (
        51,
        "internal ETH keys",
        include_str!("../../migrations/postgres/0051_internal_eth_keys.sql"),
    ),
    (
        52,
        "unread from",
        include_str!("../../migrations/postgres/0052_unread_from.sql"),
    ),
    (
        53,
        "superseded settlements",
        include_str!("../../migrations/postgres/0053_superseded_settlements.sql"),
    ),
    (
        54,
        "dust floor",
        include_str!("../../migrations/postgres/0054_dust_floor.sql"),
    ),
    (
        55,
        "ledger by intent",
        include_str!("../../migrations/postgres/0055_ledger_by_intent.sql"),
    ),
    (
        56,
        "refund checks",
        include_str!("../../migrations/postgres/0056_refund_checks.sql"),
    ),
    (
        57,
        "refunds watched",
        include_str!("../../migrations/postgres/0057_refunds_watched.sql"),
    ),
    (
        58,
        "refunds due",
        include_str!("../../migrations/postgres/0058_refunds_due.sql"),
    ),
    (
        59,
        "settlement payments",
        include_str!("../../migrations/postgres/0059_settlement_payments.sql"),
    ),
    (
        60,
        "refund transactions",
        include_str!("../../migrations/postgres/0060_refund_transactions.sql"),
    ),
];
const SQLITE: Embedded = &[
    (
        1,
        "core",
        include_str!("../../migrations/sqlite/0001_core.sql"),
    ),
    (
        2,
        "storefront views",
        include_str!("../../migrations/sqlite/0002_storefront_views.sql"),
    ),
    (
        3,
        "mempool transfers",
        include_str!("../../migrations/sqlite/0003_mempool.sql"),
    ),
    (
        4,
        "transfers by height",
        include_str!("../../migrations/sqlite/0004_transfers_by_height.sql"),
    ),
    (
        5,
        "twin addresses",
        include_str!("../../migrations/sqlite/0005_twin_addresses.sql"),
    ),
    (
        6,
        "storefront api",
        include_str!("../../migrations/sqlite/0006_storefront_api.sql"),
    ),
    (
        7,
        "support cases",
        include_str!("../../migrations/sqlite/0007_support_cases.sql"),
    ),
    (
        8,
        "webhooks",
        include_str!("../../migrations/sqlite/0008_webhooks.sql"),
    ),
    (
        9,
        "rescan requests",
        include_str!("../../migrations/sqlite/0009_rescans.sql"),
    ),
    (
        10,
        "watcher leases",
        include_str!("../../migrations/sqlite/0010_watcher_leases.sql"),
    ),
    (
        11,
        "money path",
        include_str!("../../migrations/sqlite/0011_money_path.sql"),
    ),
    (
        12,
        "sessions and token names",
        include_str!("../../migrations/sqlite/0012_sessions_and_token_names.sql"),
    ),
    (
        13,
        "chain gaps",
        include_str!("../../migrations/sqlite/0013_chain_gaps.sql"),
    ),
    (
        14,
        "event feed",
        include_str!("../../migrations/sqlite/0014_event_feed.sql"),
    ),
    (
        15,
        "amounts compared",
        include_str!("../../migrations/sqlite/0015_amounts_compared.sql"),
    ),
    (
        16,
        "checkout states",
        include_str!("../../migrations/sqlite/0016_checkout_states.sql"),
    ),
    (
        17,
        "storefront contract v1",
        include_str!("../../migrations/sqlite/0017_contract_v1.sql"),
    ),
    (
        18,
        "balances and ledger",
        include_str!("../../migrations/sqlite/0018_balances_and_ledger.sql"),
    ),
    (
        19,
        "order status",
        include_str!("../../migrations/sqlite/0019_order_status.sql"),
    ),
    (
        20,
        "feed retention",
        include_str!("../../migrations/sqlite/0020_feed_retention.sql"),
    ),
    (
        21,
        "webhooks per order",
        include_str!("../../migrations/sqlite/0021_webhooks_per_order.sql"),
    ),
    (
        22,
        "reference owners",
        include_str!("../../migrations/sqlite/0022_reference_owners.sql"),
    ),
    (
        23,
        "webhook endpoint",
        include_str!("../../migrations/sqlite/0023_webhook_endpoint.sql"),
    ),
    (
        24,
        "blocks by connected_at",
        include_str!("../../migrations/sqlite/0024_blocks_by_connected_at.sql"),
    ),
    (
        25,
        "intents with money open",
        include_str!("../../migrations/sqlite/0025_intents_money_open.sql"),
    ),
    (
        26,
        "intents by address",
        include_str!("../../migrations/sqlite/0026_intents_by_address.sql"),
    ),
    (
        27,
        "intents by reference",
        include_str!("../../migrations/sqlite/0027_intents_by_reference.sql"),
    ),
    (
        28,
        "open intents by amount",
        include_str!("../../migrations/sqlite/0028_intents_open_by_amount.sql"),
    ),
    (
        29,
        "intents needing review",
        include_str!("../../migrations/sqlite/0029_intents_needing_review.sql"),
    ),
    (
        30,
        "chain samples",
        include_str!("../../migrations/sqlite/0030_chain_samples.sql"),
    ),
    (
        31,
        "restores",
        include_str!("../../migrations/sqlite/0031_restores.sql"),
    ),
    (
        32,
        "derivation keys",
        include_str!("../../migrations/sqlite/0032_derivation_keys.sql"),
    ),
    (
        33,
        "money settings",
        include_str!("../../migrations/sqlite/0033_money_settings.sql"),
    ),
    (
        34,
        "blocks pruned below",
        include_str!("../../migrations/sqlite/0034_blocks_pruned_below.sql"),
    ),
    (
        35,
        "settlements by time",
        include_str!("../../migrations/sqlite/0035_settlements_by_time.sql"),
    ),
    (
        36,
        "dormant addresses",
        include_str!("../../migrations/sqlite/0036_dormant_addresses.sql"),
    ),
    (
        37,
        "live addresses",
        include_str!("../../migrations/sqlite/0037_addresses_live.sql"),
    ),
    (
        38,
        "dormant addresses by id",
        include_str!("../../migrations/sqlite/0038_addresses_dormant.sql"),
    ),
    (
        39,
        "view tokens",
        include_str!("../../migrations/sqlite/0039_view_tokens.sql"),
    ),
    (
        40,
        "intents by view token",
        include_str!("../../migrations/sqlite/0040_intents_by_view_token.sql"),
    ),
    (
        41,
        "outbox by intent",
        include_str!("../../migrations/sqlite/0041_outbox_by_intent.sql"),
    ),
    (
        42,
        "intents by creation time",
        include_str!("../../migrations/sqlite/0042_intents_by_created.sql"),
    ),
    (
        43,
        "settled terms",
        include_str!("../../migrations/sqlite/0043_settled_terms.sql"),
    ),
    (
        44,
        "coinbase maturity",
        include_str!("../../migrations/sqlite/0044_coinbase_maturity.sql"),
    ),
    (
        45,
        "transfers maturing",
        include_str!("../../migrations/sqlite/0045_transfers_maturing.sql"),
    ),
    (
        46,
        "spam transfers",
        include_str!("../../migrations/sqlite/0046_transfers_spam.sql"),
    ),
    (
        47,
        "credits back",
        include_str!("../../migrations/sqlite/0047_credits_back.sql"),
    ),
    (
        48,
        "ledger by returned entry",
        include_str!("../../migrations/sqlite/0048_ledger_by_returns_entry.sql"),
    ),
    (
        49,
        "balance gaps",
        include_str!("../../migrations/sqlite/0049_balance_gaps.sql"),
    ),
    (
        51,
        "internal ETH keys",
        include_str!("../../migrations/sqlite/0051_internal_eth_keys.sql"),
    ),
    (
        52,
        "unread from",
        include_str!("../../migrations/sqlite/0052_unread_from.sql"),
    ),
    (
        53,
        "superseded settlements",
        include_str!("../../migrations/sqlite/0053_superseded_settlements.sql"),
    ),
    (
        54,
        "dust floor",
        include_str!("../../migrations/sqlite/0054_dust_floor.sql"),
    ),
    (
        55,
        "ledger by intent",
        include_str!("../../migrations/sqlite/0055_ledger_by_intent.sql"),
    ),
    (
        56,
        "refund checks",
        include_str!("../../migrations/sqlite/0056_refund_checks.sql"),
    ),
    (
        57,
        "refunds watched",
        include_str!("../../migrations/sqlite/0057_refunds_watched.sql"),
    ),
    (
        58,
        "refunds due",
        include_str!("../../migrations/sqlite/0058_refunds_due.sql"),
    ),
    (
        59,
        "settlement payments",
        include_str!("../../migrations/sqlite/0059_settlement_payments.sql"),
    ),
    (
        60,
        "refund transactions",
        include_str!("../../migrations/sqlite/0060_refund_transactions.sql"),
    ),
];

/// Migrations compiled into the binary, so `paywatch` runs from any directory.
#[derive(Debug)]
struct EmbeddedMigrations(Embedded);

impl MigrationSource<'static> for EmbeddedMigrations {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(version, description, sql)| {
                    Migration::new(
                        *version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        outside_transaction(sql),
                    )
                })
                .collect())
        })
    }
}

/// The first line that runs a migration outside a transaction: PostgreSQL
/// builds an index `CONCURRENTLY` only there. Such a migration holds one
/// statement, since several in one query run as one implicit transaction.
pub(super) const NO_TRANSACTION: &str = "-- paywatch: no-transaction";

fn outside_transaction(sql: &str) -> bool {
    sql.starts_with(NO_TRANSACTION)
}

/// The newest migration this binary carries.
pub(super) fn latest(dialect: Dialect) -> i64 {
    let set = match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::Sqlite => SQLITE,
    };
    set.last().map_or(0, |(v, _, _)| *v)
}

/// The newest migration applied to the database; `None` when none is.
pub(super) async fn applied(pool: &AnyPool) -> Result<Option<i64>, StoreError> {
    // No table: a database nothing has migrated yet.
    match sqlx::query_scalar::<_, Option<i64>>(
        "SELECT MAX(version) FROM _sqlx_migrations WHERE success",
    )
    .fetch_one(pool)
    .await
    {
        Ok(v) => Ok(v),
        Err(sqlx::Error::Database(e)) if e.message().contains("_sqlx_migrations") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn run(pool: &AnyPool, dialect: Dialect) -> Result<(), StoreError> {
    run_until(pool, dialect, i64::MAX).await
}

/// Applies the migrations up to `version` only: a database as an older
/// release left it, for upgrade tests.
pub(super) async fn run_until(
    pool: &AnyPool,
    dialect: Dialect,
    version: i64,
) -> Result<(), StoreError> {
    let set = match dialect {
        Dialect::Postgres => POSTGRES,
        Dialect::Sqlite => SQLITE,
    };
    let upto = set.iter().take_while(|(v, _, _)| *v <= version).count();
    let mut migrator = Migrator::new(EmbeddedMigrations(&set[..upto])).await?;
    // Schema changes expand, then contract releases later: a binary runs on
    // a schema newer than its own, so a rolling upgrade's older instances
    // and a rollback keep working (README, "Upgrades").
    migrator.set_ignore_missing(true);
    let mut conn = pool.acquire().await?;
    if dialect == Dialect::Postgres {
        // One migrate at a time across instances, before anything else: an
        // invalid index may be one another migrate is building right now.
        sqlx::query("SELECT pg_advisory_lock(hashtext('paywatch migrate'))")
            .execute(&mut *conn)
            .await?;
        let ran = async {
            drop_failed_index_builds(&mut conn, set).await?;
            migrator.run_direct(&mut *conn).await?;
            Ok::<_, StoreError>(())
        }
        .await;
        // A connection that fails here is closed, and its lock with it.
        let _ = sqlx::query("SELECT pg_advisory_unlock(hashtext('paywatch migrate'))")
            .execute(&mut *conn)
            .await;
        return ran;
    }
    migrator.run_direct(&mut *conn).await?;
    Ok(())
}

/// The index a no-transaction migration builds, by name.
fn concurrent_index(sql: &str) -> Option<&str> {
    if !outside_transaction(sql) {
        return None;
    }
    let at = sql.find("IF NOT EXISTS ")? + "IF NOT EXISTS ".len();
    sql[at..].split_whitespace().next()
}

/// A `CREATE INDEX CONCURRENTLY` that failed half-way (a deadlock, a
/// cancelled statement, the process killed) leaves an invalid index that
/// `IF NOT EXISTS` would take as built: dropped here, so its migration,
/// not recorded as applied, builds it again.
async fn drop_failed_index_builds(
    conn: &mut sqlx::AnyConnection,
    set: Embedded,
) -> Result<(), StoreError> {
    let invalid: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(c.relname AS TEXT) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE NOT i.indisvalid AND pg_table_is_visible(c.oid)",
    )
    .fetch_all(&mut *conn)
    .await?;
    for name in invalid {
        if set
            .iter()
            .any(|(_, _, sql)| concurrent_index(sql) == Some(name.as_str()))
        {
            tracing::warn!(index = %name, "dropping an index whose concurrent build failed, to build it again");
            sqlx::query(&format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

/// The first PostgreSQL migration written to be applied beside live
/// instances. Earlier ones ran before the rules and stay as they are:
/// their checksums are recorded in every database.
#[cfg(test)]
const ONLINE_SAFE_FROM: i64 = 24;

/// The statements of a migration, comments dropped and whitespace folded:
/// `;` ends one except inside quotes or a `$$` body.
#[cfg(test)]
fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut dollar) = (false, false);
    for line in sql.lines() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '-' if !quoted && !dollar && chars.peek() == Some(&'-') => break,
                '\'' if !dollar => quoted = !quoted,
                '$' if !quoted && chars.peek() == Some(&'$') => {
                    chars.next();
                    current.push('$');
                    dollar = !dollar;
                }
                ';' if !quoted && !dollar => {
                    out.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        current.push(' ');
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

/// What in a PostgreSQL migration would stop the service while it runs
/// beside live instances: a lock that waits behind an open transaction and
/// queues every reader or writer after it. Empty when it is safe.
#[cfg(test)]
fn online_problems(sql: &str) -> Vec<String> {
    let statements = statements(sql);
    let upper: Vec<String> = statements.iter().map(|s| s.to_uppercase()).collect();
    let mut problems = Vec::new();
    if outside_transaction(sql) {
        let index_only = upper.len() == 1
            && (upper[0].starts_with("CREATE INDEX CONCURRENTLY IF NOT EXISTS ")
                || upper[0].starts_with("CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ")
                || upper[0].starts_with("DROP INDEX CONCURRENTLY IF EXISTS "));
        if !index_only {
            problems.push(format!(
                "a no-transaction migration holds one CREATE INDEX CONCURRENTLY IF NOT EXISTS \
                 (or DROP INDEX CONCURRENTLY IF EXISTS) and nothing else: several statements in \
                 one query run as one transaction, and a rerun after a failure must not fail; \
                 found {statements:?}"
            ));
        }
        return problems;
    }
    if !upper
        .first()
        .is_some_and(|s| s.starts_with("SET LOCAL LOCK_TIMEOUT"))
    {
        problems.push(
            "a migration in a transaction starts with SET LOCAL lock_timeout, so a lock it \
             cannot get soon fails the upgrade instead of queueing every query behind it"
                .into(),
        );
    }
    // Tables this migration creates: nobody else uses them yet.
    let created: Vec<String> = upper
        .iter()
        .filter_map(|s| {
            let rest = s.strip_prefix("CREATE TABLE ")?;
            let rest = rest.strip_prefix("IF NOT EXISTS ").unwrap_or(rest);
            Some(rest.split([' ', '(']).next()?.to_owned())
        })
        .collect();
    for s in &upper {
        let on_new_table = s
            .split(" ON ")
            .nth(1)
            .and_then(|t| t.split([' ', '(']).next())
            .is_some_and(|t| created.iter().any(|c| c == t));
        let builds_index = s.starts_with("CREATE INDEX") || s.starts_with("CREATE UNIQUE INDEX");
        if builds_index && !on_new_table {
            problems.push(format!(
                "{s}: an index on a table in use is built CONCURRENTLY, in a no-transaction \
                 migration of its own (first line {NO_TRANSACTION:?})"
            ));
        }
        if s.starts_with("ALTER TABLE") {
            let table = s.split(' ').nth(2).unwrap_or_default();
            let new_table = created.iter().any(|c| c == table);
            if s.contains("ALTER COLUMN") && s.contains(" TYPE ") {
                problems.push(format!(
                    "{s}: changing a column's type rewrites the table under an exclusive lock; \
                     add a column, fill it, and switch readers in a later release"
                ));
            }
            if s.contains("SET NOT NULL") && !new_table {
                problems.push(format!(
                    "{s}: SET NOT NULL scans the table under an exclusive lock; add a \
                     CHECK (… IS NOT NULL) NOT VALID, then VALIDATE it in a later statement"
                ));
            }
            if s.contains("ADD CONSTRAINT") && !s.contains("NOT VALID") && !new_table {
                problems.push(format!(
                    "{s}: a constraint on a table in use is added NOT VALID, then validated \
                     in a later statement"
                ));
            }
        }
        for (what, why) in [
            ("VACUUM FULL", "rewrites the table under an exclusive lock"),
            ("CLUSTER", "rewrites the table under an exclusive lock"),
            ("LOCK ", "an explicit table lock stops the service"),
        ] {
            if s.starts_with(what) {
                problems.push(format!("{s}: {why}"));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_new_postgres_migration_can_run_beside_live_instances() {
        for (version, name, sql) in POSTGRES.iter().filter(|(v, _, _)| *v >= ONLINE_SAFE_FROM) {
            let problems = online_problems(sql);
            assert!(
                problems.is_empty(),
                "migration {version:04} ({name}) would stop the service while it runs:\n{}",
                problems.join("\n")
            );
        }
    }

    #[test]
    fn the_migration_rules_name_what_would_stop_the_service() {
        let cases: [(&str, &str); 7] = [
            (
                "CREATE INDEX intents_x ON intents (network);",
                "SET LOCAL lock_timeout",
            ),
            (
                "SET LOCAL lock_timeout = '5s';\nCREATE INDEX intents_x ON intents (network);",
                "CONCURRENTLY",
            ),
            (
                "-- paywatch: no-transaction\nCREATE INDEX CONCURRENTLY a ON t (x);\n\
                 CREATE INDEX CONCURRENTLY IF NOT EXISTS b ON t (y);",
                "one CREATE INDEX CONCURRENTLY",
            ),
            (
                "-- paywatch: no-transaction\nCREATE INDEX CONCURRENTLY a ON t (x);",
                "IF NOT EXISTS",
            ),
            (
                "SET LOCAL lock_timeout = '5s';\nALTER TABLE intents ALTER COLUMN usd_cents TYPE NUMERIC;",
                "rewrites the table",
            ),
            (
                "SET LOCAL lock_timeout = '5s';\nALTER TABLE intents ALTER COLUMN memo SET NOT NULL;",
                "NOT VALID",
            ),
            (
                "SET LOCAL lock_timeout = '5s';\nALTER TABLE intents ADD CONSTRAINT c CHECK (usd_cents > 0);",
                "NOT VALID",
            ),
        ];
        for (sql, named) in cases {
            let problems = online_problems(sql).join("\n");
            assert!(problems.contains(named), "{sql}\n→ {problems:?}");
        }
        // What is safe passes: a new table and its indexes in a transaction
        // with a lock timeout, a concurrent index alone, a comment with a ;.
        for sql in [
            "SET LOCAL lock_timeout = '5s';\n-- why; because\nCREATE TABLE instances (id BIGINT);\n\
             CREATE INDEX instances_by_id ON instances (id);\n\
             ALTER TABLE intents ADD COLUMN note TEXT;",
            "-- paywatch: no-transaction\n-- a comment; with a semicolon\n\
             CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x) WHERE s = 'a;b';",
        ] {
            assert_eq!(online_problems(sql), Vec::<String>::new(), "{sql}");
        }
    }
}

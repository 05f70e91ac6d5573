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
                        false,
                    )
                })
                .collect())
        })
    }
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
    let migrator = Migrator::new(EmbeddedMigrations(&set[..upto])).await?;
    migrator.run(pool).await?;
    Ok(())
}

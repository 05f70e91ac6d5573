//! The storefront's reads at scale (issue 20: every storefront query is
//! indexed; each stays under 2 ms p99 at a million intents): a PostgreSQL
//! database with `--intents` intents (default 1,000,000) over one account
//! per ten intents, their settlements, top-up credits, debits and two feed
//! events each, then each read the storefront makes, timed one at a time on
//! one connection with random keys, p50 and p99 printed.
//!
//!   cargo run --example storefront_reads [-- --intents N] [--samples S] [--keep]
//!
//! The database is made on `PAYWATCH_BENCH_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432`) and dropped at the end unless
//! `--keep`. Rows are made in SQL (generate_series), not through paywatch:
//! what is measured is the reads, over the schema `paywatch migrate` makes.
//! A debug build measures the same: the time is the database's.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch::store::Store;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

struct Args {
    intents: i64,
    samples: usize,
    keep: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        intents: 1_000_000,
        samples: 2_000,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--intents" => a.intents = it.next().context("--intents N")?.parse()?,
            "--samples" => a.samples = it.next().context("--samples N")?.parse()?,
            "--keep" => a.keep = true,
            other => bail!("unknown argument {other}: --intents N, --samples N, --keep"),
        }
    }
    if a.intents < 100 {
        bail!("--intents: at least 100");
    }
    Ok(a)
}

/// A small deterministic generator: the same keys on every run.
struct Keys(u64);

impl Keys {
    fn below(&mut self, n: i64) -> i64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        i64::try_from(self.0 % u64::try_from(n).unwrap_or(1)).unwrap_or(0)
    }
}

/// The load, in SQL. Intent i: account acct-(i % accounts); one in five a
/// top-up; 60% paid (settled; top-ups credited), 30% expired, the rest
/// awaiting payment or confirming; two feed events each; one debit per
/// account paying an order from the balance.
const LOAD: &[&str] = &[
    // The webhook trigger would enrol a delivery per event: not read here.
    "ALTER TABLE outbox DISABLE TRIGGER outbox_enrol_webhook",
    "INSERT INTO intents (id, kind, reference, account, asset, network, address, decimals, \
       amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, status, \
       amount_final, amount_short, paid_at, updated_at, reason_code) \
     SELECT i, CASE WHEN i % 5 = 0 THEN 'topup' ELSE 'order' END, 'ref-' || i, \
       'acct-' || (i % $accounts), 'USDT', 'tron', 'T' || lpad(CAST(i AS TEXT), 33, '0'), 6, \
       100000000, 10000, '1', 'fixed', 1700000000000 + i, 1700000000000 + i, 1700000900000 + i, \
       CASE WHEN i % 10 < 6 THEN 'paid' WHEN i % 10 < 9 THEN 'expired' \
            WHEN i % 2 = 0 THEN 'awaiting_payment' ELSE 'confirming' END, \
       CASE WHEN i % 10 < 6 THEN 100000000 ELSE 0 END, \
       CASE WHEN i % 10 < 6 THEN 0 ELSE 100000000 END, \
       CASE WHEN i % 10 < 6 THEN 1700000600000 + i END, 1700000600000 + i, \
       CASE WHEN i % 10 < 6 THEN 'paid' WHEN i % 10 < 9 THEN 'expired_unpaid' \
            ELSE 'awaiting_payment' END \
     FROM generate_series(1, $intents) AS i",
    "SELECT setval('intents_id_seq', $intents)",
    "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at, via) \
     SELECT kind, reference, id, account, usd_cents, paid_at, 'chain' FROM intents \
     WHERE status = 'paid'",
    "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo) \
     SELECT account, usd_cents, 'topup_credit', 'topup:' || id, id, paid_at, '' FROM intents \
     WHERE status = 'paid' AND kind = 'topup'",
    "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo) \
     SELECT 'acct-' || a, -500, 'debit', 'debit:acct-' || a, NULL, 1700001000000 + a, '' \
     FROM generate_series(0, $accounts - 1) AS a",
    "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at, via, debit_key) \
     SELECT 'order', 'balance-order-' || a, NULL, 'acct-' || a, 500, 1700001000000 + a, 'balance', \
       'debit:acct-' || a FROM generate_series(0, $accounts - 1) AS a",
    "INSERT INTO outbox (seq, topic, intent_id, kind, reference, payload, created_at) \
     SELECT 2 * i - 1 + e, 'intent.status', i, CASE WHEN i % 5 = 0 THEN 'topup' ELSE 'order' END, \
       'ref-' || i, '{\"event\":\"intent.status\",\"intent_id\":' || i || '}', 1700000000000 + i \
     FROM generate_series(1, $intents) AS i, generate_series(0, 1) AS e",
    "SELECT setval('outbox_seq', 2 * $intents + 1)",
    // The view as it was before migration 0019, for comparison: grouped by
    // reference alone, so a read by account aggregated every intent first.
    "CREATE VIEW bench_payment_status_before_0019 AS \
     WITH per_reference AS ( \
         SELECT kind, reference, MAX(id) AS latest_id, COUNT(*) AS intent_count \
         FROM intents GROUP BY kind, reference) \
     SELECT r.kind, r.reference, COALESCE(s.account, li.account) AS account, \
            CASE WHEN s.kind IS NULL THEN li.status WHEN s.reversed_at IS NOT NULL THEN 'reversed' \
                 ELSE 'paid' END AS payment_status, s.intent_id AS paid_intent_id, r.intent_count \
     FROM per_reference r JOIN intents li ON li.id = r.latest_id \
     LEFT JOIN settlements s ON s.kind = r.kind AND s.reference = r.reference",
    "ANALYZE",
];

struct Read {
    name: &'static str,
    sql: &'static str,
    /// What the one parameter is drawn from.
    key: Key,
}

#[derive(Clone, Copy)]
enum Key {
    Reference,
    Account,
    IntentId,
    Cursor,
}

const READS: &[Read] = &[
    Read {
        name: "payment status by reference",
        sql: "SELECT * FROM paywatch_payment_status WHERE kind = 'order' AND reference = $1",
        key: Key::Reference,
    },
    Read {
        name: "payment status by account",
        sql: "SELECT * FROM paywatch_payment_status WHERE account = $1",
        key: Key::Account,
    },
    Read {
        name: "  the same, view before 0019",
        sql: "SELECT * FROM bench_payment_status_before_0019 WHERE account = $1",
        key: Key::Account,
    },
    Read {
        name: "intent by id",
        sql: "SELECT * FROM paywatch_intents WHERE intent_id = CAST($1 AS BIGINT)",
        key: Key::IntentId,
    },
    Read {
        name: "intents by reference",
        sql: "SELECT * FROM paywatch_intents WHERE kind = 'order' AND reference = $1",
        key: Key::Reference,
    },
    Read {
        name: "transfers of an intent",
        sql: "SELECT * FROM paywatch_intent_transfers WHERE intent_id = CAST($1 AS BIGINT)",
        key: Key::IntentId,
    },
    Read {
        name: "feed page (100 after a cursor)",
        sql: "SELECT * FROM paywatch_events WHERE cursor > CAST($1 AS BIGINT) \
              ORDER BY cursor LIMIT 100",
        key: Key::Cursor,
    },
    Read {
        name: "balance",
        sql: "SELECT * FROM paywatch_balances WHERE account = $1",
        key: Key::Account,
    },
    Read {
        name: "ledger page",
        sql: "SELECT * FROM paywatch_ledger WHERE account = $1 AND entry_id > 0 \
              ORDER BY entry_id LIMIT 100",
        key: Key::Account,
    },
];

fn percentile(sorted: &[Duration], per_mille: usize) -> Duration {
    let i = (sorted.len() * per_mille / 1000).min(sorted.len() - 1);
    sorted[i]
}

async fn time_read(pool: &PgPool, r: &Read, a: &Args, keys: &mut Keys) -> anyhow::Result<()> {
    let accounts = a.intents / 10;
    // The old view scans every intent: a few samples tell enough.
    let samples = if r.name.contains("before") {
        (a.samples / 50).max(10)
    } else {
        a.samples
    };
    let mut took = Vec::with_capacity(samples);
    let mut rows = 0usize;
    for _ in 0..samples {
        let key = match r.key {
            // Orders only: one intent in five is a top-up.
            Key::Reference => {
                let mut i = keys.below(a.intents) + 1;
                if i % 5 == 0 {
                    i += 1;
                }
                format!("ref-{i}")
            }
            Key::Account => format!("acct-{}", keys.below(accounts)),
            Key::IntentId => (keys.below(a.intents) + 1).to_string(),
            Key::Cursor => keys.below(2 * a.intents).to_string(),
        };
        let start = Instant::now();
        rows += sqlx::query(r.sql).bind(key).fetch_all(pool).await?.len();
        took.push(start.elapsed());
    }
    took.sort();
    println!(
        "{:<32} p50 {:>6} µs   p99 {:>6} µs   ({} rows a read on average)",
        r.name,
        percentile(&took, 500).as_micros(),
        percentile(&took, 990).as_micros(),
        rows / samples
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let admin = std::env::var("PAYWATCH_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned());
    let name = format!("pwbench_reads_{}", std::process::id());
    let root = PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{admin}/postgres"))
        .await
        .with_context(|| format!("PostgreSQL at {admin}"))?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&root)
        .await?;
    let url = format!("{admin}/{name}");
    let store = Store::connect(&url).await?;
    store.migrate().await?;
    store.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await?;
    let accounts = (a.intents / 10).to_string();
    let intents = a.intents.to_string();
    let started = Instant::now();
    for step in LOAD {
        let sql = step
            .replace("$accounts", &accounts)
            .replace("$intents", &intents);
        sqlx::query(&sql)
            .execute(&pool)
            .await
            .with_context(|| format!("loading: {sql}"))?;
    }
    println!(
        "loaded {} intents, {} accounts, {} feed events in {} s (PostgreSQL, database {name})",
        a.intents,
        accounts,
        2 * a.intents,
        started.elapsed().as_secs()
    );
    println!("{} samples a read, one connection, random keys:", a.samples);
    let mut keys = Keys(0x9e37_79b9_7f4a_7c15);
    for r in READS {
        time_read(&pool, r, &a, &mut keys).await?;
    }
    pool.close().await;
    if !a.keep {
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&root)
            .await?;
    }
    Ok(())
}

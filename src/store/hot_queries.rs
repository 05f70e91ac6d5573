//! The queries a long-running install runs all the time, each with the
//! index made for it (issue 21, found 5), and a synthetic history to run
//! them over (PostgreSQL). Shared by the index-use test, which checks each
//! is planned on its index, and the year-of-data benchmark
//! (`examples/year_of_data.rs`), which times them: the queries are the
//! store's own, built by the same functions.

use super::{blocks, cases, dormancy, finality, intents, metrics_read, overview, Dialect};

/// One hot query: what it is for, its SQL, its values (integers when they
/// parse), and the indexes its plan must use.
#[derive(Debug, Clone)]
pub struct HotQuery {
    pub what: &'static str,
    pub sql: String,
    pub binds: Vec<String>,
    pub indexes: &'static [&'static str],
}

/// A support search: what it is for, its SQL and values, its indexes.
type Search = (
    &'static str,
    (String, Vec<&'static str>),
    &'static [&'static str],
);

/// A history of `rows` settled intents on Bitcoin, each with its address
/// (`bc1q<n>`), one transfer (`tx<n>`) in block `b<n>` connected at `n`
/// seconds, reference `order-<n>` and account `acct-<n % 5000>`; one in
/// 5,000 in review and one in 4,999 confirming. Statements in order, ending
/// with ANALYZE.
pub fn history_sql(rows: i64) -> Vec<String> {
    vec![
        format!(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
             SELECT 'bitcoin', 'b' || n, n, 'b' || (n - 1), n, n * 1000 \
             FROM generate_series(CAST(1 AS BIGINT), {rows}) n"
        ),
        format!(
            "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, \
             amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, \
             status, updated_at, view_token) \
             SELECT 'order', 'order-' || n, 'acct-' || (n % 5000), 'BTC', 'bitcoin', 'bc1q' || n, 8, \
             100000 + n % 100, 5000, '50000', 'fixed', n, n, n + 1, \
             CASE WHEN n % 5000 = 0 THEN 'needs_review' WHEN n % 4999 = 0 THEN 'confirming' \
                  ELSE 'paid' END, n, 'view-' || n \
             FROM generate_series(CAST(1 AS BIGINT), {rows}) n"
        ),
        format!(
            "INSERT INTO addresses (network, address, origin, added_at, issued_at, intent_id) \
             SELECT 'bitcoin', 'bc1q' || n, 'pool', n, n, n FROM generate_series(CAST(1 AS BIGINT), {rows}) n"
        ),
        format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, amount, tx_status, first_seen_at) \
             SELECT 'bitcoin', 'BTC', 'tx' || n, 0, 'b' || n, n, n, 'bc1q' || n, 100000 + n % 100, \
             'success', n FROM generate_series(CAST(1 AS BIGINT), {rows}) n"
        ),
        "ANALYZE".to_owned(),
    ]
}

/// The hot queries, with values that find rows in [`history_sql`]`(rows)`.
pub fn hot_queries(rows: i64) -> Vec<HotQuery> {
    let text = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let one = rows / 2;
    let mut hot = vec![
        HotQuery {
            what: "blocks connected since an address was issued",
            sql: blocks::BLOCKS_CONNECTED_SINCE.to_owned(),
            binds: vec![
                "bitcoin".into(),
                ((rows - 10) * 1000).to_string(),
                "100".into(),
            ],
            indexes: &["blocks_by_connected_at"],
        },
        HotQuery {
            what: "intents queued on a rise of the final height",
            sql: finality::queue_money_open_sql(Dialect::Postgres),
            binds: text(&["bitcoin"]),
            indexes: &["intents_money_open"],
        },
        HotQuery {
            what: "a transfer's candidate intents",
            sql: cases::candidate_intents_sql(),
            binds: vec![one.to_string(), "10".into()],
            indexes: &["intents_open_by_amount"],
        },
        HotQuery {
            what: "the review queue",
            sql: cases::review_queue_sql(),
            binds: text(&["50"]),
            indexes: &["intents_needing_review"],
        },
        HotQuery {
            what: "addresses issued since the watcher's last look",
            sql: dormancy::LIVE_ADDRESSES_SINCE.to_owned(),
            binds: vec!["bitcoin".into(), (rows - 10).to_string()],
            indexes: &["addresses_live"],
        },
        HotQuery {
            what: "a page of the dormant addresses' sweep",
            sql: dormancy::DORMANT_PAGE.to_owned(),
            binds: text(&["bitcoin", "0", "100"]),
            indexes: &["addresses_dormant"],
        },
        HotQuery {
            what: "the intent a customer's checkout page opens",
            sql: intents::INTENT_BY_VIEW_TOKEN.to_owned(),
            binds: text(&["view-4242"]),
            indexes: &["intents_by_view_token"],
        },
        HotQuery {
            what: "the console overview's intents of the week",
            sql: overview::INTENTS_SINCE.to_owned(),
            binds: vec![(rows - 100).to_string(), (rows - 10).to_string()],
            indexes: &["intents_by_created"],
        },
    ];
    let leak = |v: Vec<String>| -> &'static [String] { Vec::leak(v) };
    // Searched for as support pastes them: two spellings of one address.
    let address = format!("bc1q{one}");
    let addresses = leak(vec![address.clone(), address.to_uppercase()]);
    let txids = leak(vec![format!("tx{one}")]);
    let reference = Box::leak(format!("order-{one}").into_boxed_str());
    let account = Box::leak(format!("acct-{}", one % 5000).into_boxed_str());
    let searches: [Search; 4] = [
        (
            "support's search by reference alone",
            cases::find_intents_sql(Some(reference), None, &[], &[]),
            &["intents_by_reference_alone"],
        ),
        (
            "support's search by account",
            cases::find_intents_sql(None, Some(account), &[], &[]),
            &["intents_by_account"],
        ),
        (
            "support's search by address alone",
            cases::find_intents_sql(None, None, addresses, &[]),
            &["intents_by_address", "intents_by_twin"],
        ),
        (
            "support's search by txid",
            cases::find_intents_sql(None, None, &[], txids),
            &["transfers_by_txid"],
        ),
    ];
    for (what, (sql, mut binds), indexes) in searches {
        // A search's values, then its limit.
        binds.push("20");
        hot.push(HotQuery {
            what,
            sql,
            binds: text(&binds),
            indexes,
        });
    }
    for (status, sql) in metrics_read::open_status_sql(Dialect::Postgres) {
        hot.push(HotQuery {
            what: match status {
                "awaiting_payment" => "a metrics scrape: intents awaiting payment",
                "confirming" => "a metrics scrape: intents confirming",
                _ => "a metrics scrape: intents in review",
            },
            sql,
            binds: Vec::new(),
            indexes: match status {
                "awaiting_payment" => &["intents_expiring"],
                "confirming" => &["intents_money_open"],
                _ => &["intents_needing_review"],
            },
        });
    }
    hot
}

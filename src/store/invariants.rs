//! The money rules, checked against what the database holds: after a crash,
//! a failover or a restore, and after every fault test. Each rule is one
//! query that lists what breaks it, so a violation names its rows.

use sqlx::Row;

use super::{Store, StoreError};

/// One broken rule, with the rows that break it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
}

/// What the ledger holds against what the settlements say it should.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerCheck {
    /// Top-up credits less reversals, in cents.
    pub ledger_topup_cents: i64,
    /// Settled top-ups whose money was not reversed, in cents.
    pub settled_topup_cents: i64,
    pub violations: Vec<Violation>,
}

/// Each rule: its name and a query whose rows (one `detail` text column)
/// break it.
const RULES: [(&str, &str); 4] = [
    (
        "one credit and at most one reversal per intent",
        "SELECT 'intent ' || CAST(intent_id AS TEXT) || ': ' || CAST(COUNT(*) AS TEXT) || ' ' \
         || entry_kind || ' entries' AS detail \
         FROM ledger_entries WHERE entry_kind IN ('topup_credit', 'reversal') \
         GROUP BY intent_id, entry_kind HAVING COUNT(*) > 1",
    ),
    (
        "a credit only for a settled top-up, of its amount",
        "SELECT 'ledger entry ' || CAST(l.id AS TEXT) || ' credits intent ' \
         || CAST(l.intent_id AS TEXT) || ' ' || CAST(l.usd_cents AS TEXT) || ' cents' AS detail \
         FROM ledger_entries l \
         LEFT JOIN intents i ON i.id = l.intent_id \
         LEFT JOIN settlements s ON s.intent_id = l.intent_id \
         WHERE l.entry_kind = 'topup_credit' \
           AND (i.id IS NULL OR i.kind <> 'topup' OR s.intent_id IS NULL \
                OR l.usd_cents <> i.usd_cents)",
    ),
    (
        "every settled top-up credited",
        "SELECT 'intent ' || CAST(s.intent_id AS TEXT) || ' settled ' || s.reference \
         || ' with no credit' AS detail \
         FROM settlements s JOIN intents i ON i.id = s.intent_id \
         WHERE i.kind = 'topup' AND NOT EXISTS (SELECT 1 FROM ledger_entries l \
           WHERE l.intent_id = s.intent_id AND l.entry_kind = 'topup_credit')",
    ),
    (
        "a reversal only of a credit, of its amount",
        "SELECT 'ledger entry ' || CAST(r.id AS TEXT) || ' reverses intent ' \
         || CAST(r.intent_id AS TEXT) || ' by ' || CAST(r.usd_cents AS TEXT) || ' cents' AS detail \
         FROM ledger_entries r \
         WHERE r.entry_kind = 'reversal' AND NOT EXISTS (SELECT 1 FROM ledger_entries c \
           WHERE c.intent_id = r.intent_id AND c.entry_kind = 'topup_credit' \
             AND c.usd_cents = -r.usd_cents)",
    ),
];

impl Store {
    /// Checks the ledger against the settlements: no top-up credited twice,
    /// none credited unsettled, none settled uncredited, no reversal without
    /// its credit; and the sums.
    pub async fn check_invariants(&self) -> Result<LedgerCheck, StoreError> {
        let mut violations = Vec::new();
        for (rule, sql) in RULES {
            for row in sqlx::query(sql).fetch_all(self.pool()).await? {
                violations.push(Violation {
                    rule,
                    detail: row.try_get("detail")?,
                });
            }
        }
        let ledger: i64 = sqlx::query(
            "SELECT CAST(COALESCE(SUM(usd_cents), 0) AS BIGINT) AS n FROM ledger_entries \
             WHERE entry_kind IN ('topup_credit', 'reversal')",
        )
        .fetch_one(self.pool())
        .await?
        .try_get("n")?;
        let settled: i64 = sqlx::query(
            "SELECT CAST(COALESCE(SUM(i.usd_cents), 0) AS BIGINT) AS n FROM settlements s \
             JOIN intents i ON i.id = s.intent_id \
             WHERE i.kind = 'topup' AND NOT EXISTS (SELECT 1 FROM ledger_entries r \
               WHERE r.intent_id = s.intent_id AND r.entry_kind = 'reversal')",
        )
        .fetch_one(self.pool())
        .await?
        .try_get("n")?;
        if ledger != settled {
            violations.push(Violation {
                rule: "the ledger's top-up sum equals the settled top-ups'",
                detail: format!("ledger {ledger} cents, settled top-ups {settled} cents"),
            });
        }
        Ok(LedgerCheck {
            ledger_topup_cents: ledger,
            settled_topup_cents: settled,
            violations,
        })
    }
}

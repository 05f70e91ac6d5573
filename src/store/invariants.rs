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
const RULES: [(&str, &str); 11] = [
    (
        "a top-up credited at most once net, and only while it stands",
        "SELECT 'intent ' || CAST(i.id AS TEXT) || ': credits less reversals come to ' \
         || CAST(l.net AS TEXT) || ' cents of ' || CAST(i.usd_cents AS TEXT) \
         || CASE WHEN s.intent_id IS NULL THEN ', unsettled' \
                 WHEN s.reversed_at IS NOT NULL THEN ', reversed' ELSE ', settled' END AS detail \
         FROM (SELECT intent_id, SUM(usd_cents) AS net FROM ledger_entries \
               WHERE entry_kind IN ('topup_credit', 'reversal') GROUP BY intent_id) l \
         JOIN intents i ON i.id = l.intent_id \
         LEFT JOIN settlements s ON s.intent_id = i.id \
         WHERE NOT ((s.intent_id IS NOT NULL AND s.reversed_at IS NULL AND l.net = i.usd_cents) \
                 OR ((s.intent_id IS NULL OR s.reversed_at IS NOT NULL) AND l.net = 0))",
    ),
    (
        "a credit only for a settled top-up, of its amount",
        "SELECT 'ledger entry ' || CAST(l.id AS TEXT) || ' credits intent ' \
         || CAST(l.intent_id AS TEXT) || ' ' || CAST(l.usd_cents AS TEXT) || ' cents' AS detail \
         FROM ledger_entries l \
         LEFT JOIN intents i ON i.id = l.intent_id \
         LEFT JOIN settlements s ON s.intent_id = l.intent_id \
         WHERE l.entry_kind = 'topup_credit' \
           AND (i.id IS NULL OR i.kind <> 'topup' OR l.usd_cents <> i.usd_cents \
                OR (s.intent_id IS NULL AND NOT EXISTS (SELECT 1 FROM settlements_superseded x \
                    WHERE x.intent_id = l.intent_id)))",
    ),
    (
        "every standing settled top-up credited",
        "SELECT 'intent ' || CAST(s.intent_id AS TEXT) || ' settled ' || s.reference \
         || ' with no credit' AS detail \
         FROM settlements s JOIN intents i ON i.id = s.intent_id \
         WHERE i.kind = 'topup' AND s.reversed_at IS NULL AND NOT EXISTS (SELECT 1 FROM ledger_entries l \
           WHERE l.intent_id = s.intent_id AND l.entry_kind = 'topup_credit')",
    ),
    (
        "a reversal only of a credit, of its amount",
        "SELECT 'ledger entry ' || CAST(r.id AS TEXT) || ' reverses intent ' \
         || CAST(r.intent_id AS TEXT) || ' by ' || CAST(r.usd_cents AS TEXT) || ' cents' AS detail \
         FROM ledger_entries r LEFT JOIN intents i ON i.id = r.intent_id \
         WHERE r.entry_kind = 'reversal' AND (i.id IS NULL OR r.usd_cents <> -i.usd_cents \
           OR NOT EXISTS (SELECT 1 FROM ledger_entries c \
               WHERE c.intent_id = r.intent_id AND c.entry_kind = 'topup_credit'))",
    ),
    (
        "an order paid from the balance has its debit, of its amount",
        "SELECT 'order ' || s.reference || ' paid from the balance of ' || s.account \
         || ' without a debit of ' || CAST(s.usd_cents AS TEXT) || ' cents' AS detail \
         FROM settlements s WHERE s.via = 'balance' AND NOT EXISTS (SELECT 1 FROM ledger_entries d \
           WHERE d.entry_key = s.debit_key AND d.entry_kind = 'debit' AND d.account = s.account \
             AND d.usd_cents = -s.usd_cents)",
    ),
    // An accepted excess stands only on a settlement by the chain, the
    // payer's own money: one support made since (after a reorg reversed
    // that) carries none, so its credit is net nothing there.
    (
        "an overpayment's excess credited at most once net, and only while its money stands",
        "SELECT 'intent ' || CAST(i.id AS TEXT) || ': excess credits less their taking back come to ' \
         || CAST(l.net AS TEXT) || ' cents of ' || CAST(l.credit AS TEXT) \
         || CASE WHEN s.intent_id IS NULL THEN ', unsettled' \
                 WHEN s.reversed_at IS NOT NULL THEN ', reversed' ELSE ', settled' END AS detail \
         FROM (SELECT intent_id, SUM(usd_cents) AS net, \
                      MAX(CASE WHEN usd_cents > 0 THEN usd_cents ELSE 0 END) AS credit \
               FROM ledger_entries WHERE entry_kind = 'adjustment' AND intent_id IS NOT NULL \
               GROUP BY intent_id) l \
         JOIN intents i ON i.id = l.intent_id \
         LEFT JOIN settlements s ON s.intent_id = i.id \
         WHERE NOT ((s.intent_id IS NOT NULL AND s.reversed_at IS NULL \
                     AND (l.net = l.credit OR (l.net = 0 AND i.status = 'needs_review') \
                          OR (l.net = 0 AND s.via <> 'chain') \
                          OR (l.net = 0 AND EXISTS (SELECT 1 FROM decisions d \
                              WHERE d.intent_id = i.id AND d.at > s.settled_at \
                                AND d.action <> 'accept')))) \
                 OR ((s.intent_id IS NULL OR s.reversed_at IS NOT NULL) AND l.net = 0))",
    ),
    // Every payment accounted for: money final at an intent's address
    // stands under its settlement, was before support when it decided, or
    // has the intent in front of a person. An intent still open, or expired
    // with money still confirming, has not absorbed it; one waiting in the
    // reconcile queue has not been looked at yet. Re-mined copies count as
    // the payment they copy; tokens that are no method's asset are spam.
    // Support's settlements from before 0011 named neither payments nor a
    // row id: nothing on chain can undo them, and what they covered is
    // not known, so they cover what the address received. Dust under the
    // floor a settlement was made under, after it, is set aside (`DUST`).
    (
        "every final payment stands under a settlement, a decision made after it, or an open case",
        "SELECT 'transfer ' || CAST(t.id AS TEXT) || ' (' || t.txid || ':' || CAST(t.idx AS TEXT) \
         || ') to intent ' || CAST(i.id AS TEXT) || ', ' || i.status \
         || ', is final and stands under nothing' AS detail \
         FROM transfers t JOIN intents i ON i.network = t.network AND i.address = t.to_address \
         WHERE t.final_at IS NOT NULL AND t.orphaned_at IS NULL AND t.tx_status = 'success' \
           AND t.asset NOT LIKE 'token:%' \
           AND NOT DUST \
           AND i.status IN ('paid', 'resolved', 'expired') \
           AND NOT EXISTS (SELECT 1 FROM reconcile_queue q \
               WHERE q.network = i.network AND q.address = i.address) \
           AND NOT EXISTS (SELECT 1 FROM transfers e \
               WHERE e.network = t.network AND e.txid = t.txid AND e.idx = t.idx \
                 AND (e.id <= COALESCE(i.settled_through, -1) \
                      OR EXISTS (SELECT 1 FROM decisions d \
                          WHERE d.intent_id = i.id AND d.through >= e.id) \
                      OR (i.settled_through IS NULL AND EXISTS (SELECT 1 FROM settlements s \
                          WHERE s.intent_id = i.id AND s.via = 'support' \
                            AND s.decision_id IS NULL)))) \
           AND NOT (i.status = 'expired' AND EXISTS (SELECT 1 FROM transfers p \
               WHERE p.network = t.network AND p.to_address = t.to_address \
                 AND p.final_at IS NULL AND p.orphaned_at IS NULL AND p.tx_status = 'success'))",
    ),
    // A settlement by the chain stands on the intent's own payments, never
    // on money support has owed to someone else since (required for
    // refund, reassigned): a refunded duplicate must not hold it up once
    // the payment that paid it left the chain (issue 36, found 6). An
    // intent waiting in the reconcile queue has not been looked at since.
    (
        "a settlement by the chain stands on a payment nobody is owed back",
        "SELECT 'intent ' || CAST(i.id AS TEXT) || ' stands settled by the chain on ' \
         || 'no final payment but those required for refund or reassigned' AS detail \
         FROM settlements s JOIN intents i ON i.id = s.intent_id \
         WHERE s.via = 'chain' AND s.reversed_at IS NULL \
           AND NOT EXISTS (SELECT 1 FROM reconcile_queue q \
               WHERE q.network = i.network AND q.address = i.address) \
           AND NOT EXISTS (SELECT 1 FROM transfers t \
               WHERE t.network = i.network AND t.to_address = i.address AND t.asset = i.asset \
                 AND t.orphaned_at IS NULL AND t.tx_status = 'success' AND t.final_at IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM decision_payments dp \
                     JOIN decisions d ON d.id = dp.decision_id \
                     WHERE dp.claims = 1 AND dp.network = t.network AND dp.txid = t.txid \
                       AND dp.idx = t.idx AND d.intent_id = i.id \
                       AND d.action IN ('refund_required', 'reassign')))",
    ),
    // A refund reads `refunded` only while a final, successful row of one
    // of its transactions (the latest, or one recorded before it) pays its
    // destination on its network (issue 36): a reorg that took them out
    // queues the destination, and reconcile reads it `sent_unconfirmed`
    // again.
    (
        "a refund reads refunded only on a final transaction paying its destination",
        "SELECT 'intent ' || CAST(r.intent_id AS TEXT) || ': refund reads refunded, but no final \
         row of its transactions (the latest ' || COALESCE(r.txid, '(none)') || ') pays ' \
         || r.destination || ' on ' || COALESCE(r.network, '(no network)') AS detail \
         FROM refunds r \
         WHERE r.state = 'refunded' \
           AND NOT EXISTS (SELECT 1 FROM reconcile_queue q \
               WHERE q.network = r.network AND q.address = r.destination) \
           AND NOT EXISTS (SELECT 1 FROM transfers t \
               WHERE (t.txid = r.txid OR EXISTS (SELECT 1 FROM refund_transactions x \
                      WHERE x.intent_id = r.intent_id AND x.network = t.network \
                        AND x.txid = t.txid)) \
                 AND t.network = r.network AND t.to_address = r.destination \
                 AND t.orphaned_at IS NULL AND t.tx_status = 'success' \
                 AND (t.final_at IS NOT NULL OR t.block_height <= (SELECT c.final_height \
                      FROM chain_state c WHERE c.network = t.network)) \
                 AND t.block_hash <> 'mempool')",
    ),
    // What a settlement stands on is named (`settlement_payments`); money
    // support owes back (required for refund, or reassigned away from the
    // intent) is never among it. The writer names both in the decision's
    // own transaction.
    (
        "no payment owed back stands under a settlement",
        "SELECT 'intent ' || CAST(sp.intent_id AS TEXT) || ' stands settled on ' || sp.txid \
         || ':' || CAST(sp.idx AS TEXT) || ', which decision ' || CAST(d.id AS TEXT) || ' (' \
         || d.action || ') gave away' AS detail \
         FROM settlement_payments sp \
         JOIN settlements s ON s.intent_id = sp.intent_id AND s.reversed_at IS NULL \
         JOIN decision_payments dp ON dp.network = sp.network AND dp.txid = sp.txid \
           AND dp.idx = sp.idx AND dp.claims = 1 \
         JOIN decisions d ON d.id = dp.decision_id \
         WHERE d.action = 'refund_required' \
            OR (d.action = 'reassign' AND d.intent_id = sp.intent_id)",
    ),
    (
        "credits back of a debit never exceed it, and go to its account",
        "SELECT 'debit ' || c.returns_entry || ' of ' \
         || COALESCE(CAST(-d.usd_cents AS TEXT), 'nothing') || ' cents has ' \
         || CAST(c.n AS TEXT) || ' cents credited back' AS detail \
         FROM (SELECT returns_entry, MIN(account) AS account, MAX(account) AS other, \
                      SUM(usd_cents) AS n FROM ledger_entries \
               WHERE returns_entry IS NOT NULL GROUP BY returns_entry) c \
         LEFT JOIN ledger_entries d ON d.entry_key = c.returns_entry AND d.entry_kind = 'debit' \
         WHERE d.id IS NULL OR c.n > -d.usd_cents OR c.account <> d.account \
            OR c.other <> d.account",
    ),
];

impl Store {
    /// Checks the ledger against the settlements: no top-up credited twice
    /// net, none credited unsettled or after its reversal, none standing
    /// uncredited, no reversal without its credit, no order paid from the
    /// balance without its debit, no excess credited twice or standing
    /// without its payment, no final payment absorbed; and the sums.
    pub async fn check_invariants(&self) -> Result<LedgerCheck, StoreError> {
        let mut violations = Vec::new();
        let dust = super::spam::dust_condition(self.dialect());
        for (rule, sql) in RULES {
            let sql = sql.replace("DUST", &dust);
            for row in sqlx::query(&sql).fetch_all(self.pool()).await? {
                violations.push(Violation {
                    rule,
                    detail: row.try_get("detail")?,
                });
            }
        }
        violations.extend(self.settled_by_own_terms().await?);
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
             WHERE i.kind = 'topup' AND s.reversed_at IS NULL",
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

impl Store {
    /// A settlement by the chain stands on named payments of the intent's
    /// own method that reach what was due under the tolerance it was made
    /// under, whatever the setting is now (issue 36, found 1). Summed here,
    /// not in SQL: amounts in wei pass what SQLite's integers hold.
    /// Settlements made before terms or names were kept are not judged.
    async fn settled_by_own_terms(&self) -> Result<Vec<Violation>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.intent_id, CAST(i.amount_due AS TEXT) AS due, s.tolerance_bp, \
             s.tolerance_max, CAST(sp.amount AS TEXT) AS amount \
             FROM settlements s JOIN intents i ON i.id = s.intent_id \
             JOIN settlement_payments sp ON sp.intent_id = s.intent_id \
               AND sp.network = i.network AND sp.asset = i.asset \
             WHERE s.via = 'chain' AND s.reversed_at IS NULL AND s.tolerance_bp IS NOT NULL \
             ORDER BY s.intent_id",
        )
        .fetch_all(self.pool())
        .await?;
        let mut named: std::collections::BTreeMap<i64, (u128, u128)> = Default::default();
        for r in rows {
            let id: i64 = r.try_get("intent_id")?;
            let amount = parse_units(r.try_get("amount")?, "settlement_payments.amount")?;
            if let Some(entry) = named.get_mut(&id) {
                entry.1 = entry.1.saturating_add(amount);
                continue;
            }
            let due = parse_units(r.try_get("due")?, "intents.amount_due")?;
            let basis_points: i64 = r.try_get("tolerance_bp")?;
            let max: Option<String> = r.try_get("tolerance_max")?;
            let terms = crate::reconcile::Tolerance {
                basis_points: u32::try_from(basis_points).unwrap_or(u32::MAX),
                max: max
                    .map(|m| parse_units(m, "settlements.tolerance_max"))
                    .transpose()?
                    .map(paywatch_core::Amount),
            };
            named.insert(
                id,
                (terms.least_accepted(paywatch_core::Amount(due)), amount),
            );
        }
        Ok(named
            .into_iter()
            .filter(|(_, (least, standing))| standing < least)
            .map(|(id, (least, standing))| Violation {
                rule: "a settlement by the chain stands on named payments reaching its own terms",
                detail: format!(
                    "intent {id} stands settled on {standing} base units named, under the \
                     {least} its own tolerance asks"
                ),
            })
            .collect())
    }
}

fn parse_units(text: String, what: &str) -> Result<u128, StoreError> {
    text.trim()
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("{what}: {text:?} is not base units")))
}

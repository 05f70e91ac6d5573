//! The statements behind the accounting export: settlements in a time
//! range, a page at a time in the order of `settlements_by_time`, each with
//! what an accountant needs beside it.

use sqlx::Row;

use super::{Dialect, Store, StoreError};

/// One settlement as the export writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementLine {
    pub settled_at_ms: i64,
    pub kind: String,
    pub reference: String,
    pub account: String,
    /// `chain`, `support` or `balance`.
    pub via: String,
    pub intent_id: Option<i64>,
    pub asset: Option<String>,
    pub network: Option<String>,
    pub decimals: Option<i64>,
    /// Final money received, in base units (none from the balance).
    pub amount_final: Option<String>,
    pub rate_usd: Option<String>,
    pub rate_source: Option<String>,
    pub usd_cents: i64,
    /// `txid@height` of each payment to the intent's address still on the
    /// chain, in the order recorded, `;`-separated.
    pub transactions: Option<String>,
    pub decision_id: Option<i64>,
    pub decision_action: Option<String>,
    pub decision_actor: Option<String>,
    pub debit_key: Option<String>,
    pub reversed_at_ms: Option<i64>,
    /// Set on a reversed settlement whose reference other money paid
    /// since: it no longer stands, but its credit and reversal are in the
    /// ledger, so the books show it.
    pub superseded_at_ms: Option<i64>,
}

/// Where a page ended: the next starts after it.
pub type ExportKey = (i64, String, String);

impl Store {
    /// Up to `limit` settlements with `from_ms <= settled_at < to_ms`, after
    /// `after` in (time, kind, reference) order: standing ones and those a
    /// later settlement of the same reference superseded. A reference is
    /// settled again only after its reversal, so its rows never share a
    /// settled_at and the key stays unique.
    pub async fn settlements_page(
        &self,
        from_ms: i64,
        to_ms: i64,
        after: Option<&ExportKey>,
        limit: i64,
    ) -> Result<Vec<SettlementLine>, StoreError> {
        let joined = match self.dialect() {
            Dialect::Postgres => {
                "string_agg(t.txid || '@' || CAST(t.block_height AS TEXT), ';' ORDER BY t.id)"
            }
            Dialect::Sqlite => "group_concat(t.txid || '@' || t.block_height, ';')",
        };
        let (start, kind, reference) = match after {
            Some((at, kind, reference)) => (*at, kind.as_str(), reference.as_str()),
            None => (from_ms, "", ""),
        };
        let sql = format!(
            "SELECT s.settled_at, s.kind, s.reference, s.account, s.via, s.intent_id, \
                    i.asset, i.network, i.decimals, CAST(i.amount_final AS TEXT) AS amount_final, \
                    i.rate_usd, i.rate_source, s.usd_cents, \
                    (SELECT {joined} FROM transfers t \
                      WHERE t.network = i.network AND t.to_address = i.address \
                        AND t.orphaned_at IS NULL AND t.tx_status = 'success' \
                        AND t.block_hash <> '{mempool}') AS transactions, \
                    s.decision_id, d.action AS decision_action, a.actor AS decision_actor, \
                    s.debit_key, s.reversed_at, s.superseded_at \
             FROM (SELECT kind, reference, intent_id, account, via, usd_cents, settled_at, \
                          decision_id, debit_key, reversed_at, NULL AS superseded_at \
                     FROM settlements \
                   UNION ALL \
                   SELECT kind, reference, intent_id, account, via, usd_cents, settled_at, \
                          decision_id, debit_key, reversed_at, superseded_at \
                     FROM settlements_superseded) s \
             LEFT JOIN intents i ON i.id = s.intent_id \
             LEFT JOIN decisions d ON d.id = s.decision_id \
             LEFT JOIN audit_log a ON a.id = d.audit_id \
             WHERE s.settled_at < $1 AND s.settled_at >= $2 \
               AND (s.settled_at > $2 OR s.kind > $3 OR (s.kind = $3 AND s.reference > $4) \
                    OR $5 = 0) \
             ORDER BY s.settled_at, s.kind, s.reference LIMIT $6",
            mempool = super::MEMPOOL_BLOCK,
        );
        let rows = sqlx::query(&sql)
            .bind(to_ms)
            .bind(start)
            .bind(kind)
            .bind(reference)
            .bind(i64::from(after.is_some()))
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(SettlementLine {
                    settled_at_ms: r.try_get("settled_at")?,
                    kind: r.try_get("kind")?,
                    reference: r.try_get("reference")?,
                    account: r.try_get("account")?,
                    via: r.try_get("via")?,
                    intent_id: r.try_get("intent_id")?,
                    asset: r.try_get("asset")?,
                    network: r.try_get("network")?,
                    decimals: r.try_get("decimals")?,
                    amount_final: r.try_get("amount_final")?,
                    rate_usd: r.try_get("rate_usd")?,
                    rate_source: r.try_get("rate_source")?,
                    usd_cents: r.try_get("usd_cents")?,
                    transactions: r.try_get("transactions")?,
                    decision_id: r.try_get("decision_id")?,
                    decision_action: r.try_get("decision_action")?,
                    decision_actor: r.try_get("decision_actor")?,
                    debit_key: r.try_get("debit_key")?,
                    reversed_at_ms: r.try_get("reversed_at")?,
                    superseded_at_ms: r.try_get("superseded_at")?,
                })
            })
            .collect()
    }
}

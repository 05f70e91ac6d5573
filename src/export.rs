//! The accounting export (issue 19): every settlement in a time range, as
//! CSV or JSON lines, for a merchant to reconcile paywatch against their
//! books. Written a page at a time, so a year of settlements never sits in
//! memory. Amounts are in base units and, beside them, in coin (decimal
//! text, never a float); USD in cents and in dollars.

use std::io::Write;

use paywatch_core::Amount;
use serde_json::json;

use crate::store::{ExportKey, SettlementLine, Store, StoreError};

/// Rows a page: one short query each.
const PAGE: i64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    JsonLines,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
    #[error("--from ({from} ms) must be before --to ({to} ms)")]
    EmptyRange { from: i64, to: i64 },
}

/// The CSV columns, in order; JSON lines use the same names.
pub const COLUMNS: [&str; 23] = [
    "settled_at_ms",
    "settled_at",
    "kind",
    "reference",
    "account",
    "settled_by",
    "intent_id",
    "asset",
    "network",
    "amount_base_units",
    "amount",
    "rate_usd",
    "rate_source",
    "usd_cents",
    "usd",
    "transactions",
    "decision_id",
    "decision_action",
    "decision_actor",
    "debit_key",
    "reversed",
    "reversed_at_ms",
    "superseded_at_ms",
];

/// Writes every settlement with `from_ms <= settled_at < to_ms` to `out`,
/// oldest first; returns how many.
pub async fn write_settlements(
    store: &Store,
    from_ms: i64,
    to_ms: i64,
    format: Format,
    out: &mut impl Write,
) -> Result<u64, ExportError> {
    let mut pages = Pages::new(from_ms, to_ms, format)?;
    let mut written = 0;
    while let Some((bytes, rows)) = pages.next(store).await? {
        out.write_all(&bytes)?;
        written += rows;
    }
    out.flush()?;
    Ok(written)
}

/// The export a page at a time, rendered: for a file, or an HTTP body sent
/// as it is read.
#[derive(Debug)]
pub struct Pages {
    from_ms: i64,
    to_ms: i64,
    format: Format,
    after: Option<ExportKey>,
    started: bool,
    done: bool,
}

impl Pages {
    pub fn new(from_ms: i64, to_ms: i64, format: Format) -> Result<Pages, ExportError> {
        if from_ms >= to_ms {
            return Err(ExportError::EmptyRange {
                from: from_ms,
                to: to_ms,
            });
        }
        Ok(Pages {
            from_ms,
            to_ms,
            format,
            after: None,
            started: false,
            done: false,
        })
    }

    /// The next page's bytes (the CSV header leads the first) and rows;
    /// `None` once all are written.
    pub async fn next(&mut self, store: &Store) -> Result<Option<(Vec<u8>, u64)>, ExportError> {
        if self.done {
            return Ok(None);
        }
        let mut out = Vec::new();
        if !self.started && self.format == Format::Csv {
            out.extend_from_slice(COLUMNS.join(",").as_bytes());
            out.push(b'\n');
        }
        self.started = true;
        let page = store
            .settlements_page(self.from_ms, self.to_ms, self.after.as_ref(), PAGE)
            .await?;
        for line in &page {
            let fields = fields(line);
            let text = match self.format {
                Format::Csv => fields
                    .iter()
                    .map(|f| csv_cell(f))
                    .collect::<Vec<_>>()
                    .join(","),
                Format::JsonLines => {
                    let object: serde_json::Map<String, serde_json::Value> = COLUMNS
                        .iter()
                        .zip(fields)
                        .map(|(k, v)| ((*k).to_owned(), json!(v)))
                        .collect();
                    serde_json::Value::Object(object).to_string()
                }
            };
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => {
                self.after = Some((
                    last.settled_at_ms,
                    last.kind.clone(),
                    last.reference.clone(),
                ));
            }
            _ => self.done = true,
        }
        Ok(Some((out, page.len() as u64)))
    }
}

/// One settlement's values, in [`COLUMNS`] order, empty where none.
fn fields(l: &SettlementLine) -> Vec<String> {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let int = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let coin = match (&l.amount_final, l.decimals) {
        (Some(base), Some(decimals)) => base
            .parse::<u128>()
            .ok()
            .zip(u32::try_from(decimals).ok())
            .map(|(v, d)| Amount(v).to_decimal_string(d))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let cents = l.usd_cents.unsigned_abs();
    let usd = format!(
        "{}{}.{:02}",
        if l.usd_cents < 0 { "-" } else { "" },
        cents / 100,
        cents % 100
    );
    vec![
        l.settled_at_ms.to_string(),
        iso_utc(l.settled_at_ms),
        l.kind.clone(),
        l.reference.clone(),
        l.account.clone(),
        l.via.clone(),
        int(l.intent_id),
        text(&l.asset),
        text(&l.network),
        text(&l.amount_final),
        coin,
        text(&l.rate_usd),
        text(&l.rate_source),
        l.usd_cents.to_string(),
        usd,
        text(&l.transactions),
        int(l.decision_id),
        text(&l.decision_action),
        text(&l.decision_actor),
        text(&l.debit_key),
        l.reversed_at_ms.is_some().to_string(),
        int(l.reversed_at_ms),
        int(l.superseded_at_ms),
    ]
}

/// RFC 4180: quoted when it holds a comma, a quote or a line break, and a
/// leading `=`, `+`, `-` or `@` is prefixed with `'` so a spreadsheet never
/// runs a reference or an account as a formula.
fn csv_cell(value: &str) -> String {
    let negative_number = value
        .strip_prefix('-')
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'));
    let value =
        if value.starts_with(['=', '+', '@']) || (value.starts_with('-') && !negative_number) {
            format!("'{value}")
        } else {
            value.to_owned()
        };
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value
    }
}

/// `2026-12-05T01:00:00.000Z`.
fn iso_utc(ms: i64) -> String {
    let text = crate::console::utc(ms);
    // "2026-12-05 01:00:00 UTC" → ISO 8601 with milliseconds.
    let (date, rest) = text.split_once(' ').unwrap_or((&text, ""));
    let time = rest.trim_end_matches(" UTC");
    format!("{date}T{time}.{:03}Z", ms.rem_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(csv_cell("A-1"), "A-1");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_cell("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(csv_cell("-12.50"), "-12.50");
        assert_eq!(csv_cell("-cmd"), "'-cmd");
        assert_eq!(iso_utc(1_796_432_400_123), "2026-12-05T01:00:00.123Z");
    }
}

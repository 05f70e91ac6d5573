//! The console's start page: what an operator checks first. The review
//! queue's size and age, each watcher's state, intents by method and
//! status today and over the last seven days, and the money settled, with
//! the last day's intents and the week's settlements as small charts.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use paywatch_core::Method;

use super::chart;
use super::html::{self, Html};
use super::session::{self, VIEWERS};
use super::time::{age, utc};
use crate::api::{usd, watcher_health, ApiError, ApiState};
use crate::store::{IntentTally, SettledTally};

const HOUR_MS: i64 = 60 * 60 * 1000;
const DAY_MS: i64 = 24 * HOUR_MS;
const WEEK_MS: i64 = 7 * DAY_MS;

/// The statuses as columns, in the order an intent moves through them.
const STATUSES: [&str; 6] = [
    "awaiting_payment",
    "confirming",
    "paid",
    "expired",
    "needs_review",
    "resolved",
];

pub(crate) async fn page(
    State(s): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let role = session::require(&s, &headers, VIEWERS, "console_overview")
        .await?
        .role;
    let body = render(&s)
        .await
        .map_err(|e| html::error_page(&e, Some(role)))?;
    Ok(html::page(StatusCode::OK, "Overview", Some(role), &body))
}

async fn render(s: &ApiState) -> Result<Html, ApiError> {
    let store = &s.ctx.store;
    let now = s.ctx.clock.now_ms();
    // Days are UTC days, as every time in the console is UTC.
    let today = now - now.rem_euclid(DAY_MS);
    let week = now - WEEK_MS;
    let queue = store.review_queue_size().await?;
    let watchers = watcher_health(s).await?;
    let intents = store.intents_made_since(week, today).await?;
    let per_hour = store.intents_made_per_bucket(now - DAY_MS, HOUR_MS).await?;
    let settled = store.settled_since(week, today).await?;
    let per_day = store.settled_per_bucket(now - WEEK_MS, DAY_MS).await?;

    let mut h = Html::new();
    h.raw("<p class=\"muted\">As of ")
        .text(utc(now))
        .raw(". Today is the UTC day so far; the week is the last seven days.</p>");

    h.raw("<h2>Review queue</h2><p id=\"queue-size\">");
    match queue.oldest_since_ms {
        Some(since) if queue.waiting > 0 => {
            h.raw("<strong>")
                .text(queue.waiting)
                .raw("</strong> waiting; the longest unchanged for <strong id=\"queue-age\">")
                .text(age(now - since))
                .raw("</strong>. <a href=\"/console/queue\">Open the queue</a>");
        }
        _ => {
            h.raw("No case is waiting.");
        }
    }
    h.raw("</p>");

    h.raw("<h2>Watchers</h2><table id=\"watcher-states\"><thead><tr><th>Network</th>")
        .raw("<th>State</th><th>Lag (blocks)</th><th>Last error</th></tr></thead><tbody>");
    for w in &watchers {
        let state = w
            .status
            .as_ref()
            .map_or("starting", |c| c.watcher_state.as_str());
        let error = w
            .status
            .as_ref()
            .and_then(|c| c.last_error.clone())
            .unwrap_or_else(|| "—".to_owned());
        h.raw("<tr>").cells(&[
            &w.network.as_str(),
            &state,
            &html::or_dash(w.lag_blocks()),
            &error,
        ]);
        h.raw("</tr>");
    }
    h.raw("</tbody></table><p><a href=\"/console/watchers\">Each watcher's lag over the last hour</a></p>");

    h.raw("<h2>Intents</h2><p>Made in the last 24 hours, per hour: ");
    chart::sparkline(
        &mut h,
        "intents made per hour",
        now - DAY_MS,
        now,
        &bucket_points(now - DAY_MS, HOUR_MS, &per_hour),
    );
    h.raw("</p>");
    intent_table(&mut h, "intents-today", "Today", &intents, |t| t.today);
    intent_table(&mut h, "intents-week", "Last 7 days", &intents, |t| {
        t.since_start
    });

    h.raw("<h2>Money settled</h2><p>USD settled per day, last 7 days: ");
    chart::sparkline(
        &mut h,
        "USD cents settled per day",
        now - WEEK_MS,
        now,
        &bucket_points(now - WEEK_MS, DAY_MS, &per_day),
    );
    h.raw("</p>");
    settled_table(&mut h, &settled);
    Ok(h)
}

/// Buckets as chart points at each bucket's start, the empty ones as 0,
/// so a quiet hour reads as a dip rather than a line drawn across it.
fn bucket_points(from_ms: i64, bucket_ms: i64, buckets: &[(i64, i64)]) -> Vec<(i64, u64)> {
    let filled: BTreeMap<i64, i64> = buckets.iter().copied().collect();
    let last = filled.keys().next_back().copied().unwrap_or(-1);
    if last < 0 {
        return Vec::new();
    }
    (0..=last)
        .map(|b| {
            let v = filled.get(&b).copied().unwrap_or(0);
            (from_ms + b * bucket_ms, u64::try_from(v).unwrap_or(0))
        })
        .collect()
}

/// One row per method with any intent, one column per status, a total.
fn intent_table(
    h: &mut Html,
    id: &'static str,
    title: &'static str,
    tallies: &[IntentTally],
    count: impl Fn(&IntentTally) -> i64,
) {
    let mut rows: BTreeMap<(String, String), BTreeMap<String, i64>> = BTreeMap::new();
    for t in tallies {
        let n = count(t);
        if n == 0 {
            continue;
        }
        *rows
            .entry((t.network.clone(), t.asset.clone()))
            .or_default()
            .entry(t.status.clone())
            .or_default() += n;
    }
    h.raw("<h3>").raw(title).raw("</h3>");
    if rows.is_empty() {
        h.raw("<p class=\"muted\" id=\"")
            .raw(id)
            .raw("\">No intent was made.</p>");
        return;
    }
    h.raw("<table id=\"")
        .raw(id)
        .raw("\"><thead><tr><th>Method</th>");
    for status in STATUSES {
        h.raw("<th>").text(status).raw("</th>");
    }
    h.raw("<th>All</th></tr></thead><tbody>");
    let mut totals = [0i64; STATUSES.len()];
    let mut total = 0;
    for ((network, asset), by_status) in &rows {
        h.raw("<tr><td>")
            .text(method_name(asset, network))
            .raw("</td>");
        for (i, status) in STATUSES.iter().enumerate() {
            let n = by_status.get(*status).copied().unwrap_or(0);
            totals[i] += n;
            h.raw("<td>").text(n).raw("</td>");
        }
        let all: i64 = by_status.values().sum();
        total += all;
        h.raw("<td>").text(all).raw("</td></tr>");
    }
    h.raw("<tr><th>All</th>");
    for n in totals {
        h.raw("<th>").text(n).raw("</th>");
    }
    h.raw("<th>").text(total).raw("</th></tr></tbody></table>");
}

fn settled_table(h: &mut Html, settled: &[SettledTally]) {
    if settled.is_empty() {
        h.raw("<p class=\"muted\" id=\"settled\">Nothing settled in the last 7 days.</p>");
        return;
    }
    h.raw("<table id=\"settled\"><thead><tr><th>Paid with</th><th>Today</th>")
        .raw(
            "<th>Today, USD</th><th>Last 7 days</th><th>Last 7 days, USD</th></tr></thead><tbody>",
        );
    let (mut n, mut usd, mut today_n, mut today_usd) = (0, 0, 0, 0);
    for t in settled {
        let with = match &t.method {
            Some((asset, network)) => method_name(asset, network),
            None => "the account's balance".to_owned(),
        };
        h.raw("<tr>").cells(&[
            &with,
            &t.today_count,
            &dollars(t.today_usd_cents),
            &t.count,
            &dollars(t.usd_cents),
        ]);
        h.raw("</tr>");
        n += t.count;
        usd += t.usd_cents;
        today_n += t.today_count;
        today_usd += t.today_usd_cents;
    }
    h.raw("<tr><th>All</th><th>")
        .text(today_n)
        .raw("</th><th id=\"settled-today-usd\">")
        .text(dollars(today_usd))
        .raw("</th><th>")
        .text(n)
        .raw("</th><th id=\"settled-week-usd\">")
        .text(dollars(usd))
        .raw("</th></tr></tbody></table>");
}

/// "USDT on tron", or the stored text if it names no method.
fn method_name(asset: &str, network: &str) -> String {
    match (asset.parse(), network.parse()) {
        (Ok(a), Ok(n)) if Method::new(a, n).is_ok() => format!("{asset} on {network}"),
        _ => format!("{asset}/{network}"),
    }
}

fn dollars(cents: i64) -> String {
    usd(cents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_buckets_read_as_zero_and_nothing_reads_as_no_samples() {
        assert_eq!(
            bucket_points(1_000, 10, &[(0, 2), (3, 5)]),
            vec![(1_000, 2), (1_010, 0), (1_020, 0), (1_030, 5)]
        );
        assert!(bucket_points(0, 10, &[]).is_empty());
    }

    #[test]
    fn a_table_of_intents_counts_each_status_and_totals() {
        let t = |asset: &str, network: &str, status: &str, n: i64, today: i64| IntentTally {
            asset: asset.into(),
            network: network.into(),
            status: status.into(),
            since_start: n,
            today,
        };
        let tallies = [
            t("LTC", "litecoin", "paid", 3, 1),
            t("LTC", "litecoin", "expired", 2, 0),
            t("USDT", "tron", "needs_review", 1, 1),
        ];
        let mut h = Html::new();
        intent_table(&mut h, "x", "Today", &tallies, |t| t.today);
        let page = h.as_str();
        assert!(page.contains("<td>LTC on litecoin</td><td>0</td><td>0</td><td>1</td><td>0</td><td>0</td><td>0</td><td>1</td>"), "{page}");
        assert!(page.contains("<td>USDT on tron</td>"), "{page}");
        assert!(page.contains("<th>All</th><th>0</th><th>0</th><th>1</th><th>0</th><th>1</th><th>0</th><th>2</th>"), "{page}");
        assert_eq!(dollars(123_456), "1234.56");
        assert_eq!(dollars(15_000), "150.00");
    }
}

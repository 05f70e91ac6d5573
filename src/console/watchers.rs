//! Watcher health: per enabled network, what `GET /v1/watchers` reports,
//! and its lag over the last hour as a small chart.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::chart;
use super::html::{self, or_dash, Html};
use super::session::{self, VIEWERS};
use super::time::utc;
use crate::api::{watcher_health, ApiState};

const HOUR_MS: i64 = 60 * 60 * 1000;

pub(crate) async fn page(
    State(s): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    let role = session::require(&s, &headers, VIEWERS, "console_watchers")
        .await?
        .role;
    let watchers = watcher_health(&s)
        .await
        .map_err(|e| html::error_page(&e, Some(role)))?;
    let mut h = Html::new();
    if watchers.is_empty() {
        h.raw("<p>No network is enabled in this paywatch.</p>");
    } else {
        h.raw("<table id=\"watchers\"><thead><tr><th>Network</th><th>State</th>")
            .raw("<th>Tip</th><th>Cursor</th><th>Final height</th><th>Lag (blocks)</th>")
            .raw("<th>Lag, last hour</th><th>Last error</th><th>Updated</th></tr></thead><tbody>");
        let now = s.ctx.clock.now_ms();
        let hour_ago = now - HOUR_MS;
        for w in &watchers {
            // A chart that cannot be read is left out, never the table.
            let samples = s
                .ctx
                .store
                .chain_samples(w.network, hour_ago)
                .await
                .unwrap_or_default();
            let lags: Vec<(i64, u64)> = samples
                .iter()
                .filter_map(|p| Some((p.at_ms, p.lag_blocks()?)))
                .collect();
            let mut chart = Html::new();
            chart::sparkline(
                &mut chart,
                &format!("{} lag in blocks", w.network.as_str()),
                hour_ago,
                now,
                &lags,
            );
            h.raw("<tr id=\"watcher-")
                .text(w.network.as_str())
                .raw("\">");
            match &w.status {
                Some(c) => h
                    .cells(&[
                        &w.network.as_str(),
                        &c.watcher_state,
                        &or_dash(c.tip_height),
                        &or_dash(c.cursor_height),
                        &or_dash(c.final_height),
                        &or_dash(w.lag_blocks()),
                    ])
                    .raw("<td class=\"lag-chart\">")
                    .append(&chart)
                    .raw("</td>")
                    .cells(&[&or_dash(c.last_error.as_deref()), &utc(c.updated_at_ms)]),
                // Enabled, but its watcher has recorded nothing yet.
                None => h.cells(&[
                    &w.network.as_str(),
                    &"starting",
                    &"—",
                    &"—",
                    &"—",
                    &"—",
                    &"—",
                    &"—",
                    &"—",
                ]),
            };
            h.raw("</tr>");
        }
        h.raw("</tbody></table>");
        let gaps: Vec<_> = watchers
            .iter()
            .flat_map(|w| w.gaps.iter().map(move |g| (w.network, g)))
            .collect();
        if !gaps.is_empty() {
            // Payments in these heights were never seen: support answers
            // the customers who paid in them from here.
            h.raw("<h2>Accepted gaps: never read</h2>")
                .raw("<table id=\"gaps\"><thead><tr><th>Network</th><th>Heights</th>")
                .raw("<th>Accepted by</th><th>At</th><th>Reason</th></tr></thead><tbody>");
            for (network, g) in gaps {
                h.raw("<tr>").cells(&[
                    &network.as_str(),
                    &format!("{}–{}", g.from_height, g.to_height),
                    &g.accepted_by,
                    &utc(g.accepted_at_ms),
                    &g.reason,
                ]);
                h.raw("</tr>");
            }
            h.raw("</tbody></table>");
        }
    }
    Ok(html::page(StatusCode::OK, "Watchers", Some(role), &h))
}

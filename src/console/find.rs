//! Finding a case by reference, account, address or transaction id, as
//! `GET /v1/cases` does.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::html::{self, Html};
use super::parts::{amount_due, case_link, what};
use super::session::{self, VIEWERS};
use super::time::utc;
use crate::api::{find_cases, ApiState, Search};

pub(crate) async fn page(
    State(s): State<ApiState>,
    headers: HeaderMap,
    query: Result<Query<Search>, QueryRejection>,
) -> Result<Response, Response> {
    let role = session::require(&s, &headers, VIEWERS, "console_find")
        .await?
        .role;
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let mut h = Html::new();
    let asked = [&q.reference, &q.account, &q.address, &q.txid]
        .iter()
        .any(|v| v.is_some());
    let mut status = StatusCode::OK;
    let mut results = Html::new();
    if asked {
        match find_cases(&s, &q).await {
            Ok(found) if found.is_empty() => {
                results.raw("<p id=\"none-found\">No intent matches.</p>");
            }
            Ok(found) => {
                results
                    .raw("<table id=\"found\"><thead><tr><th>Case</th><th>For</th>")
                    .raw("<th>Status</th><th>Due</th><th>Address</th><th>Created</th>")
                    .raw("</tr></thead><tbody>");
                for i in &found {
                    results.raw("<tr><td>");
                    case_link(&mut results, i.id);
                    results.raw("</td>").cells(&[
                        &what(i),
                        &i.status.as_str(),
                        &amount_due(i),
                        &i.address,
                        &utc(i.created_at_ms),
                    ]);
                    results.raw("</tr>");
                }
                results.raw("</tbody></table>");
            }
            Err(e) => {
                status = e.status;
                html::error_banner(&mut results, &e);
            }
        }
    }
    h.raw("<form method=\"get\" action=\"/console/find\" id=\"find\"><p>");
    for (name, label, value) in [
        ("reference", "Reference", &q.reference),
        ("account", "Account", &q.account),
        ("address", "Address", &q.address),
        ("txid", "Transaction id", &q.txid),
    ] {
        h.raw("<label>")
            .text(label)
            .raw(" <input name=\"")
            .text(name)
            .raw("\" value=\"")
            .text(value.as_deref().unwrap_or(""))
            .raw("\"></label> ");
    }
    h.raw("<button type=\"submit\">Find</button></p></form>")
        .append(&results);
    Ok(html::page(status, "Find a case", Some(role), &h))
}

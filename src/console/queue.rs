//! The review queue: every case waiting for a person, oldest first, read
//! through the same code as `GET /v1/review-queue`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::html::{self, or_dash, Html};
use super::parts::{amount_due, case_link, transfer_amount, transfer_state, what};
use super::session::{self, VIEWERS};
use super::time::age;
use crate::api::{queue_items, ApiState, QueueItem};
use crate::store::{BalanceGap, LostWindowTransfer, SpamTransfer};

/// As many as a person can work through on one page; the API pages further.
const SHOWN: i64 = 200;

/// Where the page is sent after a gap was marked handled.
#[derive(Debug, Deserialize)]
pub(crate) struct Outcome {
    handled: Option<i64>,
}

pub(crate) async fn page(
    State(s): State<ApiState>,
    headers: HeaderMap,
    outcome: Result<Query<Outcome>, QueryRejection>,
) -> Result<Response, Response> {
    let role = session::require(&s, &headers, VIEWERS, "console_queue")
        .await?
        .role;
    let items = queue_items(&s, SHOWN)
        .await
        .map_err(|e| html::error_page(&e, Some(role)))?;
    let mut h = Html::new();
    if let Ok(Query(Outcome { handled: Some(id) })) = outcome {
        // Read back, so a crafted link names nothing that did not happen.
        let gap = s
            .ctx
            .store
            .balance_gap(id)
            .await
            .map_err(|e| html::error_page(&e.into(), Some(role)))?;
        if let Some((by, note)) = gap.and_then(|g| g.handled_by.zip(g.handled_note)) {
            h.raw("<p class=\"banner ok\" id=\"result\" role=\"status\">Balance gap ")
                .text(id)
                .raw(" marked handled by ")
                .text(by)
                .raw(": ")
                .text(note)
                .raw("</p>");
        }
    }
    if items.is_empty() {
        h.raw("<p id=\"empty\">No case is waiting for review.</p>");
    } else {
        h.raw("<p>")
            .text(items.len())
            .raw(" waiting, oldest first.</p><table id=\"queue\"><thead><tr>")
            .raw("<th>Case</th><th>For</th><th>Exception</th><th>Reason</th><th>Age</th>")
            .raw("<th>Due</th><th>Transfers</th><th>Candidate intents</th>")
            .raw("</tr></thead><tbody>");
        for item in &items {
            row(&mut h, item);
        }
        h.raw("</tbody></table>");
    }
    let lost = s
        .ctx
        .store
        .lost_window_transfers(SHOWN)
        .await
        .map_err(|e| html::error_page(&e.into(), Some(role)))?;
    lost_window(&mut h, &lost);
    let spam = s
        .ctx
        .store
        .spam_transfers(SHOWN)
        .await
        .map_err(|e| html::error_page(&e.into(), Some(role)))?;
    spam_tokens(&mut h, &spam);
    let gaps = s
        .ctx
        .store
        .open_balance_gaps(SHOWN)
        .await
        .map_err(|e| html::error_page(&e.into(), Some(role)))?;
    balance_gaps(&mut h, &gaps);
    Ok(html::page(StatusCode::OK, "Review queue", Some(role), &h))
}

/// Money a node holds at an issued address beyond what paywatch recorded:
/// a contract's payment its source cannot see. Shown, never settled.
fn balance_gaps(h: &mut Html, gaps: &[BalanceGap]) {
    if gaps.is_empty() {
        return;
    }
    h.raw("<h2>Money arrived that no transfer explains</h2><p>")
        .text(gaps.len())
        .raw(
            " addresses hold more of their network's coin than paywatch recorded arriving \
             (ETH or TRX a contract sent, which the source cannot see without traces or \
             internal transactions). The intents are left as they are: look the address up \
             on the chain, settle or refund by hand, then mark the gap handled with who you \
             are and what was done; it then leaves this list (the API: \
             <code>POST /v1/balance-gaps/{id}/handled</code>).</p><table id=\"balance-gaps\">\
             <thead><tr><th>Gap</th><th>Network</th><th>Address</th><th>Unexplained</th>\
             <th>Node balance</th><th>Recorded</th><th>Height</th><th>Intent</th>\
             <th>Handled</th></tr></thead><tbody>",
        );
    for g in gaps {
        h.raw("<tr id=\"gap-").text(g.id).raw("\">").cells(&[
            &g.id,
            &g.network,
            &g.address,
            &format!("{} base units", g.unexplained),
            &g.node_balance,
            &g.counted,
            &g.height,
        ]);
        h.raw("<td>");
        match g.intent_id {
            Some(id) => case_link(h, id),
            None => {
                h.raw("—");
            }
        }
        h.raw("</td><td>");
        handled_form(h, g.id);
        h.raw("</td></tr>");
    }
    h.raw("</tbody></table>");
}

/// Who handled the gap and what they did; both required, as in the API.
fn handled_form(h: &mut Html, id: i64) {
    h.raw("<form method=\"post\" id=\"handle-gap-")
        .text(id)
        .raw("\" action=\"/console/balance-gaps/")
        .text(id)
        .raw("/handled\"><label>What was done <textarea name=\"note\" required ")
        .raw("maxlength=\"2000\"></textarea></label><label>Actor (your name) ")
        .raw("<input name=\"actor\" required maxlength=\"200\"></label>")
        .raw("<button type=\"submit\">Mark handled</button></form>");
}

/// Tokens that are no method's asset: recorded and shown, never a case.
fn spam_tokens(h: &mut Html, spam: &[SpamTransfer]) {
    if spam.is_empty() {
        return;
    }
    h.raw("<h2>Spam and dust set aside</h2><p>")
        .text(spam.len())
        .raw(
            " newest transfers that move no intent: tokens none of the payment methods \
             accepts (address poisoning, look-alike tokens), and dust of the intent's own \
             asset under the floor its settlement was made under, sent after it settled \
             (<code>reconcile.dust_floor</code>). They never change an intent's status; a \
             customer who sent a real token by mistake is a support case.</p>\
             <table id=\"spam\"><thead><tr><th>Transfer</th><th>Why</th><th>Network</th>\
             <th>Token</th><th>To</th><th>From</th><th>Amount</th><th>Transaction</th>\
             <th>Intent</th></tr></thead><tbody>",
        );
    for s in spam {
        let t = &s.transfer;
        h.raw("<tr>").cells(&[
            &t.id,
            &s.reason(),
            &t.network,
            &t.asset.code(),
            &t.to,
            &or_dash(t.from.as_deref()),
            &format!("{} base units", t.amount),
            &t.txid,
        ]);
        h.raw("<td>");
        match s.intent_id {
            Some(id) => case_link(h, id),
            None => {
                h.raw("—");
            }
        }
        h.raw("</td></tr>");
    }
    h.raw("</tbody></table>");
}

/// Payments to addresses a restore-check marked: no intent here knows them,
/// so the storefront's records say whose they are.
fn lost_window(h: &mut Html, lost: &[LostWindowTransfer]) {
    if lost.is_empty() {
        return;
    }
    h.raw("<h2>Payments to addresses issued in a lost window</h2><p>")
        .text(lost.len())
        .raw(
            " payments to addresses handed out after the restored copy was taken: \
             find their orders in the storefront's records.</p><table id=\"lost-window\">\
             <thead><tr><th>Transfer</th><th>Network</th><th>To</th><th>Amount</th>\
             <th>Transaction</th><th>Height</th></tr></thead><tbody>",
        );
    for t in lost {
        h.raw("<tr>").cells(&[
            &t.transfer_id,
            &t.network,
            &t.to_address,
            &format!("{} {} base units", t.amount, t.asset),
            &t.txid,
            &t.block_height,
        ]);
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
}

fn row(h: &mut Html, item: &QueueItem) {
    let i = &item.intent;
    h.raw("<tr id=\"case-").text(i.id).raw("\"><td>");
    case_link(h, i.id);
    h.raw("</td>").cells(&[
        &what(i),
        &or_dash(i.exception.map(|e| e.as_str())),
        &or_dash(i.reason.as_deref()),
        &age(item.age_ms),
        &amount_due(i),
    ]);
    h.raw("<td>");
    if item.transfers.is_empty() {
        h.raw("none");
    }
    for (t, _) in &item.transfers {
        h.raw("<div>")
            .text(transfer_amount(t, i))
            .raw(" in <code>")
            .text(&t.txid)
            .raw("</code> (")
            .text(transfer_state(t))
            .raw(")</div>");
    }
    let more = item.transfers_total - item.transfers.len() as i64;
    if more > 0 {
        h.raw("<div>and ").text(more).raw(" more in the case</div>");
    }
    h.raw("</td><td>");
    let mut any = false;
    for (_, candidates) in &item.transfers {
        for c in candidates {
            if any {
                h.raw(", ");
            }
            case_link(h, *c);
            any = true;
        }
    }
    if !any {
        h.raw("none");
    }
    h.raw("</td></tr>");
}

//! One case, all of it — what `GET /v1/cases/{id}` answers — and, for
//! support, a form per action.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::actions::{fresh_key, ActionForm};
use super::html::{self, or_dash, Html};
use super::parts::{amount_due, transfer_amount, transfer_state, what};
use super::session::{self, VIEWERS};
use super::time::{utc, utc_or_dash};
use crate::api::{load_case, parse_id, ApiError, ApiState, CaseFile, IntentView, Role};
use crate::reconcile::PaymentReading;

/// What the page says above the case.
#[derive(Debug)]
pub(crate) enum Banner<'a> {
    None,
    /// An action was just done, as this audit entry.
    Done(i64),
    /// A form was sent again; its action was done before, as this entry.
    Replayed(i64),
    /// An action was refused or failed, nothing written; the form it came
    /// from is shown again as it was filled in.
    Refused(&'a ApiError, &'a ActionForm),
}

/// Where the page is sent after an action (post, redirect, get: a reload
/// does not post again).
#[derive(Debug, Deserialize)]
pub(crate) struct Outcome {
    done: Option<i64>,
    replayed: Option<i64>,
    transfers_after: Option<i64>,
}

pub(crate) async fn page(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    outcome: Result<Query<Outcome>, QueryRejection>,
) -> Result<Response, Response> {
    let role = session::require(&s, &headers, VIEWERS, "console_case")
        .await?
        .role;
    let page_error = |e: ApiError| html::error_page(&e, Some(role));
    let id = parse_id(&id).map_err(page_error)?;
    let after = outcome
        .as_ref()
        .ok()
        .and_then(|Query(o)| o.transfers_after)
        .unwrap_or(0);
    let case = load_case(&s, id, after).await.map_err(page_error)?;
    let banner = match outcome {
        Ok(Query(Outcome {
            done: Some(audit), ..
        })) => Banner::Done(audit),
        Ok(Query(Outcome {
            replayed: Some(audit),
            ..
        })) => Banner::Replayed(audit),
        _ => Banner::None,
    };
    Ok(render(&s, role, &case, &banner, StatusCode::OK))
}

/// The case page, with `banner` above it.
pub(crate) fn render(
    s: &ApiState,
    role: Role,
    c: &CaseFile,
    banner: &Banner<'_>,
    status: StatusCode,
) -> Response {
    let mut h = Html::new();
    banner_html(&mut h, c, banner);
    intent(&mut h, s, c);
    transfers(&mut h, c);
    history(&mut h, c);
    audit(&mut h, c);
    refund(&mut h, c);
    h.raw("<h2>Actions</h2>");
    if role == Role::Support {
        let refused = match banner {
            Banner::Refused(_, form) => Some(*form),
            _ => None,
        };
        actions(&mut h, c.intent.id, refused);
    } else {
        h.raw("<p id=\"view-only\">The ")
            .text(role.as_str())
            .raw(" role can view cases; only a support token can act on them.</p>");
    }
    let title = format!("Case #{}: {}", c.intent.id, what(&c.intent));
    html::page(status, &title, Some(role), &h)
}

fn banner_html(h: &mut Html, c: &CaseFile, banner: &Banner<'_>) {
    let entry = |id: i64| c.audit.iter().find(|a| a.id == id);
    match banner {
        Banner::None => {}
        Banner::Done(id) => {
            // Only an entry of this case is named, so a crafted link shows nothing.
            if let Some(a) = entry(*id) {
                h.raw("<p class=\"banner ok\" id=\"result\" role=\"status\">Done: <strong>")
                    .text(&a.action)
                    .raw("</strong> by ")
                    .text(&a.actor);
                // The actor is what the person typed; the token is who it
                // provably was.
                if let Some(token) = &a.token_name {
                    h.raw(" with the token ").text(token);
                }
                h.raw(" (audit entry ")
                    .text(a.id)
                    .raw("). The case is now ")
                    .text(c.intent.status.as_str())
                    .raw(".</p>");
            }
        }
        Banner::Replayed(id) => {
            if let Some(a) = entry(*id) {
                h.raw("<p class=\"banner ok\" id=\"result\" role=\"status\">This form was sent ")
                    .raw("before: <strong>")
                    .text(&a.action)
                    .raw("</strong> was done then (audit entry ")
                    .text(a.id)
                    .raw(") and nothing was done again.</p>");
            }
        }
        Banner::Refused(e, form) => {
            h.raw("<p class=\"banner err\" id=\"error\" role=\"alert\">Not done (")
                .text(form.action.as_deref().unwrap_or("no action"))
                .raw("); nothing was changed. <strong>")
                .text(e.code)
                .raw(":</strong> ")
                .text(&e.message)
                .raw("</p>");
        }
    }
}

fn intent(h: &mut Html, s: &ApiState, c: &CaseFile) {
    let i = &c.intent;
    let v = IntentView::new(i, &s.ctx.settings);
    h.raw("<h2>Intent</h2><table id=\"intent\">")
        .field("Status", v.status)
        .field("Exception", or_dash(v.exception))
        .field("Outcome", or_dash(v.outcome))
        .field("Reason", or_dash(v.reason.as_deref()))
        .field("Kind", v.kind)
        .field("Reference", &v.reference)
        .field("Account", &v.account)
        .field("Address", &v.address)
        .field("Amount due", amount_due(i))
        .field("Amount due (base units)", &v.amount_due)
        .field("USD", &v.usd_amount)
        .field("Received, final (base units)", &v.amount_final)
        .field("Received, pending (base units)", &v.amount_pending)
        .field("Excess (base units)", &v.amount_excess)
        .field("Created", utc(v.created_at_ms))
        .field("Expires", utc(v.expires_at_ms))
        .field(
            "Final by (to settle without review)",
            utc_or_dash(v.confirm_by_ms),
        )
        .field("Reversed", utc_or_dash(v.reversed_at_ms))
        .field("Paid", utc_or_dash(v.paid_at_ms))
        .raw("</table>");
    h.raw("<h2>Declaration</h2><p id=\"declaration\">");
    match i.declared_paid_at_ms {
        Some(at) => h
            .raw("The payer said \u{201c}I have paid\u{201d} at ")
            .text(utc(at))
            .raw(" (a claim, never proof)."),
        None => h.raw("The payer has not declared a payment."),
    };
    h.raw("</p><h2>Rate lock</h2><table id=\"rate\">")
        .field("USD per coin", &i.rate_usd)
        .field("Source", &i.rate_source)
        .field("Quoted", utc(i.rate_at_ms))
        .raw("</table>");
}

fn transfers(h: &mut Html, c: &CaseFile) {
    h.raw("<h2>Transfers</h2>");
    if c.transfers.is_empty() {
        h.raw("<p>No transfer to this address on any network.</p>");
        return;
    }
    h.raw("<table id=\"transfers\"><thead><tr><th>Network</th><th>Amount</th>")
        .raw("<th>Transaction</th><th>From</th><th>To</th><th>Block</th><th>State</th>")
        .raw("<th>First seen</th><th>For this intent</th></tr></thead><tbody>");
    for t in &c.transfers {
        h.raw("<tr id=\"transfer-")
            .text(t.transfer_id)
            .raw("\">")
            .cells(&[
                &t.network,
                &transfer_amount(t, &c.intent),
                &format!("{} #{}", t.txid, t.index),
                &or_dash(t.from_address.as_deref()),
                &t.to_address,
                &or_dash(t.block_height),
                &transfer_state(t),
                &utc(t.first_seen_at_ms),
                &standing(c.reading.of(t.transfer_id)),
            ]);
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
    if c.transfers_next.is_some() || c.transfers_total > c.transfers.len() as i64 {
        h.raw("<p id=\"transfers-page\">")
            .text(c.transfers.len())
            .raw(" of ")
            .text(c.transfers_total)
            .raw(" transfers shown. ");
        if let Some(after) = c.transfers_next {
            h.raw("<a href=\"/console/cases/")
                .text(c.intent.id)
                .raw("?transfers_after=")
                .text(after)
                .raw("\">Next transfers</a> · ");
        }
        h.raw("<a href=\"/console/cases/")
            .text(c.intent.id)
            .raw("\">First transfers</a></p>");
    }
}

fn history(h: &mut Html, c: &CaseFile) {
    h.raw("<h2>History</h2><table id=\"history\"><thead><tr><th>At</th><th>Event</th>")
        .raw("<th>Status</th><th>Exception</th><th>Detail</th></tr></thead><tbody>");
    for e in &c.history {
        h.raw("<tr>").cells(&[
            &utc(e.at_ms),
            &e.kind,
            &or_dash(e.status.as_deref()),
            &or_dash(e.exception.as_deref()),
            &or_dash(e.detail.as_deref()),
        ]);
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
}

fn audit(h: &mut Html, c: &CaseFile) {
    h.raw("<h2>Audit log</h2>");
    if c.audit.is_empty() {
        h.raw("<p id=\"audit-empty\">No action on this case yet.</p>");
        return;
    }
    h.raw("<table id=\"audit\"><thead><tr><th>Entry</th><th>At</th><th>Role</th>")
        .raw("<th>Token</th><th>Actor</th><th>Action</th><th>Note</th><th>Detail</th>")
        .raw("</tr></thead><tbody>");
    for a in &c.audit {
        h.raw("<tr>").cells(&[&a.id, &utc(a.at_ms), &a.role]);
        h.raw("<td class=\"token\">")
            .text(or_dash(a.token_name.as_deref()))
            .raw("</td>");
        h.cells(&[&a.actor, &a.action, &a.note, &or_dash(a.detail.as_deref())]);
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
}

fn refund(h: &mut Html, c: &CaseFile) {
    h.raw("<h2>Refund</h2>");
    let Some(r) = &c.refund else {
        h.raw("<p id=\"refund\">No refund recorded.</p>");
        return;
    };
    h.raw("<table id=\"refund\">")
        .field("Destination", &r.destination)
        .field("Required", utc(r.required_at_ms))
        .field("Network", or_dash(r.network.as_deref()))
        .field(
            if r.txids.len() > 1 {
                "Transactions"
            } else {
                "Transaction"
            },
            if r.txids.is_empty() {
                "—".to_owned()
            } else {
                r.txids.join(", ")
            },
        )
        .field("Sent", utc_or_dash(r.sent_at_ms))
        .field("On chain", or_dash(r.state.as_deref()))
        .field("To be seen by", utc_or_dash(r.check_by_ms))
        .field("Mismatch", or_dash(r.mismatch.as_deref()))
        .raw("</table>");
}

/// One form per action, each with a fresh idempotency key: the same form
/// sent twice (a double click, a resubmit) is done once.
fn actions(h: &mut Html, id: i64, refused: Option<&ActionForm>) {
    /// An action's form: its name, its title, and the one field it needs
    /// besides the note and the actor (name, label).
    type Spec = (
        &'static str,
        &'static str,
        Option<(&'static str, &'static str)>,
    );
    const ACTIONS: [Spec; 5] = [
        (
            "accept",
            "Accept (settle as paid, once; on an overpaid case, credit the excess to the balance)",
            None,
        ),
        (
            "refund_required",
            "Refund required",
            Some(("destination", "Destination address")),
        ),
        (
            "refund_sent",
            "Refund sent",
            Some(("txid", "Refund transaction id")),
        ),
        (
            "reassign",
            "Reassign to another intent",
            Some(("to_intent", "Intent id")),
        ),
        ("dismiss", "Dismiss (nothing owed)", None),
    ];
    h.raw("<div class=\"actions\">");
    for (action, label, extra) in ACTIONS {
        let Some(key) = fresh_key() else {
            h.raw("<p class=\"banner err\" id=\"error\">No action can be offered: the ")
                .raw("system's random source failed, so no idempotency key could be made. ")
                .raw("Reload the page.</p></div>");
            return;
        };
        // The refused form comes back as it was filled in, under a new key.
        let filled = refused.filter(|f| f.action.as_deref() == Some(action));
        let value = |name: &str| filled.and_then(|f| f.value(name)).unwrap_or("");
        h.raw("<form method=\"post\" id=\"action-")
            .text(action)
            .raw("\" action=\"/console/cases/")
            .text(id)
            .raw("/actions\"><h3>")
            .text(label)
            .raw("</h3><input type=\"hidden\" name=\"action\" value=\"")
            .text(action)
            .raw("\"><input type=\"hidden\" name=\"key\" value=\"")
            .text(key)
            .raw("\">");
        if let Some((name, text)) = extra {
            h.raw("<label>")
                .text(text)
                .raw(" <input name=\"")
                .text(name)
                .raw("\" required maxlength=\"200\" value=\"")
                .text(value(name))
                .raw("\"></label>");
        }
        h.raw("<label>Note (why) <textarea name=\"note\" required maxlength=\"2000\">")
            .text(value("note"))
            .raw("</textarea></label><label>Actor (your name) <input name=\"actor\" ")
            .raw("required maxlength=\"200\" value=\"")
            .text(value("actor"))
            .raw("\"></label><button type=\"submit\">")
            .text(label)
            .raw("</button></form>");
    }
    h.raw("</div><p>Each action is written to the audit log with its effect, once; ")
        .raw("one that cannot be done in the case's state is refused and changes nothing.</p>");
}

/// What a payment is to the intent, in a person's words: whether it was
/// made late, whether the settlement stands on it, which decision claims it.
fn standing(r: PaymentReading) -> String {
    let mut parts: Vec<String> = Vec::new();
    if r.late {
        parts.push("made after the intent expired (late)".into());
    }
    if r.settles {
        parts.push("the settlement stands on it".into());
    }
    if let Some((decision, action)) = r.claimed_by {
        parts.push(format!(
            "claimed by decision {decision} ({})",
            action.as_str()
        ));
    }
    if parts.is_empty() {
        "—".into()
    } else {
        parts.join("; ")
    }
}

//! The hosted payment page, rendered on the server: everything a payer
//! needs is in the HTML, so it reads without its script; the script only
//! counts the time down and follows the live status stream.

use paywatch_core::Network;

use super::words;
use crate::api::{ApiError, CustomerView};
use crate::console::html::Html;

/// A network as a payer reads its name.
fn network_name(network: &str) -> &'static str {
    match network.parse::<Network>() {
        Ok(Network::Bitcoin) => "Bitcoin",
        Ok(Network::Litecoin) => "Litecoin",
        Ok(Network::Ethereum) => "Ethereum",
        Ok(Network::Tron) => "Tron",
        Ok(Network::Solana) => "Solana",
        _ => "this",
    }
}

/// Minutes and seconds left, as the page first shows them.
fn time_left(v: &CustomerView) -> String {
    let secs = (v.expires_at_ms - v.server_time_ms).max(0) / 1000;
    format!("{}:{:02}", secs / 60, secs % 60)
}

const STYLE: &str = "<style>\
body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#111}\
main{max-width:30em;margin:1.5em auto;background:#fff;padding:1.5em;border-radius:8px;\
box-shadow:0 1px 4px rgba(0,0,0,.12)}\
h1{font-size:1.4em;margin:0 0 .2em}.net{margin:0 0 1em;color:#333}\
#qr{display:block;width:14em;height:14em;margin:0 auto 1em}\
dl{margin:0 0 1em}dt{color:#555;font-size:.9em}dd{margin:0 0 .6em}\
code{font-size:1em;overflow-wrap:anywhere;background:#f0f2f5;padding:.1em .3em}\
#status{padding:.7em 1em;border-radius:6px;background:#eef4fb;border:1px solid #9bbbe0}\
#status[data-status=paid]{background:#e6f4ea;border-color:#2e7d32}\
#status[data-status=expired],#status[data-status=needs_review]{background:#fdecea;border-color:#c62828}\
.warn{font-size:.9em;color:#333}.warn li{margin:.3em 0}\
a.wallet{display:inline-block;margin:0 0 1em}\
</style>";

/// The page for one intent's view.
pub(crate) fn render(v: &CustomerView) -> String {
    let network = network_name(v.network);
    let status_words = words::say(v.reason_code.as_deref(), v.status);
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">")
        .raw("<meta name=\"referrer\" content=\"no-referrer\"><title>Pay ")
        .text(&v.amount_due_coin)
        .raw(" ")
        .text(v.asset)
        .raw("</title>")
        .raw(STYLE)
        .raw("</head><body><main id=\"pay\" data-events=\"")
        .text(&v.events)
        .raw("\" data-expires-at=\"")
        .text(v.expires_at_ms)
        .raw("\" data-server-time=\"")
        .text(v.server_time_ms)
        .raw("\" data-words=\"")
        .text(words::as_json())
        .raw("\"><h1>Pay <span id=\"amount\">")
        .text(&v.amount_due_coin)
        .raw("</span> <span id=\"asset\">")
        .text(v.asset)
        .raw("</span></h1><p class=\"net\">on the <strong id=\"network\">")
        .text(network)
        .raw("</strong> network only</p>")
        .raw("<img id=\"qr\" alt=\"QR code of this payment\" src=\"")
        .text(&v.qr_svg)
        .raw("\"><dl><dt>Send exactly</dt><dd><code id=\"amount-exact\">")
        .text(&v.amount_due_coin)
        .raw(" ")
        .text(v.asset)
        .raw("</code> (")
        .text(&v.usd_amount)
        .raw(" USD)</dd><dt>To this ")
        .text(network)
        .raw(" address</dt><dd><code id=\"address\">")
        .text(&v.address)
        .raw("</code></dd><dt>Time left</dt><dd id=\"time-left\">")
        .text(if v.status == "awaiting_payment" {
            time_left(v)
        } else {
            "—".to_owned()
        })
        .raw("</dd></dl><a class=\"wallet\" id=\"wallet\" href=\"")
        .text(&v.uri)
        .raw("\">Open in a wallet</a>");
    if !v.uri_carries_amount {
        h.raw("<p class=\"warn\">Your wallet will not fill the amount in: type it exactly.</p>");
    }
    h.raw("<p id=\"status\" role=\"status\" aria-live=\"polite\" data-status=\"")
        .text(v.status)
        .raw("\" data-reason=\"")
        .text(v.reason_code.as_deref().unwrap_or(""))
        .raw("\">")
        .text(status_words)
        .raw("</p><section class=\"warn\"><h2>Before you pay</h2><ul>")
        .raw("<li id=\"warn-network\">Send ")
        .text(v.asset)
        .raw(" on the ")
        .text(network)
        .raw(" network only. The same coin sent on another network is a different payment: it is not seen here, and may be lost.</li>")
        .raw("<li id=\"warn-expiry\">This address is for this payment only. Once the time is up, do not send to it again: start a new payment at the shop for a new address.</li>")
        .raw("<li id=\"warn-proof\">Telling the shop \u{201c}I have paid\u{201d} is not proof of payment: only the payment on the network counts, and this page shows it as soon as it is seen.</li>")
        .raw("</ul></section></main><script src=\"/assets/pay.js\" defer></script></body></html>");
    h.into_string()
}

/// A page for a link that opens no payment, or a moment paywatch cannot
/// answer: a payer reads what to do, not a JSON error.
pub(crate) fn refused(e: &ApiError) -> String {
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">")
        .raw("<title>Payment</title>")
        .raw(STYLE)
        .raw("</head><body><main><h1>");
    if e.code == "not_found" {
        h.raw(
            "This payment link is not valid</h1><p id=\"refused\">Check the link the shop \
               gave you, or start the payment again at the shop. Do not send money to an \
               address from a link that does not open.</p>",
        );
    } else {
        h.raw(
            "This payment cannot be shown right now</h1><p id=\"refused\">Try again in a \
               moment.</p>",
        );
    }
    h.raw("</main></body></html>");
    h.into_string()
}

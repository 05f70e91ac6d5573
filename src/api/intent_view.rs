//! An intent as the API shows it: base-unit integers as strings (JSON
//! numbers lose precision past 2^53), the coin amount as an exact decimal
//! string beside them, and times in Unix milliseconds.

use paywatch_core::Network;
use serde::Serialize;

use crate::payment_uri::{payment_uri, UriError, UriTarget};
use crate::reconcile::Status;
use crate::settings::Settings;
use crate::store::{IntentRecord, RefundRecord, Store, StoreError};

#[derive(Debug, Serialize)]
pub struct IntentView {
    pub id: i64,
    pub kind: &'static str,
    pub reference: String,
    pub account: String,
    pub asset: &'static str,
    pub network: &'static str,
    pub address: String,
    pub decimals: u32,
    /// Base units (sat, wei, sun, lamport).
    pub amount_due: String,
    /// The same, in coin, exact.
    pub amount_due_coin: String,
    pub usd_amount: String,
    /// The same in cents, as the views name it.
    pub usd_cents: i64,
    pub rate: RateView,
    pub status: &'static str,
    pub exception: Option<&'static str>,
    pub reason: Option<String>,
    /// Stable and customer-safe, unlike `reason` (a sentence for support).
    pub reason_code: Option<String>,
    pub amount_final: String,
    pub amount_pending: String,
    pub amount_excess: String,
    /// Final money still missing, never below zero: compare nothing yourself.
    pub amount_outstanding: String,
    pub received_in_full: bool,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub paid_at_ms: Option<i64>,
    /// Set while a reorg has taken back the money a settlement stood on.
    pub reversed_at_ms: Option<i64>,
    pub declared_paid_at_ms: Option<i64>,
    /// How support closed it: paid_by_support, dismissed, refund_required,
    /// refunded or reassigned.
    pub outcome: Option<&'static str>,
    /// Money seen in time must be final by then to settle without a person.
    pub confirm_by_ms: Option<i64>,
    /// A refund support required or sent.
    pub refund: Option<RefundView>,
    pub payment: PaymentView,
    /// Hand this to the customer's browser, never a storefront token: it
    /// reads this intent's status and payment instructions only
    /// (`/v1/view/{token}`, its live `/events`, the page at `/pay/{token}`).
    /// `None` for intents made before view tokens.
    pub view_token: Option<String>,
    /// The hosted payment page, a path on this paywatch.
    pub pay_page: Option<String>,
}

/// A refund, as the storefront may show it to its customer.
#[derive(Debug, Serialize)]
pub struct RefundView {
    /// `required` (support decided; nothing sent yet) or `sent`.
    pub status: &'static str,
    /// What the chain shows: `required`, `sent_unconfirmed`, `refunded`
    /// (final, paying the destination what is owed), `mismatch` (see
    /// `mismatch`), or `unchecked` (sent before refunds were checked).
    pub state: Option<String>,
    /// The network it goes out on: where the money came.
    pub network: Option<String>,
    pub destination: String,
    pub txid: Option<String>,
    pub required_at_ms: i64,
    pub sent_at_ms: Option<i64>,
    /// Its transaction must be seen paying the destination by then.
    pub check_by_ms: Option<i64>,
    pub checked_at_ms: Option<i64>,
    /// Why its transaction does not match what is owed, for support.
    pub mismatch: Option<String>,
}

impl RefundView {
    pub fn new(r: &RefundRecord) -> RefundView {
        RefundView {
            status: if r.sent_at_ms.is_some() {
                "sent"
            } else {
                "required"
            },
            state: r.state.clone(),
            network: r.network.clone(),
            destination: r.destination.clone(),
            txid: r.txid.clone(),
            required_at_ms: r.required_at_ms,
            sent_at_ms: r.sent_at_ms,
            check_by_ms: r.check_by_ms,
            checked_at_ms: r.checked_at_ms,
            mismatch: r.mismatch.clone(),
        }
    }
}

/// What a checkout page shows a payer.
#[derive(Debug, Serialize)]
pub struct PaymentView {
    /// BIP21, EIP-681 or Solana Pay; for Tron, which has no URI standard,
    /// the bare address (show `amount_due_coin` beside it).
    pub uri: String,
    pub uri_carries_amount: bool,
    pub qr_svg: String,
    pub qr_png: String,
}

#[derive(Debug, Serialize)]
pub struct RateView {
    pub usd_per_coin: String,
    pub source: String,
    pub at_ms: i64,
}

/// The wallet URI of an intent, with the token contract and chain id this
/// paywatch is configured for.
pub fn intent_uri(i: &IntentRecord, settings: &Settings) -> Result<String, UriError> {
    let ns = settings.network(i.method.network());
    let contract = ns.and_then(|n| n.contract(i.method));
    // An unconfigured chain id is mainnet's: the node check uses the same.
    let chain_id =
        (i.method.network() == Network::Ethereum).then(|| ns.and_then(|n| n.chain_id).unwrap_or(1));
    payment_uri(&UriTarget {
        method: i.method,
        address: &i.address,
        amount: i.amount_due,
        token_contract: contract.as_deref(),
        chain_id,
    })
}

impl IntentView {
    pub fn new(i: &IntentRecord, settings: &Settings) -> Self {
        let decimals = i.method.decimals();
        // Stored intents passed the same checks when made; should one not
        // render, the address alone is still right to pay.
        let uri = intent_uri(i, settings).unwrap_or_else(|_| i.address.clone());
        IntentView {
            id: i.id,
            kind: i.kind.as_str(),
            reference: i.reference.clone(),
            account: i.account.clone(),
            asset: i.method.asset().as_str(),
            network: i.method.network().as_str(),
            address: i.address.clone(),
            decimals,
            amount_due: i.amount_due.0.to_string(),
            amount_due_coin: i.amount_due.to_decimal_string(decimals),
            usd_amount: usd(i.usd_cents),
            usd_cents: i.usd_cents,
            rate: RateView {
                usd_per_coin: i.rate_usd.clone(),
                source: i.rate_source.clone(),
                at_ms: i.rate_at_ms,
            },
            status: i.status.as_str(),
            exception: i.exception.map(|e| e.as_str()),
            reason: i.reason.clone(),
            reason_code: i.reason_code.clone().or_else(|| {
                (i.status == Status::AwaitingPayment).then(|| "awaiting_payment".to_owned())
            }),
            amount_final: i.amount_final.0.to_string(),
            amount_pending: i.amount_pending.0.to_string(),
            amount_excess: i.amount_excess.0.to_string(),
            amount_outstanding: i.amount_due.saturating_sub(i.amount_final).0.to_string(),
            received_in_full: i.amount_final >= i.amount_due,
            created_at_ms: i.created_at_ms,
            expires_at_ms: i.expires_at_ms,
            // A reversed intent never reads as paid.
            paid_at_ms: i.paid_at_ms.filter(|_| i.reversed_at_ms.is_none()),
            reversed_at_ms: i.reversed_at_ms,
            declared_paid_at_ms: i.declared_paid_at_ms,
            outcome: i.outcome.map(|o| o.as_str()),
            confirm_by_ms: i.confirm_by_ms,
            refund: None,
            payment: PaymentView {
                uri_carries_amount: i.method.network() != Network::Tron,
                uri,
                qr_svg: format!("/v1/intents/{}/qr.svg", i.id),
                qr_png: format!("/v1/intents/{}/qr.png", i.id),
            },
            view_token: i.view_token.clone(),
            pay_page: i.view_token.as_ref().map(|t| format!("/pay/{t}")),
        }
    }
}

impl IntentView {
    /// With the intent's refund, if support required one.
    pub fn with_refund(mut self, refund: Option<&RefundRecord>) -> Self {
        self.refund = refund.map(RefundView::new);
        self
    }

    /// With its refund read from the store, so every endpoint that shows an
    /// intent shows the same thing.
    pub(crate) async fn load(
        i: &IntentRecord,
        settings: &Settings,
        store: &Store,
    ) -> Result<IntentView, StoreError> {
        let refund = store.refund(i.id).await?;
        Ok(IntentView::new(i, settings).with_refund(refund.as_ref()))
    }
}

/// Cents as a USD decimal string, e.g. -1050 → "-10.50".
pub fn usd(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let c = cents.unsigned_abs();
    format!("{sign}{}.{:02}", c / 100, c % 100)
}

//! Payment intents: validation, quoting, address allocation and expiry.

mod addresses;
mod quote;
mod rates;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use paywatch_core::{Amount, AmountError, Asset, Method, MethodError, Network, WatchSet};

pub use addresses::{check_shape, parse_pool, AddressDeriver, PoolLineError};
pub use quote::{quote, QuoteError};
pub use rates::{
    parse_rate, provider_names, ExchangePolicy, ExchangeRates, FixedRates, HttpJsonRates, Rate,
    RateBook, RateError, RateSource, DEFAULT_PROVIDER_TIMEOUT, MAX_USD_PER_COIN,
};

use crate::clock::Clock;
use crate::reconcile::{default_confirm_window_secs, SettledBy};
use crate::store::{IntentRecord, NewIntentRow, Store, StoreError};
use crate::IntentKind;

/// A storefront's request for a payment intent. Everything is text, as it
/// arrives from the edge; validation happens here.
#[derive(Debug, Clone)]
pub struct NewIntent {
    pub kind: String,
    pub reference: String,
    pub account: String,
    pub asset: String,
    pub network: String,
    /// USD with at most two decimals, e.g. "100" or "49.99".
    pub usd_amount: String,
}

/// A customer's view token: 256 random bits in hex, so it cannot be
/// guessed, and it opens one intent's status and payment instructions only.
fn new_view_token() -> Result<String, IntentError> {
    let mut bits = [0u8; 32];
    getrandom::getrandom(&mut bits).map_err(|e| IntentError::NoRandomness(e.to_string()))?;
    Ok(hex::encode(bits))
}

/// Errors the storefront gets back. Each has a stable code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntentError {
    #[error("{0}")]
    MethodUnknown(String),
    #[error("{method} is not enabled on this paywatch")]
    MethodDisabled { method: Method },
    #[error("{0}")]
    AmountInvalid(String),
    #[error("{field}: {why}")]
    FieldInvalid { field: &'static str, why: String },
    #[error("{0}")]
    RateUnavailable(#[from] RateError),
    #[error("no address available on {0}: import more into its pool")]
    NoAddressAvailable(Network),
    #[error(
        "{network}'s watcher is halted ({why}): no payment to a new address would be seen, \
         so none is issued until an operator resumes it; offer another method"
    )]
    NetworkHalted { network: Network, why: String },
    #[error("{kind} {reference} is already paid by {}", match by {
        SettledBy::Intent(id) => format!("intent {id}"),
        SettledBy::Balance => "the account's balance".to_owned(),
    })]
    AlreadyPaid {
        kind: IntentKind,
        reference: String,
        by: SettledBy,
    },
    #[error(
        "{kind} {reference} already has {open} open intents, the most one may have \
         (intents.max_open_per_reference): show the customer one of those, or let them expire"
    )]
    TooManyOpen {
        kind: IntentKind,
        reference: String,
        open: usize,
    },
    #[error(
        "{kind} {reference} belongs to another account: a reference names one order or \
         top-up of one customer"
    )]
    ReferenceOfAnotherAccount { kind: IntentKind, reference: String },
    #[error(
        "idempotency key '{key}' was used for intent {intent}, a different request: \
         use a new key for a new intent"
    )]
    KeyReused { key: String, intent: i64 },
    #[error("address derivation failed on {network}: {why}")]
    Derivation { network: Network, why: String },
    #[error("no randomness for the intent's view token: {0}")]
    NoRandomness(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl IntentError {
    /// The stable code the API and CLI report.
    pub fn code(&self) -> &'static str {
        match self {
            IntentError::MethodUnknown(_) | IntentError::MethodDisabled { .. } => "method_unknown",
            IntentError::AmountInvalid(_) => "amount_invalid",
            IntentError::FieldInvalid { .. } => "invalid_request",
            IntentError::RateUnavailable(_) => "rate_unavailable",
            IntentError::NoAddressAvailable(_) => "no_address_available",
            IntentError::NetworkHalted { .. } => "network_halted",
            IntentError::AlreadyPaid { .. }
            | IntentError::KeyReused { .. }
            | IntentError::ReferenceOfAnotherAccount { .. } => "conflict",
            IntentError::TooManyOpen { .. } => "too_many_open_intents",
            IntentError::Derivation { .. }
            | IntentError::Store(_)
            | IntentError::NoRandomness(_) => "internal",
        }
    }
}

impl From<MethodError> for IntentError {
    fn from(e: MethodError) -> Self {
        IntentError::MethodUnknown(e.to_string())
    }
}

impl From<AmountError> for IntentError {
    fn from(e: AmountError) -> Self {
        IntentError::AmountInvalid(e.to_string())
    }
}

/// The largest USD amount one intent may ask for (100 million USD, in cents):
/// a typo guard, far above any order or top-up.
const MAX_USD_CENTS: u64 = 10_000_000_000;

/// Open intents one order or top-up may hold at once, unless configured
/// (`intents.max_open_per_reference`).
pub const DEFAULT_MAX_OPEN_PER_REFERENCE: usize = 5;

/// How intents are made: from settings.
#[derive(Debug, Clone)]
pub struct IntentPolicy {
    pub enabled: HashSet<Network>,
    pub expiry_secs: i64,
    pub topup_amounts_cents: Vec<u64>,
    pub quote_decimals: HashMap<Method, u32>,
    /// How long after the expiry money seen in time may take to be final
    /// and still settle by itself, per network; unset ones take the default.
    pub confirm_window_secs: HashMap<Network, i64>,
    /// Open intents (awaiting payment or confirming) one reference may
    /// hold at once: each holds an address, and an Electrum watcher a
    /// subscription, so a caller who asks again and again must not drain
    /// the pool.
    pub max_open_per_reference: usize,
}

impl IntentPolicy {
    /// The confirm window of `network`, in seconds.
    pub fn confirm_window_secs(&self, network: Network) -> i64 {
        self.confirm_window_secs
            .get(&network)
            .copied()
            .unwrap_or_else(|| default_confirm_window_secs(network))
    }

    /// Default quote precision: the asset's own, capped at 8 places, so
    /// amounts stay short enough to type.
    pub fn quote_decimals(&self, method: Method) -> u32 {
        self.quote_decimals
            .get(&method)
            .copied()
            .unwrap_or(method.decimals().min(8))
    }
}

#[derive(Debug, Clone)]
pub struct IntentService {
    store: Store,
    rates: RateBook,
    policy: IntentPolicy,
    derivers: HashMap<Network, Arc<dyn AddressDeriver>>,
    /// Each deriver's key fingerprint ([`crate::keys::fingerprint`]): the
    /// counter it takes indexes from must be its own.
    fingerprints: HashMap<Network, String>,
    watch: HashMap<Network, Arc<WatchSet>>,
    clock: Arc<dyn Clock>,
}

impl IntentService {
    pub fn new(
        store: Store,
        rates: RateBook,
        policy: IntentPolicy,
        derivers: HashMap<Network, Arc<dyn AddressDeriver>>,
        watch: HashMap<Network, Arc<WatchSet>>,
        clock: Arc<dyn Clock>,
    ) -> IntentService {
        // A key that cannot derive has no fingerprint; issuing from it fails
        // with the derivation's own error.
        let fingerprints = derivers
            .iter()
            .filter_map(|(n, d)| Some((*n, crate::keys::fingerprint(*n, d.as_ref()).ok()?)))
            .collect();
        IntentService {
            store,
            rates,
            policy,
            derivers,
            fingerprints,
            watch,
            clock,
        }
    }

    /// Starts the rate source's background fetching: for the daemon, not a
    /// one-off command.
    pub fn warm_up_rates(&self) {
        self.rates.warm_up();
    }

    /// The networks that derive their addresses, with their keys.
    pub fn derivers(&self) -> &HashMap<Network, Arc<dyn AddressDeriver>> {
        &self.derivers
    }

    /// Validates, quotes and allocates; writes the intent and takes its
    /// address in one transaction, so a failure leaves nothing behind.
    pub async fn create(&self, req: &NewIntent) -> Result<IntentRecord, IntentError> {
        self.create_keyed(req, None).await
    }

    /// [`create`](Self::create) under the storefront's idempotency key: a
    /// retry with the same key and request returns the intent made the first
    /// time (and `false`: not made now), never a second address; the same
    /// key with another request is a conflict. Two racing creates with one
    /// key make one intent: the loser's transaction, address taken included,
    /// rolls back on the unique key.
    pub async fn create_once(
        &self,
        req: &NewIntent,
        key: Option<&str>,
    ) -> Result<(IntentRecord, bool), IntentError> {
        let Some(key) = key else {
            return Ok((self.create_keyed(req, None).await?, true));
        };
        let key = checked_key(key)?;
        // Creating first and looking the key up only when that fails keeps
        // the common case (a new key) one lookup shorter. A retry under a
        // used key fails on the unique key and rolls back, address included;
        // any other failure of a retry (its reference paid since, the rate
        // source down, the pool empty) still answers with the intent already
        // made, as a retry must.
        match self.create_keyed(req, Some(key)).await {
            Ok(intent) => Ok((intent, true)),
            Err(e) => match self.store.intent_by_create_key(key).await? {
                Some(found) => Ok((same_request(found, req, key)?, false)),
                None => Err(e),
            },
        }
    }

    async fn create_keyed(
        &self,
        req: &NewIntent,
        create_key: Option<&str>,
    ) -> Result<IntentRecord, IntentError> {
        let kind: IntentKind = req.kind.parse().map_err(|_| IntentError::FieldInvalid {
            field: "kind",
            why: format!("'{}' is not order or topup", req.kind),
        })?;
        let reference = checked_text("reference", &req.reference)?;
        let account = checked_text("account", &req.account)?;
        let asset: Asset = req.asset.parse()?;
        let network: Network =
            req.network
                .parse()
                .map_err(|e: paywatch_core::UnknownNetwork| {
                    IntentError::MethodUnknown(e.to_string())
                })?;
        let method = Method::new(asset, network)?;
        if !self.policy.enabled.contains(&network) {
            return Err(IntentError::MethodDisabled { method });
        }
        // An address issued on a network nobody watches would take money
        // that is seen only once the watcher is resumed, if ever.
        if let Some(chain) = self.store.chain_status(network).await? {
            if chain.watcher_state == "halted" {
                return Err(IntentError::NetworkHalted {
                    network,
                    why: chain
                        .last_error
                        .unwrap_or_else(|| "no reason recorded".to_owned()),
                });
            }
        }

        let cents = Amount::parse_decimal("usd_amount", &req.usd_amount, 2)?;
        let cents = u64::try_from(cents.0)
            .ok()
            .filter(|c| *c > 0 && *c <= MAX_USD_CENTS)
            .ok_or_else(|| {
                IntentError::AmountInvalid(format!(
                    "usd_amount: '{}' must be above 0 and at most 100000000",
                    req.usd_amount
                ))
            })?;
        if kind == IntentKind::Topup && !self.policy.topup_amounts_cents.contains(&cents) {
            let offered: Vec<String> = self
                .policy
                .topup_amounts_cents
                .iter()
                .map(|c| Amount(u128::from(*c)).to_decimal_string(2))
                .collect();
            return Err(IntentError::AmountInvalid(format!(
                "usd_amount: top-ups are offered at {} USD, not {}",
                offered.join(", "),
                req.usd_amount
            )));
        }
        let rate = self.rates.usd_rate(asset).await?;
        let amount_due = quote(
            cents,
            rate.usd_per_coin,
            method.decimals(),
            self.policy.quote_decimals(method),
        )
        .map_err(|e| IntentError::AmountInvalid(format!("usd_amount: {e}")))?;

        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        let open = self
            .store
            .open_intents_for_reference(&mut tx, kind, reference)
            .await?;
        let other_owner = self
            .store
            .claim_reference(&mut tx, kind, reference, account)
            .await?;
        if other_owner.is_some() {
            return Err(IntentError::ReferenceOfAnotherAccount {
                kind,
                reference: reference.to_owned(),
            });
        }
        if open >= self.policy.max_open_per_reference {
            return Err(IntentError::TooManyOpen {
                kind,
                reference: reference.to_owned(),
                open,
            });
        }
        let (address_id, address) = match self.derivers.get(&network) {
            Some(deriver) => {
                self.derive_fresh(&mut tx, deriver.as_ref(), network, now)
                    .await?
            }
            None => self
                .store
                .take_pool_address(&mut tx, network, now)
                .await?
                .ok_or(IntentError::NoAddressAvailable(network))?,
        };
        let rate_text = rate.usd_per_coin.normalize().to_string();
        let view_token = new_view_token()?;
        let expires_at_ms = now + self.policy.expiry_secs * 1000;
        let row = NewIntentRow {
            kind,
            reference,
            account,
            method,
            address: &address,
            amount_due,
            usd_cents: cents as i64,
            rate_usd: &rate_text,
            rate_source: &rate.source,
            rate_at_ms: rate.at_ms,
            created_at_ms: now,
            expires_at_ms,
            confirm_by_ms: expires_at_ms + self.policy.confirm_window_secs(network) * 1000,
            create_key,
            view_token: &view_token,
        };
        let Some(intent) = self.store.insert_intent(&mut tx, &row, address_id).await? else {
            // A settled reference: the rollback returns the address too.
            drop(tx);
            // Only a reorg's reversal frees a settled reference, so the
            // settlement the insert saw is almost always still standing.
            let by = self
                .store
                .settled_by(kind, reference)
                .await?
                .ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "the settlement of {kind} {reference} was reversed while this intent was \
                         created: create it again"
                    ))
                })?;
            return Err(IntentError::AlreadyPaid {
                kind,
                reference: reference.to_owned(),
                by,
            });
        };
        tx.commit().await.map_err(StoreError::from)?;

        // Watched before the address leaves this function, so no payment to it
        // can reach a block this watcher has not been told to look for.
        if let Some(w) = self.watch.get(&network) {
            w.insert(&address);
        }
        Ok(intent)
    }
}

/// An idempotency key: 1 to 200 visible ASCII characters, as HTTP headers
/// carry them.
fn checked_key(key: &str) -> Result<&str, IntentError> {
    if !valid_idempotency_key(key) {
        return Err(IntentError::FieldInvalid {
            field: "idempotency_key",
            why: "must be 1 to 200 visible ASCII characters".into(),
        });
    }
    Ok(key)
}

/// The rule every idempotency key follows, from a header, a console form or
/// the CLI: 1 to 200 visible ASCII characters.
pub fn valid_idempotency_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= 200 && key.bytes().all(|b| b.is_ascii_graphic())
}

/// The intent found under a key, if it answers the same request.
fn same_request(
    found: IntentRecord,
    req: &NewIntent,
    key: &str,
) -> Result<IntentRecord, IntentError> {
    let cents = Amount::parse_decimal("usd_amount", &req.usd_amount, 2)
        .ok()
        .and_then(|c| i64::try_from(c.0).ok());
    let method = req
        .asset
        .parse::<Asset>()
        .ok()
        .zip(req.network.parse::<Network>().ok())
        .and_then(|(a, n)| Method::new(a, n).ok());
    let same = req.kind.parse::<IntentKind>().ok() == Some(found.kind)
        && found.reference == req.reference.trim()
        && found.account == req.account.trim()
        && method == Some(found.method)
        && cents == Some(found.usd_cents);
    if same {
        Ok(found)
    } else {
        Err(IntentError::KeyReused {
            key: key.to_owned(),
            intent: found.id,
        })
    }
}

/// How many derived addresses in a row may turn out to exist already (an
/// overlap with an imported pool) before derivation is reported as broken.
const DERIVATION_SKIPS: usize = 100;

impl IntentService {
    /// The next derived address nobody was ever given. An index whose address
    /// already exists is skipped, not retried forever: the check runs before
    /// the insert, so the unique key never aborts the transaction.
    async fn derive_fresh(
        &self,
        tx: &mut crate::store::Tx,
        deriver: &dyn AddressDeriver,
        network: Network,
        now: i64,
    ) -> Result<(i64, String), IntentError> {
        let fingerprint =
            self.fingerprints
                .get(&network)
                .ok_or_else(|| IntentError::Derivation {
                    network,
                    why: "the account key derives no address".into(),
                })?;
        for _ in 0..DERIVATION_SKIPS {
            let Some(index) = self
                .store
                .take_derivation_index(tx, network, fingerprint)
                .await?
            else {
                return Err(IntentError::Derivation {
                    network,
                    why: format!(
                        "the key in use on {network} is not this instance's (fingerprint \
                         {fingerprint}): it was rotated; restart with the key in use"
                    ),
                });
            };
            let address = deriver
                .derive(index)
                .map_err(|why| IntentError::Derivation { network, why })?;
            let address = network.normalize_address(&address).into_owned();
            if self.store.address_exists(tx, network, &address).await? {
                tracing::warn!(%network, index, %address, "derived address already known; skipping the index");
                continue;
            }
            let id = self
                .store
                .insert_derived_address(tx, network, &address, index, fingerprint, now)
                .await?;
            return Ok((id, address));
        }
        Err(IntentError::Derivation {
            network,
            why: format!("{DERIVATION_SKIPS} derived addresses in a row already exist; check the account key"),
        })
    }
}

fn checked_text<'a>(field: &'static str, value: &'a str) -> Result<&'a str, IntentError> {
    crate::text::label(value, 200).map_err(|why| IntentError::FieldInvalid {
        field,
        why: why.to_string(),
    })
}

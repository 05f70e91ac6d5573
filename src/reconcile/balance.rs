//! Paying from an account's USD balance: an idempotent debit that posts only
//! when the available balance covers all of it; with an order, the same
//! transaction settles that order (`via = balance`), so an order is paid
//! once whichever way: crypto arriving for it later is a duplicate for
//! support, and a balance payment for an order already paid is refused.

use super::events::{self, SettlementEvent, SettlementNews};
use super::{Reconciler, SettledBy};
use crate::store::{LedgerPosting, NewSettlement, StoreError};
use crate::IntentKind;

/// A debit as the storefront asked for it.
#[derive(Debug, Clone)]
pub struct BalancePayment<'a> {
    pub account: &'a str,
    pub cents: i64,
    /// The caller's idempotency key: one debit per key, ever.
    pub key: &'a str,
    pub memo: Option<&'a str>,
    /// The order (kind `order`) this debit pays, if any.
    pub order: Option<&'a str>,
}

/// What a debit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebitOutcome {
    /// Posted now; the balance after it.
    Posted { balance_cents: i64 },
    /// This key was posted before, for the same account, amount and order:
    /// nothing was taken again.
    AlreadyPosted { balance_cents: i64 },
    /// Not enough available: nothing was posted.
    Insufficient { balance_cents: i64 },
    /// This key was posted before for another account, amount or order.
    KeyConflict,
    /// The order is already paid (by an intent or the balance): nothing was posted.
    OrderAlreadyPaid(SettledBy),
    /// The order's intents belong to another account: nothing was posted.
    OrderOfAnotherAccount(String),
}

impl Reconciler {
    /// Debits `p.cents` from `p.account` under `p.key`; with `p.order`, the
    /// debit pays that order, in the same transaction.
    pub async fn debit(&self, p: &BalancePayment<'_>) -> Result<DebitOutcome, StoreError> {
        self.retrying(|| self.debit_once(p)).await
    }

    async fn debit_once(&self, p: &BalancePayment<'_>) -> Result<DebitOutcome, StoreError> {
        let now = self.clock.now_ms();
        let store = &self.store;
        let entry_key = format!("debit:{}", p.key);
        let mut tx = store.begin_snapshot().await?;
        let balance = store.lock_balance(&mut tx, p.account).await?;
        if let Some((account, cents)) = store.ledger_entry(&mut tx, &entry_key).await? {
            let paid_order = store.order_paid_by_debit(&mut tx, &entry_key).await?;
            let same =
                account == p.account && cents == -p.cents && paid_order.as_deref() == p.order;
            return Ok(if same {
                DebitOutcome::AlreadyPosted {
                    balance_cents: balance,
                }
            } else {
                DebitOutcome::KeyConflict
            });
        }
        let mut intents = Vec::new();
        if let Some(order) = p.order {
            if let Some(owner) = store
                .claim_reference(&mut tx, IntentKind::Order, order, p.account)
                .await?
            {
                return Ok(DebitOutcome::OrderOfAnotherAccount(owner));
            }
            intents = store
                .lock_intents_of_reference(&mut tx, IntentKind::Order, order)
                .await?;
            if let Some(other) = intents.iter().find(|i| i.account != p.account) {
                return Ok(DebitOutcome::OrderOfAnotherAccount(other.account.clone()));
            }
            if let Some(by) = store
                .reference_settled_by(&mut tx, IntentKind::Order, order)
                .await?
            {
                return Ok(DebitOutcome::OrderAlreadyPaid(by));
            }
        }
        if balance < p.cents {
            return Ok(DebitOutcome::Insufficient {
                balance_cents: balance,
            });
        }
        let posting = LedgerPosting {
            account: p.account,
            usd_cents: -p.cents,
            entry_kind: "debit",
            entry_key: entry_key.clone(),
            intent_id: None,
            memo: p
                .memo
                .map(str::to_owned)
                .or_else(|| p.order.map(|o| format!("order {o}")))
                .unwrap_or_default(),
            returns_entry: None,
        };
        store
            .post_ledger(&mut tx, std::slice::from_ref(&posting), now)
            .await?;
        let mut news = vec![events::ledger(&posting, p.order.map(|o| ("order", o)))];
        if let Some(order) = p.order {
            let made = store
                .insert_settlements(
                    &mut tx,
                    &[NewSettlement {
                        kind: IntentKind::Order.as_str(),
                        reference: order,
                        intent_id: None,
                        account: p.account,
                        usd_cents: p.cents,
                        via: "balance",
                        decision_id: None,
                        debit_key: Some(&entry_key),
                        tolerance_bp: None,
                        tolerance_max: None,
                        rate_usd: None,
                        dust_floor: None,
                    }],
                    now,
                )
                .await?;
            if made.is_empty() {
                // Settled by someone else since the check: nothing is kept.
                drop(tx);
                return Ok(DebitOutcome::OrderAlreadyPaid(SettledBy::Balance));
            }
            news.insert(
                0,
                events::settlement(SettlementNews {
                    event: SettlementEvent::Settled,
                    kind: IntentKind::Order.as_str(),
                    reference: order,
                    account: p.account,
                    intent_id: None,
                    via: "balance",
                    usd_cents: p.cents,
                }),
            );
        }
        // The order's open intents learn they are paid elsewhere, in the
        // same transaction: money arriving for them is a duplicate.
        let facts = store.load_facts(&mut tx, intents).await?;
        self.write(&mut tx, &facts, now, news).await?;
        tx.commit().await?;
        Ok(DebitOutcome::Posted {
            balance_cents: balance - p.cents,
        })
    }
}

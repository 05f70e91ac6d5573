//! Credits back to the balance: a storefront that cancels an order paid
//! from the balance, or refunds part of it, returns the money to the
//! account. Each credit names the debit it returns, is posted once per
//! idempotency key, never adds up with the others past that debit, and
//! goes through the one writer's transaction shape: a ledger entry
//! (`adjustment`, keyed `credit_back:<key>`) with its feed event.
//! The order stays paid: what the storefront does with it is its own.

use super::events;
use super::Reconciler;
use crate::store::{LedgerPosting, StoreError};

/// A credit back as the storefront asked for it.
#[derive(Debug, Clone)]
pub struct BalanceCredit<'a> {
    pub account: &'a str,
    pub cents: i64,
    /// The caller's idempotency key: one credit per key, ever.
    pub key: &'a str,
    /// The idempotency key of the debit this returns money of.
    pub debit: &'a str,
    pub memo: Option<&'a str>,
}

/// What a credit back did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreditOutcome {
    /// Posted now; the balance after it.
    Posted { balance_cents: i64 },
    /// This key was posted before, for the same account, amount and debit:
    /// nothing was credited again.
    AlreadyPosted { balance_cents: i64 },
    /// This key was posted before for another account, amount or debit.
    KeyConflict,
    /// No debit of this account under that key.
    NoSuchDebit,
    /// The credits back of that debit would come to more than it took.
    BeyondDebit {
        debited_cents: i64,
        credited_cents: i64,
    },
}

impl Reconciler {
    /// Credits `c.cents` back to `c.account` under `c.key`, against the
    /// debit `c.debit`.
    pub async fn credit_back(&self, c: &BalanceCredit<'_>) -> Result<CreditOutcome, StoreError> {
        self.retrying(|| self.credit_back_once(c)).await
    }

    async fn credit_back_once(&self, c: &BalanceCredit<'_>) -> Result<CreditOutcome, StoreError> {
        let now = self.clock.now_ms();
        let store = &self.store;
        let entry_key = format!("credit_back:{}", c.key);
        let debit_key = format!("debit:{}", c.debit);
        let mut tx = store.begin_snapshot().await?;
        // The account's lock orders this credit after any debit or credit
        // of the same account, so two credits of one debit cannot both fit.
        let balance = store.lock_balance(&mut tx, c.account).await?;
        if let Some((account, cents)) = store.ledger_entry(&mut tx, &entry_key).await? {
            let returns = store.returned_entry(&mut tx, &entry_key).await?;
            let same = account == c.account
                && cents == c.cents
                && returns.as_deref() == Some(debit_key.as_str());
            return Ok(if same {
                CreditOutcome::AlreadyPosted {
                    balance_cents: balance,
                }
            } else {
                CreditOutcome::KeyConflict
            });
        }
        let debited = match store.ledger_entry(&mut tx, &debit_key).await? {
            Some((account, cents)) if account == c.account && cents < 0 => -cents,
            _ => return Ok(CreditOutcome::NoSuchDebit),
        };
        let credited = store.credited_back(&mut tx, &debit_key).await?;
        if credited.saturating_add(c.cents) > debited {
            return Ok(CreditOutcome::BeyondDebit {
                debited_cents: debited,
                credited_cents: credited,
            });
        }
        let order = store.order_paid_by_debit(&mut tx, &debit_key).await?;
        let posting = LedgerPosting {
            account: c.account,
            usd_cents: c.cents,
            entry_kind: "adjustment",
            entry_key: entry_key.clone(),
            intent_id: None,
            returns_entry: Some(debit_key.clone()),
            memo: c.memo.map(str::to_owned).unwrap_or_else(|| match &order {
                Some(o) => format!("credited back from order {o}"),
                None => format!("credited back from debit {}", c.debit),
            }),
        };
        store
            .post_ledger(&mut tx, std::slice::from_ref(&posting), now)
            .await?;
        let news = vec![events::ledger(
            &posting,
            order.as_deref().map(|o| ("order", o)),
        )];
        store.insert_outbox(&mut tx, &news, now).await?;
        tx.commit().await?;
        Ok(CreditOutcome::Posted {
            balance_cents: balance + c.cents,
        })
    }
}

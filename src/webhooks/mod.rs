//! Webhook delivery of the outbox, for storefronts that do not share the
//! database: every outbox row is POSTed, signed, to `webhooks.url` until a
//! 2xx answers it.
//!
//! All state is in `webhook_deliveries`, so a restart (or a second
//! instance) carries on where the last left off. Delivery is at least once:
//! a crash between the send and its record sends the row again, under the
//! same `Paywatch-Delivery` id, which receivers de-duplicate on. An intent's
//! rows go out one at a time, in order; a row that keeps failing holds back
//! only its own intent's later rows.

mod backoff;
mod send;
mod signature;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::settings::{Settings, WebhookSettings};
use crate::store::{ClaimedDelivery, FeedWake, Store, StoreError};
use backoff::retry_delay_ms;
use send::{Attempt, Sender};

/// The longest the task sleeps without looking for due rows.
const POLL: Duration = Duration::from_secs(1);
/// The shortest, so rows due but held by another instance's claim are not
/// asked for in a busy loop.
const MIN_WAIT: Duration = Duration::from_millis(10);
/// A claim outlives the request's timeout by this much before another
/// instance may take the row: time to write down the answer.
const LEASE_MARGIN_MS: i64 = 5_000;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    #[error("webhooks: cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// Records the endpoint before the first delivery, so events from now on
/// are enrolled; retried until it is written (the database may be down at
/// start) or `stop` turns true.
async fn register(store: &Store, clock: &Arc<dyn Clock>, stop: &mut watch::Receiver<bool>) {
    loop {
        match store.register_webhook_endpoint(clock.now_ms()).await {
            Ok(Some(dropped)) => {
                info!(
                    dropped,
                    "webhooks configured: events from now on are delivered, none from before"
                );
                return;
            }
            Ok(None) => return,
            Err(e) => warn!(error = %e, "cannot record the webhook endpoint yet; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Delivers due rows until `stop` turns true. A send in flight when it does
/// is finished and recorded first (within `webhooks.timeout_secs`). With
/// `webhooks.url` empty, returns at once.
pub async fn run(
    store: Store,
    settings: Settings,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), WebhookError> {
    let cfg = settings.webhooks;
    if !cfg.enabled() {
        return Ok(());
    }
    let sender = Sender::new(&cfg)?;
    register(&store, &clock, &mut stop).await;
    let mut wake = FeedWake::new(&store, &settings.database.url).await;
    info!(url = %cfg.shown_url(), "delivering the outbox to webhooks.url");
    loop {
        if *stop.borrow() {
            break;
        }
        match deliver_due(&store, &sender, &cfg, &clock).await {
            // The next rows of the same intents may be due now.
            Ok(claimed) if claimed > 0 => continue,
            Ok(_) => {}
            Err(e) => warn!(error = %e, "webhook delivery pass failed; retrying"),
        }
        let wait = match store.next_webhook_due().await {
            Ok(Some(at)) => {
                let ms = u64::try_from(at.saturating_sub(clock.now_ms())).unwrap_or(0);
                Duration::from_millis(ms).clamp(MIN_WAIT, POLL)
            }
            Ok(None) | Err(_) => POLL,
        };
        tokio::select! {
            _ = wake.wait(wait) => {}
            _ = stop.changed() => break,
        }
    }
    Ok(())
}

/// Claims a batch of due rows, sends them side by side (each is a different
/// intent's) and records each answer. Returns how many were claimed.
async fn deliver_due(
    store: &Store,
    sender: &Sender,
    cfg: &WebhookSettings,
    clock: &Arc<dyn Clock>,
) -> Result<usize, StoreError> {
    let now = clock.now_ms();
    let lease_ms = i64::try_from(cfg.timeout_secs)
        .unwrap_or(i64::MAX / 2_000)
        .saturating_mul(1_000)
        .saturating_add(LEASE_MARGIN_MS);
    let claimed = store
        .claim_webhook_deliveries(now, now.saturating_add(lease_ms), cfg.batch)
        .await?;
    let count = claimed.len();
    let mut sends = JoinSet::new();
    for claim in claimed {
        let sender = sender.clone();
        let clock = clock.clone();
        sends.spawn(async move {
            let timestamp = clock.now_ms().div_euclid(1_000);
            let attempt = sender
                .send(claim.outbox_id, &claim.payload, timestamp)
                .await;
            (claim, attempt)
        });
    }
    while let Some(joined) = sends.join_next().await {
        let Ok((claim, attempt)) = joined else {
            // A panicked send leaves its row leased: it is sent again when
            // the lease ends.
            continue;
        };
        if let Err(e) = record(store, cfg, clock, &claim, attempt).await {
            warn!(outbox_id = claim.outbox_id, error = %e,
                  "cannot record a webhook attempt; the row is sent again when its lease ends");
        }
    }
    Ok(count)
}

async fn record(
    store: &Store,
    cfg: &WebhookSettings,
    clock: &Arc<dyn Clock>,
    claim: &ClaimedDelivery,
    attempt: Attempt,
) -> Result<(), StoreError> {
    let now = clock.now_ms();
    let recorded = match attempt {
        Attempt::Delivered { status } => {
            debug!(outbox_id = claim.outbox_id, status, "webhook delivered");
            store.record_webhook_delivered(claim, status, now).await?
        }
        Attempt::Failed { status, error } => {
            let failures = claim.failures.saturating_add(1);
            let seed = (claim.outbox_id as u64)
                .rotate_left(32)
                .wrapping_add(now as u64)
                .wrapping_add(failures as u64);
            let delay = retry_delay_ms(
                failures,
                cfg.base_backoff_ms,
                cfg.max_backoff_secs.saturating_mul(1_000),
                seed,
            );
            let retry_at = now.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
            warn!(outbox_id = claim.outbox_id, failures, status, error = %error,
                  retry_in_ms = delay, "webhook not delivered; retrying");
            store
                .record_webhook_failure(claim, status, &error, retry_at)
                .await?
        }
    };
    if !recorded {
        debug!(
            outbox_id = claim.outbox_id,
            "webhook attempt overtaken by a redelivery or another claim; not recorded"
        );
    }
    Ok(())
}

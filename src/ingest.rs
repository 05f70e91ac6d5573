//! ChainEvent → rows. The only writer of chain-derived rows: blocks,
//! transfers and the cursor. Each call is one database transaction, so a
//! crash between two calls loses nothing and doubles nothing.

use std::sync::Arc;

use paywatch_core::{ChainEvent, Network};

use crate::clock::Clock;
use crate::store::{ApplyOutcome, Store, StoreError, Tx};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the {watcher} watcher got a transfer for {transfer} in block {block}: the source is broken, nothing was recorded")]
    ForeignTransfer {
        watcher: Network,
        transfer: Network,
        block: String,
    },
    #[error("event kind not handled by this version of ingest: {0:?}")]
    UnknownEvent(Box<ChainEvent>),
}

#[derive(Debug, Clone)]
pub struct Ingest {
    store: Store,
    clock: Arc<dyn Clock>,
}

impl Ingest {
    pub fn new(store: Store, clock: Arc<dyn Clock>) -> Ingest {
        Ingest { store, clock }
    }

    /// Applies `events` in order, in one transaction. Stops at the first
    /// event that does not fit the stored cursor (another worker moved it),
    /// keeping what was applied before it.
    pub async fn apply(
        &self,
        network: Network,
        events: &[ChainEvent],
    ) -> Result<ApplyOutcome, IngestError> {
        self.apply_with_progress(network, events, None).await
    }

    /// [`apply`](Self::apply), recording the node's tip and final height
    /// `progress` in the same transaction: a reorg's disconnects, its
    /// connects and the finality they imply commit together, so no reconcile
    /// reads the chain half-way through it. Nothing of `progress` is written
    /// when an event does not fit the stored cursor.
    pub async fn apply_with_progress(
        &self,
        network: Network,
        events: &[ChainEvent],
        progress: Option<(u64, u64)>,
    ) -> Result<ApplyOutcome, IngestError> {
        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        let mut outcome = ApplyOutcome::AlreadyApplied;
        // The cursor row is locked by the first read, so within this
        // transaction it is what the last event here made it.
        let mut cursor: Option<Option<String>> = None;
        for event in events {
            match self
                .apply_one(&mut tx, network, event, now, &mut cursor)
                .await?
            {
                ApplyOutcome::Applied => outcome = ApplyOutcome::Applied,
                ApplyOutcome::AlreadyApplied => {}
                mismatch @ ApplyOutcome::CursorMismatch { .. } => {
                    tx.commit().await.map_err(StoreError::from)?;
                    return Ok(mismatch);
                }
            }
        }
        if let Some((tip, final_height)) = progress {
            self.store
                .record_progress_in(&mut tx, network, tip, final_height, now, None)
                .await?;
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(outcome)
    }

    /// Records transfers found by a rescan of a block already connected (to
    /// addresses the watcher learned of late, or on an operator's request).
    /// Idempotent: a transfer recorded before stays as it is, and only the
    /// new ones count in the returned number. Nothing is written when the
    /// block is no longer on the chain we hold.
    pub async fn backfill(
        &self,
        network: Network,
        block: &paywatch_core::BlockRef,
        timestamp: i64,
        transfers: &[paywatch_core::Transfer],
    ) -> Result<u64, IngestError> {
        // Checked before the transaction: most blocks a rescan reads hold
        // nothing for us, and SQLite's write lock is not taken for them.
        if transfers.is_empty() {
            return Ok(0);
        }
        if let Some(t) = transfers.iter().find(|t| t.network != network) {
            return Err(IngestError::ForeignTransfer {
                watcher: network,
                transfer: t.network,
                block: block.to_string(),
            });
        }
        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        // Under the lock block writes take first: another instance cannot
        // disconnect the block between the check below and the insert.
        self.store.stored_cursor_hash(&mut tx, network).await?;
        if self
            .store
            .is_block_orphaned(&mut tx, network, &block.hash)
            .await?
        {
            return Ok(0);
        }
        let added = self
            .store
            .insert_transfers(
                &mut tx,
                block,
                timestamp.saturating_mul(1000),
                transfers,
                now,
            )
            .await?;
        self.store
            .retire_unconfirmed(&mut tx, network, transfers, now)
            .await?;
        let addresses: Vec<String> = transfers
            .iter()
            .map(|t| network.normalize_address(&t.to).into_owned())
            .collect();
        self.store
            .touch_intents(&mut tx, network, &addresses)
            .await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(added)
    }

    /// Makes the recorded mempool of `network` the node's current one, in
    /// one transaction. The caller checks the snapshot was taken at the block
    /// its cursor holds.
    pub async fn apply_unconfirmed(
        &self,
        network: Network,
        tip: &str,
        transfers: &[paywatch_core::Transfer],
    ) -> Result<usize, IngestError> {
        if let Some(t) = transfers.iter().find(|t| t.network != network) {
            return Err(IngestError::ForeignTransfer {
                watcher: network,
                transfer: t.network,
                block: crate::store::MEMPOOL_BLOCK.to_owned(),
            });
        }
        let now = self.clock.now_ms();
        let mut tx = self.store.begin().await?;
        // Under the same lock as block writes: a snapshot from another best
        // block than the stored cursor (another instance moved on) is stale.
        if self
            .store
            .stored_cursor_hash(&mut tx, network)
            .await?
            .as_deref()
            != Some(tip)
        {
            return Ok(0);
        }
        let mut touched = self
            .store
            .replace_unconfirmed(&mut tx, network, transfers, now)
            .await?;
        touched.sort_unstable();
        touched.dedup();
        self.store.touch_intents(&mut tx, network, &touched).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(touched.len())
    }

    async fn apply_one(
        &self,
        tx: &mut Tx,
        network: Network,
        event: &ChainEvent,
        now: i64,
        cursor: &mut Option<Option<String>>,
    ) -> Result<ApplyOutcome, IngestError> {
        let stored = match cursor.take() {
            Some(known) => known,
            None => self.store.stored_cursor_hash(tx, network).await?,
        };
        // Unknown again unless an arm below says where the cursor now is.
        *cursor = None;
        match event {
            ChainEvent::Connected {
                block,
                timestamp,
                transfers,
            } => {
                if stored.as_deref() == Some(block.hash.as_str()) {
                    return Ok(ApplyOutcome::AlreadyApplied);
                }
                let fits = stored.is_none() || stored.as_deref() == Some(block.parent.as_str());
                if !fits {
                    if !self
                        .store
                        .is_block_orphaned(tx, network, &block.hash)
                        .await?
                    {
                        return Ok(ApplyOutcome::AlreadyApplied);
                    }
                    return Ok(ApplyOutcome::CursorMismatch { stored });
                }
                if let Some(t) = transfers.iter().find(|t| t.network != network) {
                    return Err(IngestError::ForeignTransfer {
                        watcher: network,
                        transfer: t.network,
                        block: block.to_string(),
                    });
                }
                let timestamp_ms = timestamp.saturating_mul(1000);
                self.store
                    .connect_block(tx, network, block, timestamp_ms, now)
                    .await?;
                self.store
                    .insert_transfers(tx, block, timestamp_ms, transfers, now)
                    .await?;
                self.store
                    .retire_unconfirmed(tx, network, transfers, now)
                    .await?;
                let addresses: Vec<String> = transfers
                    .iter()
                    .map(|t| network.normalize_address(&t.to).into_owned())
                    .collect();
                self.store.touch_intents(tx, network, &addresses).await?;
                *cursor = Some(Some(block.hash.clone()));
                Ok(ApplyOutcome::Applied)
            }
            ChainEvent::Disconnected { block } => {
                if stored.as_deref() != Some(block.hash.as_str()) {
                    if self
                        .store
                        .is_block_orphaned(tx, network, &block.hash)
                        .await?
                    {
                        return Ok(ApplyOutcome::AlreadyApplied);
                    }
                    return Ok(ApplyOutcome::CursorMismatch { stored });
                }
                let mut addresses = self.store.disconnect_block(tx, network, block, now).await?;
                // Its transactions go back to the node's mempool: count them
                // there until the next snapshot says otherwise, rather than
                // let an intent drop to zero (or expire) in between.
                addresses.extend(
                    self.store
                        .revive_unconfirmed(tx, network, &block.hash)
                        .await?,
                );
                self.store.touch_intents(tx, network, &addresses).await?;
                Ok(ApplyOutcome::Applied)
            }
            other => Err(IngestError::UnknownEvent(Box::new(other.clone()))),
        }
    }
}

//! Reading the storefront's event feed (`paywatch_events`): events in the
//! order they committed, from a cursor. Written by `settlements::insert_outbox`.

use sqlx::Row;

use super::{Store, StoreError};

/// One event as the feed serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEvent {
    /// Its place in the feed: increases in commit order, may skip numbers.
    pub cursor: i64,
    pub topic: String,
    pub kind: Option<String>,
    pub reference: Option<String>,
    pub intent_id: Option<i64>,
    /// The JSON object the event carries, as written.
    pub payload: String,
    pub created_at_ms: i64,
}

impl Store {
    /// Up to `limit` events committed after `after`, oldest first. A reader
    /// that keeps the last cursor it handled and asks again from there sees
    /// every event once, whatever order their transactions began in.
    pub async fn events_after(&self, after: i64, limit: i64) -> Result<Vec<FeedEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT cursor, topic, kind, reference, intent_id, payload, created_at_ms \
             FROM paywatch_events WHERE cursor > $1 ORDER BY cursor LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(feed_event).collect()
    }
}

impl Store {
    /// Up to `limit` of one intent's events after `after`, oldest first:
    /// what its live status stream replays on a reconnect.
    pub async fn intent_events_after(
        &self,
        intent_id: i64,
        after: i64,
        limit: i64,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        let rows = sqlx::query(INTENT_EVENTS_AFTER)
            .bind(intent_id)
            .bind(after)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(feed_event).collect()
    }

    /// The newest cursor in the feed (0 when empty). Seq order is commit
    /// order, so nothing below it is still to commit.
    pub async fn feed_head(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM outbox")
                .fetch_one(self.pool())
                .await?,
        )
    }

    /// The newest cursor of one intent's events (0 with none): where a
    /// stream that began with the intent's current state resumes.
    pub async fn last_intent_cursor(&self, intent_id: i64) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(MAX(seq), 0) FROM outbox WHERE intent_id = $1 AND seq IS NOT NULL",
        )
        .bind(intent_id)
        .fetch_one(self.pool())
        .await?)
    }
}

/// One intent's events after a cursor, by `outbox_by_intent`.
pub(crate) const INTENT_EVENTS_AFTER: &str =
    "SELECT cursor, topic, kind, reference, intent_id, payload, created_at_ms \
     FROM paywatch_events WHERE intent_id = $1 AND cursor > $2 ORDER BY cursor LIMIT $3";

fn feed_event(r: &sqlx::any::AnyRow) -> Result<FeedEvent, StoreError> {
    Ok(FeedEvent {
        cursor: r.try_get("cursor")?,
        topic: r.try_get("topic")?,
        kind: r.try_get("kind")?,
        reference: r.try_get("reference")?,
        intent_id: r.try_get("intent_id")?,
        payload: r.try_get("payload")?,
        created_at_ms: r.try_get("created_at_ms")?,
    })
}

impl Store {
    /// The highest cursor pruned (0 while none was): a reader asking from
    /// below it has missed events and must re-read what it follows.
    pub async fn feed_pruned_through(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT pruned_through FROM feed_horizon WHERE id = 1")
                .fetch_optional(self.pool())
                .await?
                .unwrap_or(0),
        )
    }

    /// Prunes up to `batch` of the oldest events written before
    /// `before_ms`, with their delivered webhook rows; never the newest
    /// event (SQLite numbers the next one after it) and never one whose
    /// delivery is still due (whatever this instance's own webhook
    /// settings: another may be sending it). Returns how many events went.
    pub async fn prune_events(&self, before_ms: i64, batch: i64) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        // Candidates skip events kept for a delivery, so a receiver that
        // refuses one order for ever cannot stop pruning behind it.
        let through: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(seq) FROM (SELECT o.seq FROM outbox o WHERE o.created_at < $1 \
               AND o.seq < (SELECT MAX(seq) FROM outbox) \
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                               WHERE d.outbox_id = o.id AND d.delivered_at IS NULL) \
               ORDER BY o.seq LIMIT $2) AS oldest",
        )
        .bind(before_ms)
        .bind(batch)
        .fetch_one(&mut *tx)
        .await?;
        let Some(through) = through else {
            return Ok(0);
        };
        sqlx::query(
            "DELETE FROM webhook_deliveries WHERE delivered_at IS NOT NULL \
             AND outbox_id IN (SELECT id FROM outbox WHERE seq <= $1)",
        )
        .bind(through)
        .execute(&mut *tx)
        .await?;
        let gone: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM outbox WHERE seq <= $1 \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.outbox_id = outbox.id) \
             RETURNING seq",
        )
        .bind(through)
        .fetch_all(&mut *tx)
        .await?;
        // The horizon is the highest cursor actually pruned: events kept for
        // a pending delivery do not make a reader below them miss anything.
        if let Some(highest) = gone.iter().max() {
            sqlx::query(
                "UPDATE feed_horizon SET pruned_through = $1 WHERE id = 1 AND pruned_through < $1",
            )
            .bind(highest)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(u64::try_from(gone.len()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::OutboxEvent;

    /// A fresh, migrated database on the test PostgreSQL (the same server
    /// and variable as the integration tests); missing is a failure.
    async fn fresh_postgres() -> Store {
        fresh_postgres_at().await.0
    }

    /// [`fresh_postgres`], with its URL (for a second instance on it).
    async fn fresh_postgres_at() -> (Store, String) {
        let admin = std::env::var("PAYWATCH_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned());
        let name = format!(
            "pwfeed_{}_{}",
            std::process::id(),
            crate::store::now_ms() % 1_000_000_000
        );
        let root = Store::connect(&format!("{admin}/postgres"))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is required ({admin}): {e}"));
        root.execute_raw(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        root.close().await;
        let url = format!("{admin}/{name}");
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        (store, url)
    }

    /// Waits on `wake` as the live status tail and the webhook sender do,
    /// with a timeout far beyond the test's: true if something woke it.
    async fn woken(wake: &mut crate::store::FeedWake, within: Duration) -> bool {
        tokio::time::timeout(within, wake.wait(Duration::from_secs(3600)))
            .await
            .is_ok()
    }

    /// Writes one event in a transaction of `store`'s, left open.
    async fn write_event(store: &Store, reference: &str) -> crate::store::Tx {
        let mut tx = store.begin().await.unwrap();
        store
            .insert_outbox(&mut tx, &[about(reference)], 1)
            .await
            .unwrap();
        tx
    }

    // Issue 34, live status: the feed's readers waited for their next look
    // (every 250 ms for the tail, every second for webhooks on SQLite).
    async fn a_commit_that_writes_the_feed_wakes_its_readers_at_once(store: Store, url: &str) {
        let mut wake = crate::store::FeedWake::new(&store, url).await;
        let tx = write_event(&store, "rings-on-commit").await;
        assert!(
            !woken(&mut wake, Duration::from_millis(300)).await,
            "woken before the commit: a reader would find nothing yet"
        );
        tx.commit().await.unwrap();
        assert!(
            woken(&mut wake, Duration::from_secs(20)).await,
            "a commit that wrote the feed did not wake its reader"
        );
        // On PostgreSQL the same commit also notifies: let it arrive.
        while woken(&mut wake, Duration::from_millis(300)).await {}
        // A transaction that wrote no event rings nothing.
        let quiet = store.begin().await.unwrap();
        quiet.commit().await.unwrap();
        assert!(!woken(&mut wake, Duration::from_millis(300)).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_that_writes_the_feed_wakes_its_readers_at_once_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("feed.db").display());
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        a_commit_that_writes_the_feed_wakes_its_readers_at_once(store, &url).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_that_writes_the_feed_wakes_its_readers_at_once_on_postgres() {
        let (store, url) = fresh_postgres_at().await;
        a_commit_that_writes_the_feed_wakes_its_readers_at_once(store, &url).await;
    }

    // Another instance's commit rings no bell here: PostgreSQL's NOTIFY
    // carries it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_instances_commit_wakes_this_ones_readers_through_postgres() {
        let (store, url) = fresh_postgres_at().await;
        let other = Store::connect(&url).await.unwrap();
        let mut wake = crate::store::FeedWake::new(&store, &url).await;
        write_event(&other, "from-the-other-instance")
            .await
            .commit()
            .await
            .unwrap();
        assert!(
            woken(&mut wake, Duration::from_secs(20)).await,
            "another instance's commit did not wake this one's reader"
        );
    }

    fn about(reference: &str) -> OutboxEvent {
        let serde_json::Value::Object(payload) =
            serde_json::json!({"event": "intent.status", "kind": "order", "reference": reference})
        else {
            unreachable!()
        };
        OutboxEvent {
            topic: "intent.status",
            intent_id: None,
            kind: Some("order".into()),
            reference: Some(reference.into()),
            payload,
        }
    }

    /// Follows the feed as a storefront does: from the last cursor handled.
    async fn read_on(store: &Store, cursor: &mut i64, seen: &mut Vec<String>) {
        for e in store.events_after(*cursor, 100).await.unwrap() {
            *cursor = e.cursor;
            seen.push(e.reference.unwrap());
        }
    }

    // Issue 20, found 1: outbox ids are drawn at insert, so a transaction
    // that drew first may commit last, behind a cursor a reader has passed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_event_that_commits_late_is_not_skipped_by_a_reader_resuming_from_its_cursor() {
        let store = fresh_postgres().await;
        let mut first = store.begin_snapshot().await.unwrap();
        store
            .insert_outbox(&mut first, &[about("drawn-first")], 1)
            .await
            .unwrap();
        let other = store.clone();
        let mut second = tokio::spawn(async move {
            let mut tx = other.begin_snapshot().await.unwrap();
            other
                .insert_outbox(&mut tx, &[about("drawn-second")], 2)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        });
        // The second writer commits ahead of the first if nothing stops it;
        // a reader then reads what is committed and keeps its cursor.
        let second_done = tokio::time::timeout(Duration::from_millis(500), &mut second)
            .await
            .is_ok();
        let (mut cursor, mut seen) = (0, Vec::new());
        read_on(&store, &mut cursor, &mut seen).await;
        first.commit().await.unwrap();
        if !second_done {
            second.await.unwrap();
        }
        read_on(&store, &mut cursor, &mut seen).await;
        seen.sort();
        assert_eq!(
            seen,
            ["drawn-first", "drawn-second"],
            "a reader resuming from its cursor saw each event once"
        );
        let all = store.events_after(0, 10).await.unwrap();
        for e in &all {
            let body: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
            assert_eq!(body["cursor"], e.cursor, "the body names its own cursor");
        }
        assert!(
            all.iter().all(|e| e.created_at_ms > 0),
            "each event has its time"
        );
    }

    // Issue 20 review: an instance of the release before, still running
    // through an upgrade, writes outbox rows with no cursor.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_an_older_release_writes_without_a_cursor_is_numbered_into_the_feed() {
        let store = fresh_postgres().await;
        let mut tx = store.begin().await.unwrap();
        store
            .insert_outbox(&mut tx, &[about("new-writer")], 1)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        store
            .execute_raw(
                "INSERT INTO outbox (topic, intent_id, payload, created_at) VALUES \
                 ('intent.status', NULL, '{\"event\":\"intent.status\",\"kind\":\"order\",\
                 \"reference\":\"old-writer\"}', 7)",
            )
            .await
            .unwrap();
        let feed = store.events_after(0, 10).await.unwrap();
        let refs: Vec<_> = feed.iter().map(|e| e.reference.clone().unwrap()).collect();
        assert_eq!(refs, ["new-writer", "old-writer"]);
        let old: serde_json::Value = serde_json::from_str(&feed[1].payload).unwrap();
        assert_eq!(old["cursor"], feed[1].cursor);
        assert_eq!(old["created_at_ms"], 7);
        assert_eq!(feed[1].kind.as_deref(), Some("order"));
        // The trigger takes the same lock as paywatch, by its number.
        assert!(
            include_str!("../../migrations/postgres/0014_event_feed.sql")
                .contains(&crate::store::settlements::FEED_LOCK.to_string())
        );
    }
}

//! Watcher leases in the database: one holder per network at a time, a new
//! token at every change of holder, and the fence that keeps a former
//! holder's writes out. The three-process stories are in tests/replicas.rs.

#[macro_use]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Backend, TestDb};
use paywatch::clock::{Clock, SystemClock};
use paywatch::ingest::{Ingest, IngestError};
use paywatch::store::{Lease, StoreError};
use paywatch_core::{BlockRef, ChainEvent, Network};

const MINUTE_MS: i64 = 60_000;

on_both_databases!(
    a_lease_has_one_holder_until_it_runs_out,
    a_former_holder_writes_nothing_after_a_takeover,
    a_released_lease_is_taken_at_once,
);

fn block(height: u64) -> ChainEvent {
    ChainEvent::Connected {
        block: BlockRef {
            height,
            hash: format!("h{height}"),
            parent: format!("h{}", height - 1),
        },
        timestamp: 1_700_000_000,
        transfers: Vec::new(),
    }
}

/// Waits until a lease given `ttl_ms` from now has run out by the
/// database's clock.
async fn past(ttl_ms: u64) {
    tokio::time::sleep(Duration::from_millis(ttl_ms + 50)).await;
}

async fn a_lease_has_one_holder_until_it_runs_out(b: Backend) {
    let db = TestDb::new(b).await;
    let s = &db.store;
    let a = s
        .try_acquire_lease(Network::Litecoin, "a", MINUTE_MS)
        .await
        .unwrap()
        .expect("a free lease is granted");
    assert_eq!(
        s.try_acquire_lease(Network::Litecoin, "b", MINUTE_MS)
            .await
            .unwrap(),
        None,
        "a held lease is not granted to another"
    );
    assert_eq!(
        s.try_acquire_lease(Network::Litecoin, "a", MINUTE_MS)
            .await
            .unwrap(),
        None,
        "nor to its own holder a second time"
    );
    let eth = s
        .try_acquire_lease(Network::Ethereum, "b", MINUTE_MS)
        .await
        .unwrap();
    assert!(eth.is_some(), "each network has a lease of its own");
    assert!(s.renew_lease(&a, MINUTE_MS).await.unwrap());

    // a stops renewing: its lease runs out and b gets it, with a new token.
    assert!(s.renew_lease(&a, 200).await.unwrap());
    past(200).await;
    let b_lease = s
        .try_acquire_lease(Network::Litecoin, "b", MINUTE_MS)
        .await
        .unwrap()
        .expect("a lease that ran out is granted");
    assert!(b_lease.token > a.token, "{b_lease:?} after {a:?}");
    assert!(
        !s.renew_lease(&a, MINUTE_MS).await.unwrap(),
        "the former holder cannot renew"
    );
    let holders = s.lease_holders().await.unwrap();
    let ltc = holders
        .iter()
        .find(|h| h.network == Network::Litecoin)
        .unwrap();
    assert_eq!(
        (ltc.holder.as_str(), ltc.token, ltc.expired),
        ("b", b_lease.token, false)
    );
    assert!(ltc.expires_at > ltc.acquired_at);
}

async fn a_former_holder_writes_nothing_after_a_takeover(b: Backend) {
    let db = TestDb::new(b).await;
    let s = &db.store;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let network = Network::Litecoin;
    let old = s
        .try_acquire_lease(network, "old", 200)
        .await
        .unwrap()
        .unwrap();
    let old_store = s.fenced(old);
    let old_ingest = Ingest::new(old_store.clone(), clock.clone());
    old_store
        .ensure_chain_state(network, clock.now_ms())
        .await
        .expect("the holder writes");
    old_ingest
        .apply(network, &[block(1)])
        .await
        .expect("the holder connects a block");

    let state_before = s
        .chain_status(network)
        .await
        .unwrap()
        .unwrap()
        .watcher_state;
    past(200).await;
    let new = s
        .try_acquire_lease(network, "new", MINUTE_MS)
        .await
        .unwrap()
        .unwrap();
    let lost = |e: &StoreError| {
        matches!(e, StoreError::LeaseLost { network: n, token, current }
            if *n == network && *token == old.token && *current == Some(new.token))
    };
    match old_ingest.apply(network, &[block(2)]).await {
        Err(IngestError::Store(e)) if lost(&e) => {
            let text = e.to_string();
            assert!(
                text.contains("litecoin") && text.contains("nothing was written"),
                "{text}"
            );
        }
        other => panic!("a former holder's block write must be refused: {other:?}"),
    }
    match old_store
        .record_watcher_trouble(network, "degraded", "stale", clock.now_ms())
        .await
    {
        Err(e) if lost(&e) => {}
        other => panic!("a former holder's state write must be refused: {other:?}"),
    }
    let status = s.chain_status(network).await.unwrap().unwrap();
    assert_eq!(status.cursor_height, Some(1), "block 2 was not written");
    assert_eq!(status.watcher_state, state_before, "no state written");
    assert_eq!(
        db.store
            .count_raw("SELECT COUNT(*) FROM blocks")
            .await
            .unwrap(),
        1
    );

    // The new holder carries on from the stored cursor.
    let new_ingest = Ingest::new(s.fenced(new), clock.clone());
    new_ingest
        .apply(network, &[block(2)])
        .await
        .expect("the new holder writes");
    let status = s.chain_status(network).await.unwrap().unwrap();
    assert_eq!(status.cursor_height, Some(2));

    // An unfenced handle (reconcile, the API) is not held to any lease.
    s.record_watcher_trouble(network, "degraded", "by hand", clock.now_ms())
        .await
        .unwrap();
    // A token never granted is refused like a lost one.
    let forged = s.fenced(Lease {
        network,
        token: new.token + 10,
    });
    assert!(matches!(
        forged.ensure_chain_state(network, 0).await,
        Err(StoreError::LeaseLost { .. })
    ));
}

async fn a_released_lease_is_taken_at_once(b: Backend) {
    let db = TestDb::new(b).await;
    let s = &db.store;
    let a = s
        .try_acquire_lease(Network::Solana, "a", MINUTE_MS)
        .await
        .unwrap()
        .unwrap();
    s.release_lease(&a).await.unwrap();
    let next = s
        .try_acquire_lease(Network::Solana, "b", MINUTE_MS)
        .await
        .unwrap()
        .expect("a released lease needs no waiting");
    assert_eq!(next.token, a.token + 1);
    // Releasing a lease no longer held changes nothing.
    s.release_lease(&a).await.unwrap();
    assert!(s.renew_lease(&next, MINUTE_MS).await.unwrap());

    // The sole instance of an SQLite file takes a lease its killed
    // predecessor left, without waiting it out; the predecessor's is void.
    let taken = s
        .take_lease(Network::Solana, "restarted", MINUTE_MS)
        .await
        .unwrap();
    assert_eq!(taken.token, next.token + 1);
    assert!(!s.renew_lease(&next, MINUTE_MS).await.unwrap());
}

//! Account keys (issue 21, found 7): the derivation counter belongs to one
//! key, named by its fingerprint; an instance configured with another key
//! is refused at start and cannot issue; a key that does not derive the
//! stored addresses is refused; a rotation starts the new key at index 0
//! (inside any wallet's gap limit) and keeps the old addresses watched.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::intents::{AddressDeriver, IntentError};
use paywatch::keys::{check_keys, fingerprint, rotate, KeyError};
use paywatch_core::Network;

on_both_databases!(
    an_instance_with_another_key_is_refused_and_a_rotation_starts_the_new_key_at_index_zero,
    a_key_that_does_not_derive_the_stored_addresses_is_refused_at_start,
);

/// A stand-in for BIP44: account `0xa…` or `0xb…` derives its own addresses.
#[derive(Debug)]
struct Account(u64);

impl AddressDeriver for Account {
    fn network(&self) -> Network {
        Network::Ethereum
    }

    fn derive(&self, index: u32) -> Result<String, String> {
        Ok(format!("0x{:040x}", (self.0 << 32) + u64::from(index)))
    }
}

const A: u64 = 0xa;
const B: u64 = 0xb;

fn keyed(account: u64) -> HashMap<Network, Arc<dyn AddressDeriver>> {
    HashMap::from([(
        Network::Ethereum,
        Arc::new(Account(account)) as Arc<dyn AddressDeriver>,
    )])
}

async fn issue(h: &Harness, reference: &str) -> Result<String, IntentError> {
    Ok(h.try_create("order", reference, "ETH", "100")
        .await?
        .address)
}

async fn an_instance_with_another_key_is_refused_and_a_rotation_starts_the_new_key_at_index_zero(
    backend: Backend,
) {
    let mut h = Harness::new(backend, Network::Ethereum, 2).await;
    let first = check_keys(&h.store, &keyed(A)).await.unwrap();
    assert_eq!(
        first[0].fingerprint,
        fingerprint(Network::Ethereum, &Account(A)).unwrap()
    );
    h.use_deriver(Arc::new(Account(A)));
    for n in 0..3 {
        assert_eq!(
            issue(&h, &format!("a-{n}")).await.unwrap(),
            Account(A).derive(n).unwrap()
        );
    }

    // A second instance configured with key B: refused at start, naming the
    // rotation, and unable to take an index even if it ran.
    let refused = check_keys(&h.store, &keyed(B)).await.unwrap_err();
    assert!(
        matches!(refused, KeyError::NotTheKeyInUse { .. }),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("paywatch keys rotate --network ethereum"),
        "{refused}"
    );
    h.use_deriver(Arc::new(Account(B)));
    let err = issue(&h, "b-early").await.unwrap_err();
    assert!(err.to_string().contains("not this instance's"), "{err}");
    h.use_deriver(Arc::new(Account(A)));
    assert_eq!(
        issue(&h, "a-3").await.unwrap(),
        Account(A).derive(3).unwrap(),
        "no index was lost"
    );

    // The rotation: B from index 0; A retired at 4, its addresses watched.
    let rotation = rotate(
        &h.store,
        Network::Ethereum,
        keyed(B).get(&Network::Ethereum),
        h.clock.now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(rotation.retired_next_index, 4);
    h.use_deriver(Arc::new(Account(B)));
    assert_eq!(
        issue(&h, "b-0").await.unwrap(),
        Account(B).derive(0).unwrap()
    );
    let watched: Vec<String> = h
        .store
        .issued_addresses(Network::Ethereum, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    for n in 0..4 {
        assert!(watched.contains(&Account(A).derive(n).unwrap()));
    }
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE key_fingerprint IS NULL")
            .await,
        0,
        "every derived address names its key"
    );

    // The old key now: retired at start, and cannot issue.
    let retired = check_keys(&h.store, &keyed(A)).await.unwrap_err();
    assert!(matches!(retired, KeyError::Retired { .. }), "{retired}");
    h.use_deriver(Arc::new(Account(A)));
    assert!(issue(&h, "a-late").await.is_err());
    let again = rotate(
        &h.store,
        Network::Ethereum,
        keyed(B).get(&Network::Ethereum),
        h.clock.now_ms(),
    )
    .await
    .unwrap_err();
    assert!(matches!(again, KeyError::AlreadyInUse { .. }), "{again}");
    check_keys(&h.store, &keyed(B)).await.unwrap();
}

async fn a_key_that_does_not_derive_the_stored_addresses_is_refused_at_start(backend: Backend) {
    let mut h = Harness::new(backend, Network::Ethereum, 2).await;
    h.use_deriver(Arc::new(Account(A)));
    for n in 0..3 {
        issue(&h, &format!("a-{n}")).await.unwrap();
    }
    // As migration 0032 found them: issued before keys were named.
    h.store
        .execute_raw("UPDATE address_derivation SET key_fingerprint = NULL")
        .await
        .unwrap();
    h.store
        .execute_raw("UPDATE addresses SET key_fingerprint = NULL")
        .await
        .unwrap();

    let refused = check_keys(&h.store, &keyed(B)).await.unwrap_err();
    match &refused {
        KeyError::DoesNotDerive {
            index,
            stored,
            derived,
            ..
        } => {
            assert_eq!(*index, 0);
            assert_eq!(stored, &Account(A).derive(0).unwrap());
            assert_eq!(derived, &Account(B).derive(0).unwrap());
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE key_fingerprint IS NOT NULL")
            .await,
        0,
        "a refused key names nothing"
    );

    let adopted = check_keys(&h.store, &keyed(A)).await.unwrap();
    assert!(adopted[0].adopted);
    assert_eq!(adopted[0].next_index, 3);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE key_fingerprint IS NULL")
            .await,
        0
    );
    assert_eq!(
        issue(&h, "a-3").await.unwrap(),
        Account(A).derive(3).unwrap()
    );
}

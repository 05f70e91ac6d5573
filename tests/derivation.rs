//! Address derivation behind `AddressDeriver`: each index once, persisted,
//! skipping addresses that exist already, on both databases.

#[macro_use]
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use common::{rates, Backend, Counting, Harness};
use paywatch::clock::Clock;
use paywatch::intents::{AddressDeriver, FixedRates, IntentPolicy, IntentService, RateBook};
use paywatch_core::{Network, WatchSet};

on_both_databases!(
    derived_addresses_take_each_index_once_and_skip_addresses_that_exist,
    concurrent_creations_never_derive_the_same_address,
);

fn deriving_service(h: &Harness) -> (IntentService, Arc<WatchSet>) {
    let clock: Arc<dyn Clock> = h.clock.clone();
    let watch = Arc::new(WatchSet::new(Network::Ethereum));
    let service = IntentService::new(
        h.store.clone(),
        RateBook::new(
            Arc::new(FixedRates::new(rates(), clock.clone())),
            true,
            clock.clone(),
        ),
        IntentPolicy {
            enabled: HashSet::from([Network::Ethereum]),
            expiry_secs: 1800,
            topup_amounts_cents: vec![10_000],
            quote_decimals: HashMap::new(),
            confirm_window_secs: HashMap::new(),
            max_open_per_reference: paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE,
        },
        HashMap::from([(
            Network::Ethereum,
            Arc::new(Counting) as Arc<dyn AddressDeriver>,
        )]),
        HashMap::from([(Network::Ethereum, watch.clone())]),
        clock,
    );
    (service, watch)
}

async fn derived_addresses_take_each_index_once_and_skip_addresses_that_exist(b: Backend) {
    let h = Harness::new(b, Network::Ethereum, 1).await;
    // Index 1's address was imported into the pool earlier: it must be skipped.
    h.store
        .import_addresses(
            Network::Ethereum,
            &[format!("0x{:040x}", 0xd00d_0001u64)],
            h.clock.now_ms(),
        )
        .await
        .unwrap();
    let (service, watch) = deriving_service(&h);
    let first = service
        .create(&h.request("order", "d-1", "ETH", "100"))
        .await
        .unwrap();
    let second = service
        .create(&h.request("order", "d-2", "ETH", "100"))
        .await
        .unwrap();
    assert_eq!(first.address, format!("0x{:040x}", 0xd00d_0000u64));
    assert_eq!(
        second.address,
        format!("0x{:040x}", 0xd00d_0002u64),
        "index 1 exists already"
    );
    assert!(watch.contains(&first.address) && watch.contains(&second.address));
    assert_eq!(
        h.count(
            "SELECT COUNT(*) FROM addresses WHERE origin = 'derived' AND issued_at IS NOT NULL"
        )
        .await,
        2
    );
    assert_eq!(
        h.count("SELECT next_index FROM address_derivation WHERE network = 'ethereum'")
            .await,
        3
    );
    // The imported address is still in the pool, never issued by derivation.
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE origin = 'pool' AND issued_at IS NULL")
            .await,
        1
    );
}

async fn concurrent_creations_never_derive_the_same_address(b: Backend) {
    let h = Harness::new(b, Network::Ethereum, 1).await;
    let (service, _) = deriving_service(&h);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let service = service.clone();
        let req = h.request("order", &format!("c-{i}"), "ETH", "100");
        tasks.push(tokio::spawn(async move { service.create(&req).await }));
    }
    let mut addresses = HashSet::new();
    for t in tasks {
        let intent = t.await.unwrap().expect("created");
        assert!(addresses.insert(intent.address), "an address issued twice");
    }
    assert_eq!(
        h.count("SELECT next_index FROM address_derivation WHERE network = 'ethereum'")
            .await,
        16
    );
}

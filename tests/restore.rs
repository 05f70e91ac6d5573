//! Restores (issue 21, found 1): a database restored from a copy taken before
//! its last write must never hand a used address to a new customer, repeat
//! an id a storefront or webhook receiver keeps, or lose the payments made
//! to what the lost window issued. `paywatch restore-check` moves past the
//! window; these tests take a real copy (SQLite's `VACUUM INTO` through
//! `paywatch backup`'s code, `pg_dump` on PostgreSQL), go on issuing and
//! paying, restore the copy, run the procedure, and look.

#[macro_use]
mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{postgres_admin_url, Backend, Counting, Harness};
use paywatch::clock::Clock;
use paywatch::intents::AddressDeriver;
use paywatch::reconcile::Status;
use paywatch::restore::{restore_check, RestoreError, RestorePlan, ID_GAP};
use paywatch::store::{IntentRecord, Store};
use paywatch_core::{Asset, Network};

on_both_databases!(
    a_restore_never_reissues_an_address_or_repeats_an_id_and_finds_the_lost_windows_payments,
    a_restore_derives_and_watches_the_addresses_a_derived_network_lost,
    a_restore_check_refuses_while_an_instance_holds_a_lease,
);

/// A copy of the harness's database as it stands: a file on SQLite, a
/// `pg_dump` archive on PostgreSQL.
async fn take_copy(h: &Harness, dir: &Path) -> std::path::PathBuf {
    let copy = dir.join("copy");
    if h.db.url.starts_with("sqlite") {
        h.store.backup_to(&copy).await.expect("backup");
    } else {
        let out = Command::new("pg_dump")
            .args(["--format=custom", "--file"])
            .arg(&copy)
            .arg(&h.db.url)
            .output()
            .expect("pg_dump runs (apt package postgresql-client)");
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    copy
}

/// Restores `copy` as a new database and returns its URL.
async fn restore_copy(h: &Harness, copy: &Path, dir: &Path) -> String {
    if h.db.url.starts_with("sqlite") {
        let restored = dir.join("restored.db");
        std::fs::copy(copy, &restored).unwrap();
        return format!("sqlite://{}", restored.display());
    }
    let admin = postgres_admin_url();
    let name = format!(
        "{}_restored",
        h.db.url.rsplit('/').next().expect("database name")
    );
    let admin_store = Store::connect(&format!("{admin}/postgres")).await.unwrap();
    admin_store
        .execute_raw(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    admin_store.close().await;
    let url = format!("{admin}/{name}");
    let out = Command::new("pg_restore")
        .args(["--no-owner", "--exit-on-error", "--dbname"])
        .arg(&url)
        .arg(copy)
        .output()
        .expect("pg_restore runs");
    assert!(
        out.status.success(),
        "pg_restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    url
}

async fn pay_in_full(h: &mut Harness, intent: &IntentRecord, asset: Asset) {
    h.pay(&intent.address, asset, intent.amount_due);
    h.mine(3);
    h.sync().await;
}

async fn highest(h: &Harness, sql: &str) -> i64 {
    h.count(sql).await
}

async fn a_restore_never_reissues_an_address_or_repeats_an_id_and_finds_the_lost_windows_payments(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(backend, Network::Bitcoin, 2).await;
    h.import_pool(100).await;
    let before = h.create("order", "before-1", "BTC", "100").await;
    pay_in_full(&mut h, &before, Asset::Btc).await;
    assert_eq!(h.intent(before.id).await.status, Status::Paid);

    let copy = take_copy(&h, dir.path()).await;

    // The hour the restore will lose: an order paid, a top-up paid and
    // credited, one left open, and everything the feed said about them.
    h.clock.advance_secs(600);
    let paid = h.create("order", "lost-1", "BTC", "100").await;
    let topup = h.create("topup", "lost-2", "BTC", "100").await;
    let open = h.create("order", "lost-3", "BTC", "100").await;
    pay_in_full(&mut h, &paid, Asset::Btc).await;
    pay_in_full(&mut h, &topup, Asset::Btc).await;
    assert_eq!(h.intent(paid.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 10_000);
    let lost_addresses: HashSet<String> = [&paid, &topup, &open]
        .iter()
        .map(|i| i.address.clone())
        .collect();
    let seen_cursor = highest(&h, "SELECT MAX(seq) FROM outbox").await;
    let seen_delivery = highest(&h, "SELECT MAX(id) FROM outbox").await;
    let seen_intent = open.id;
    let seen_entry = highest(&h, "SELECT MAX(id) FROM ledger_entries").await;

    // The restore: the copy knows nothing of that hour.
    h.clock.advance_secs(600);
    let url = restore_copy(&h, &copy, dir.path()).await;
    h.restart_on(&url).await;
    assert!(h.store.intent(paid.id).await.unwrap().is_none());
    assert_eq!(h.balance("acct-1").await, 0, "the copy predates the credit");

    let report = restore_check(
        &h.store,
        &HashMap::new(),
        RestorePlan {
            now_ms: h.clock.now_ms(),
            ..RestorePlan::default()
        },
    )
    .await
    .expect("restore-check");
    let bitcoin = &report.networks[0];
    assert_eq!(bitcoin.network, "bitcoin");
    // One address issued in the copy's busiest hour, a 20-minute window
    // (two hours, counted generously), twice over: the floor of 20 wins.
    assert_eq!(
        (bitcoin.peak_per_hour, bitcoin.wanted, bitcoin.pool_marked),
        (1, 20, 20)
    );
    // Instances start after the check: their watch sets hold the marks.
    h.restart_process().await;

    // The lost window's payments are found again as the watcher re-reads
    // the chain from the copy's cursor, and wait for a person.
    h.sync().await;
    let found = h.store.lost_window_transfers(50).await.unwrap();
    let found_at: HashSet<&str> = found.iter().map(|t| t.to_address.as_str()).collect();
    assert_eq!(
        found_at,
        HashSet::from([paid.address.as_str(), topup.address.as_str()]),
        "{found:?}"
    );
    for t in &found {
        assert_eq!(t.amount, paid.amount_due.0.to_string(), "{t:?}");
    }

    // No address the lost window handed out is handed out again.
    let mut issued = HashSet::new();
    let mut first_new = None;
    for n in 0..30 {
        let i = h.create("order", &format!("after-{n}"), "BTC", "100").await;
        assert!(
            !lost_addresses.contains(&i.address) && i.address != before.address,
            "address {} issued again to {}",
            i.address,
            i.reference
        );
        assert!(issued.insert(i.address.clone()));
        first_new.get_or_insert(i);
    }
    let first_new = first_new.unwrap();
    assert!(
        first_new.id > seen_intent,
        "intent id {} was given out before the restore (up to {seen_intent})",
        first_new.id
    );
    assert!(first_new.id >= seen_intent + ID_GAP - 10);
    pay_in_full(&mut h, &first_new, Asset::Btc).await;
    assert_eq!(h.intent(first_new.id).await.status, Status::Paid);

    // The feed: a storefront at the cursor it reached before the restore
    // reads the announcement next, and no cursor or delivery id repeats.
    let events = h.store.events_after(seen_cursor, 100).await.unwrap();
    let announcement = &events[0];
    assert_eq!(announcement.topic, "restore");
    let payload: serde_json::Value = serde_json::from_str(&announcement.payload).unwrap();
    assert_eq!(payload["event"], "restore.checked");
    assert_eq!(payload["restore_id"], report.restore_id);
    assert_eq!(payload["addresses_marked"]["bitcoin"], 20);
    assert!(payload["lost_since_ms"].as_i64().unwrap() < paid.created_at_ms);
    assert!(
        events[1..]
            .iter()
            .any(|e| e.intent_id == Some(first_new.id)),
        "the new order's events follow it: {events:?}"
    );
    let new_rows = h
        .rows(&format!(
            "SELECT id FROM outbox WHERE seq > {seen_cursor} ORDER BY id"
        ))
        .await;
    assert!(new_rows.iter().all(|r| r.int("id") > seen_delivery));
    assert!(report.next_ids["ledger_entries"] > seen_entry);
    assert!(report.next_ids["outbox"] > seen_delivery);

    // The money rules hold, and a second check only moves further.
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    h.clock.advance_secs(60);
    let again = restore_check(
        &h.store,
        &HashMap::new(),
        RestorePlan {
            now_ms: h.clock.now_ms(),
            addresses_per_network: Some(5),
            ..RestorePlan::default()
        },
    )
    .await
    .unwrap();
    assert!(again.feed_cursor > report.feed_cursor + ID_GAP - 1);
    assert_eq!(again.networks[0].pool_marked, 5);
}

async fn a_restore_derives_and_watches_the_addresses_a_derived_network_lost(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(backend, Network::Ethereum, 2).await;
    h.use_deriver(Arc::new(Counting));
    let before = h.create("order", "before-1", "ETH", "100").await;
    assert_eq!(before.address, Counting.derive(0).unwrap());
    let copy = take_copy(&h, dir.path()).await;

    h.clock.advance_secs(300);
    let lost = h.create("order", "lost-1", "ETH", "100").await;
    assert_eq!(lost.address, Counting.derive(1).unwrap());

    h.clock.advance_secs(300);
    let url = restore_copy(&h, &copy, dir.path()).await;
    h.restart_on(&url).await;
    let derivers = HashMap::from([(
        Network::Ethereum,
        Arc::new(Counting) as Arc<dyn AddressDeriver>,
    )]);
    let report = restore_check(
        &h.store,
        &derivers,
        RestorePlan {
            now_ms: h.clock.now_ms(),
            ..RestorePlan::default()
        },
    )
    .await
    .unwrap();
    let ethereum = &report.networks[0];
    assert_eq!(
        (
            ethereum.derivation_from,
            ethereum.derivation_to,
            ethereum.derived_marked
        ),
        (Some(1), Some(21), 20)
    );
    assert!(!ethereum.derived_unwatched);
    h.restart_process().await;

    // The customer of the lost order pays after the restore: seen, listed.
    h.pay(&lost.address, Asset::Eth, lost.amount_due);
    h.mine(3);
    h.sync().await;
    let found = h.store.lost_window_transfers(10).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].to_address, lost.address);

    let next = h.create("order", "after-1", "ETH", "100").await;
    assert_eq!(next.address, Counting.derive(21).unwrap());
}

async fn a_restore_check_refuses_while_an_instance_holds_a_lease(backend: Backend) {
    let mut h = Harness::new(backend, Network::Bitcoin, 2).await;
    h.import_pool(30).await;
    h.create("order", "o-1", "BTC", "100").await;
    let lease = h
        .store
        .try_acquire_lease(Network::Bitcoin, "instance-a", 30_000)
        .await
        .unwrap()
        .expect("lease");
    let plan = RestorePlan {
        now_ms: h.clock.now_ms(),
        ..RestorePlan::default()
    };
    let refused = restore_check(&h.store, &HashMap::new(), plan.clone())
        .await
        .unwrap_err();
    assert!(matches!(refused, RestoreError::InstancesRunning { .. }));
    assert!(
        refused.to_string().contains("instance-a (bitcoin)"),
        "{refused}"
    );
    assert_eq!(h.store.free_addresses(Network::Bitcoin).await.unwrap(), 29);
    // Handed back, as a stopping instance does: the check goes ahead.
    h.store.release_lease(&lease).await.unwrap();
    restore_check(&h.store, &HashMap::new(), plan)
        .await
        .unwrap();
    assert_eq!(h.store.free_addresses(Network::Bitcoin).await.unwrap(), 9);
    let _ = &mut h;
}

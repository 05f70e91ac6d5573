//! A database as the release before the money path (migrations up to 0010)
//! left it, upgraded in place: what it held keeps its meaning.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{Backend, TestDb};
use paywatch::clock::{Clock, ManualClock};
use paywatch::ingest::Ingest;
use paywatch::reconcile::{Reconciler, Status};
use paywatch_core::{Amount, Asset, AssetId, BlockRef, Network, Transfer};

on_both_databases!(
    a_database_from_before_the_money_path_keeps_its_meaning_after_the_upgrade,
    internal_eth_keyed_among_all_frames_is_met_again_under_its_new_key_without_a_second_row,
);

const NOW: i64 = 1_700_000_000_000;
const ETH_BLOCK: &str = "0xb10c";
const ETH_TX: &str = "0x7a11";
const SHOP_ETH: &str = "0x00000000000000000000000000000000000000aa";

async fn a_database_from_before_the_money_path_keeps_its_meaning_after_the_upgrade(b: Backend) {
    let db = TestDb::empty(b).await;
    let store = db.store.clone();
    store.migrate_until(10).await.unwrap();
    for sql in [
        // A late LTC top-up that support accepted (credited), and an order
        // whose payment a reorg took back.
        "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, amount_due, \
         usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, status, paid_at, updated_at) \
         VALUES ('topup', 'late', 'acct', 'LTC', 'litecoin', 'rltc1qlate', 8, '100000000', 10000, '100', \
         'fixed', 1, 1, 2, 'resolved', 3, 3)",
        "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, amount_due, \
         usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, status, exception, paid_at, \
         reversed_at, updated_at) VALUES ('order', 'gone', 'acct', 'USDT', 'ethereum', \
         '0x00000000000000000000000000000000000000aa', 6, '100000000', 10000, '1', 'par', 1, 1, 2, \
         'needs_review', 'reversed', 3, 4, 4)",
        "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at) \
         VALUES ('topup', 'late', 1, 'acct', 10000, 3)",
        "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at) \
         VALUES ('order', 'gone', 2, 'acct', 10000, 3)",
        "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, created_at, memo) \
         VALUES ('acct', 10000, 'topup_credit', 'topup:1', 1, 3, 'topup late')",
        "INSERT INTO audit_log (at, role, actor, action, intent_id, note, action_key) \
         VALUES (3, 'support', 'ana', 'accept', 1, 'paid 2 minutes late', 'k1')",
        "INSERT INTO chain_state (network, cursor_height, cursor_hash, final_height, updated_at) \
         VALUES ('litecoin', 10, 'ltc10', 10, 1)",
        "INSERT INTO chain_state (network, cursor_height, cursor_hash, start_height, final_height, updated_at) \
         VALUES ('ethereum', 7, '0xb10c', 7, 7, 1)",
        "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
         VALUES ('ethereum', '0xb10c', 7, '0xb10b', 5, 5)",
        "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
         to_address, amount, tx_status, first_seen_at) VALUES ('litecoin', 'LTC', 'ltctx', 0, 'ltc5', 5, 5, \
         'rltc1qlate', '100000000', 'success', 6)",
        // A USDT payment keyed by its block-wide log index, 85.
        "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
         to_address, amount, tx_status, first_seen_at) VALUES ('ethereum', 'USDT', '0x7a11', 85, '0xb10c', \
         7, 5, '0x00000000000000000000000000000000000000aa', '100000000', 'success', 6)",
    ] {
        store.execute_raw(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    store.migrate().await.expect("the upgrade applies");

    // Support's accept made before decisions were recorded: via support, and
    // nothing on chain can undo it (it named no payments).
    assert_eq!(settlement(&store, 1).await, ("support".to_owned(), None, 1));
    // The reversal is now the settlement's too.
    assert_eq!(
        settlement(&store, 2).await,
        ("chain".to_owned(), Some(4), 1)
    );
    // Money already final has a time it became final by (its first sighting).
    assert_eq!(
        store
            .count_raw("SELECT final_at FROM transfers WHERE txid = 'ltctx'")
            .await
            .unwrap(),
        6
    );
    // The old token key moved out of the new keys' range.
    assert_eq!(
        store
            .count_raw("SELECT idx FROM transfers WHERE txid = '0x7a11'")
            .await
            .unwrap(),
        85 + (1 << 32)
    );
    let check = store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);

    // Reconcile reads the upgraded rows and changes nothing support decided.
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW));
    store
        .execute_raw(
            "INSERT INTO reconcile_queue (network, address) VALUES ('litecoin', 'rltc1qlate')",
        )
        .await
        .unwrap();
    let reconciler = Reconciler::new(store.clone(), clock.clone(), HashMap::new(), 100);
    reconciler.run_until_idle().await.unwrap();
    let i = store.intent(1).await.unwrap().unwrap();
    assert_eq!(i.status, Status::Resolved, "{:?}", i.reason);
    assert_eq!(store.balance_cents("acct").await.unwrap(), 10_000);

    // A rescan of the old block meets the same log under its new key (its
    // place among the transaction's Transfer logs): the old row is that
    // payment, nothing is recorded twice.
    let ingest = Ingest::new(store.clone(), clock);
    let added = ingest
        .backfill(
            Network::Ethereum,
            &BlockRef {
                height: 7,
                hash: ETH_BLOCK.into(),
                parent: "0xb10b".into(),
            },
            0,
            &[Transfer {
                network: Network::Ethereum,
                asset: AssetId::Known(Asset::Usdt),
                txid: ETH_TX.into(),
                index: 0,
                to: SHOP_ETH.into(),
                from: None,
                amount: Amount(100_000_000),
                success: true,
                matures_at: None,
            }],
        )
        .await
        .unwrap();
    assert_eq!(added, 0);
    assert_eq!(
        store
            .count_raw("SELECT COUNT(*) FROM transfers WHERE txid = '0x7a11'")
            .await
            .unwrap(),
        1
    );
}

/// The settlement of `intent`: how it was made, when it was reversed, and
/// how many credits it has had.
async fn settlement(store: &paywatch::store::Store, intent: i64) -> (String, Option<i64>, i64) {
    let one = |column: &str| format!("SELECT {column} FROM settlements WHERE intent_id = {intent}");
    let via = store
        .count_raw(&one(
            "CASE via WHEN 'support' THEN 1 WHEN 'chain' THEN 2 ELSE 3 END",
        ))
        .await
        .unwrap();
    let reversed = store
        .count_raw(&one("COALESCE(reversed_at, -1)"))
        .await
        .unwrap();
    let credits = store.count_raw(&one("credits")).await.unwrap();
    let via = ["", "support", "chain", "balance"][via as usize];
    (via.to_owned(), (reversed >= 0).then_some(reversed), credits)
}

/// Issue 37, found 10: internal ETH was keyed by its place among all call
/// frames (precompile calls included, which clients list differently); it
/// is now keyed among the value-moving frames. A payment stored the old
/// way (2^31 + 3), then met again by a rescan under its new key
/// (2^31 + 1), is that payment: nothing is recorded twice, and a claim on
/// it moves with it.
async fn internal_eth_keyed_among_all_frames_is_met_again_under_its_new_key_without_a_second_row(
    b: Backend,
) {
    let db = TestDb::empty(b).await;
    let store = db.store.clone();
    store.migrate_until(50).await.unwrap();
    let old_key: i64 = (1 << 31) + 3;
    for sql in [
        "INSERT INTO chain_state (network, cursor_height, cursor_hash, start_height, final_height, updated_at) \
         VALUES ('ethereum', 7, '0xb10c', 7, 7, 1)"
            .to_owned(),
        "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
         VALUES ('ethereum', '0xb10c', 7, '0xb10b', 5, 5)"
            .to_owned(),
        format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, amount, tx_status, first_seen_at) VALUES ('ethereum', 'ETH', '0x5afe', {old_key}, \
             '0xb10c', 7, 5, '{SHOP_ETH}', '40000000000000000', 'success', 6)"
        ),
        // Top-level ETH keeps its key, 2^31.
        format!(
            "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
             to_address, amount, tx_status, first_seen_at) VALUES ('ethereum', 'ETH', '0x70b1', {}, \
             '0xb10c', 7, 5, '{SHOP_ETH}', '1', 'success', 6)",
            1i64 << 31
        ),
    ] {
        store.execute_raw(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    store.migrate().await.expect("the upgrade applies");
    assert_eq!(
        store
            .count_raw("SELECT idx FROM transfers WHERE txid = '0x70b1'")
            .await
            .unwrap(),
        1 << 31,
        "top-level ETH keeps its key"
    );

    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW));
    let ingest = Ingest::new(store.clone(), clock);
    let added = ingest
        .backfill(
            Network::Ethereum,
            &BlockRef {
                height: 7,
                hash: ETH_BLOCK.into(),
                parent: "0xb10b".into(),
            },
            0,
            &[Transfer {
                network: Network::Ethereum,
                asset: AssetId::Known(Asset::Eth),
                txid: "0x5afe".into(),
                index: (1 << 31) + 1,
                to: SHOP_ETH.into(),
                from: None,
                amount: Amount(40_000_000_000_000_000),
                success: true,
                matures_at: None,
            }],
        )
        .await
        .unwrap();
    assert_eq!(added, 0, "the stored payment, met under its new key");
    assert_eq!(
        store
            .count_raw("SELECT COUNT(*) FROM transfers WHERE txid = '0x5afe'")
            .await
            .unwrap(),
        1
    );
}

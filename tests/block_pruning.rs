//! Block pruning (issue 21, found 5): a year of blocks is kept to what
//! money and reorgs need. Below the reorg window and the retention, only the
//! blocks holding a transfer and the block after each stay; a rescan from
//! below what was pruned is refused, naming the height to start from.

#[macro_use]
mod common;

use common::{Backend, TestDb};
use paywatch::store::{RescanOutcome, RescanRefusal};
use paywatch_core::Network;

on_both_databases!(old_blocks_are_pruned_but_those_money_needs_stay);

const DAY_MS: i64 = 86_400_000;
const NOW: i64 = 1_800_000_000_000;

async fn old_blocks_are_pruned_but_those_money_needs_stay(backend: Backend) {
    let db = TestDb::new(backend).await;
    let s = &db.store;
    s.ensure_chain_state(Network::Bitcoin, NOW).await.unwrap();
    // 300 blocks; the first 250 connected 100 days ago, the rest today.
    for h in 1..=300i64 {
        let connected = if h <= 250 {
            NOW - 100 * DAY_MS
        } else {
            NOW - 1_000
        };
        s.execute_raw(&format!(
            "INSERT INTO blocks (network, hash, height, parent, block_time, connected_at) \
             VALUES ('bitcoin', 'b{h}', {h}, 'b{}', {h}, {connected})",
            h - 1
        ))
        .await
        .unwrap();
    }
    // A payment in block 100.
    s.execute_raw(
        "INSERT INTO transfers (network, asset, txid, idx, block_hash, block_height, block_time, \
         to_address, amount, tx_status, first_seen_at) \
         VALUES ('bitcoin', 'BTC', 'tx-100', 0, 'b100', 100, 100, 'bc1qpaid', 5000, 'success', 100)",
    )
    .await
    .unwrap();
    s.record_chain_progress(Network::Bitcoin, 300, 290, NOW)
        .await
        .unwrap();
    s.execute_raw("UPDATE chain_state SET start_height = 1 WHERE network = 'bitcoin'")
        .await
        .unwrap();

    // 90 days kept, a reorg window of 20: below min(250 + 1, 290 - 20).
    let (pruned, below) = s
        .prune_blocks(Network::Bitcoin, 20, NOW - 90 * DAY_MS, 64)
        .await
        .unwrap();
    assert_eq!(below, Some(251));
    assert_eq!(pruned, 248, "blocks 1 to 250 but 100 and 101");
    let kept = db
        .store
        .count_raw("SELECT COUNT(*) FROM blocks WHERE height < 251")
        .await
        .unwrap();
    assert_eq!(kept, 2);
    for h in [100, 101, 251, 300] {
        assert_eq!(
            s.count_raw(&format!("SELECT COUNT(*) FROM blocks WHERE height = {h}"))
                .await
                .unwrap(),
            1,
            "block {h}"
        );
    }
    // Again: nothing more until blocks age or finality moves.
    let (again, below) = s
        .prune_blocks(Network::Bitcoin, 20, NOW - 90 * DAY_MS, 64)
        .await
        .unwrap();
    assert_eq!((again, below), (0, Some(251)));

    match s
        .request_rescan(Network::Bitcoin, 50, "operator", NOW)
        .await
        .unwrap()
    {
        RescanOutcome::Refused(why @ RescanRefusal::Pruned { .. }) => {
            let said = why.to_string();
            assert!(
                said.contains("below height 251") && said.contains("start at 251"),
                "{said}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.request_rescan(Network::Bitcoin, 260, "operator", NOW)
            .await
            .unwrap(),
        RescanOutcome::Queued(_)
    ));
}

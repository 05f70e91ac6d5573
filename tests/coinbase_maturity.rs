//! Coinbase outputs on a real Litecoin Core regtest node (issue 37, found
//! 8): a block mined straight to an issued address pays it in the
//! coinbase, which cannot be spent for 100 blocks and never comes back if
//! its block is orphaned. Some pools pay miners this way. Such money is
//! not final at the network's 6 confirmations, only at 100.

#[macro_use]
mod common;

use common::ltc::{settings_for, Daemon, Options, Via};
use common::{Backend, TestDb};
use paywatch::reconcile::Status;
use paywatch_core::Amount;
use paywatch_testkit::{ElectrumX, LitecoinNode, NodeOptions};
use serde_json::json;

on_both_databases!(
    a_coinbase_paying_an_issued_address_is_final_only_at_100_confirmations,
    a_coinbase_read_through_electrum_is_final_only_at_100_confirmations,
);

async fn a_coinbase_paying_an_issued_address_is_final_only_at_100_confirmations(b: Backend) {
    coinbase_is_final_only_at_100_confirmations(b, Via::Node).await;
}

/// ElectrumX tells the coinbase by its merkle proof's position, 0.
async fn a_coinbase_read_through_electrum_is_final_only_at_100_confirmations(b: Backend) {
    coinbase_is_final_only_at_100_confirmations(b, Via::Electrum).await;
}

async fn coinbase_is_final_only_at_100_confirmations(b: Backend, via: Via) {
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    let electrum = match via {
        Via::Electrum => Some(
            ElectrumX::start(&node)
                .await
                .unwrap_or_else(|e| panic!("ElectrumX: {e}")),
        ),
        Via::Node => None,
    };
    let db = TestDb::new(b).await;
    let opts = Options {
        backend: b,
        via,
        ..Options::default()
    };
    let settings = settings_for(&db.url, &node, electrum.as_ref(), &opts);
    let daemon = Daemon::start(db, settings).await;
    daemon
        .wait_cursor(node.block_count().await.expect("block count"))
        .await;

    // 2,000 USD at 100 USD/LTC: 20 LTC, less than a regtest block reward.
    let topup = daemon.create("topup", "pool-payout", "2000").await;
    let mined = node
        .rpc("generatetoaddress", json!([1, topup.address]))
        .await
        .expect("a block mined to the issued address");
    let block = mined[0].as_str().expect("a block hash").to_owned();
    let coinbase = node
        .rpc("getblock", json!([block, 1]))
        .await
        .expect("the block")["tx"][0]
        .as_str()
        .expect("the coinbase txid")
        .to_owned();
    let seen = daemon
        .wait_for(topup.id, "confirming on its coinbase", |i| {
            i.status == Status::Confirming && i.amount_pending > Amount(0)
        })
        .await;
    assert_eq!(seen.amount_final, Amount(0));

    // Ten blocks deep: past the 6 confirmations, still unspendable.
    node.mine(9).await.expect("mines");
    let tip = node.block_count().await.expect("block count");
    if let Some(e) = &electrum {
        e.wait_synced_with(&node)
            .await
            .expect("ElectrumX follows the node");
    }
    daemon.wait_cursor(tip).await;
    daemon
        .wait_for(topup.id, "still confirming 10 blocks deep", |i| {
            i.status == Status::Confirming
        })
        .await;
    // Let a few reconcile passes run over the new final height.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let i = daemon.intent(topup.id).await;
    assert_eq!(i.status, Status::Confirming, "{:?}", i.reason);
    assert_eq!(daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
    assert_eq!(
        daemon
            .count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'topup_credit'")
            .await,
        0,
        "nothing credited on an immature coinbase"
    );
    let view = |column: &'static str| {
        let sql = format!(
            "SELECT {column} FROM paywatch_intent_transfers WHERE intent_id = {} \
             AND txid = '{coinbase}'",
            topup.id
        );
        let daemon = &daemon;
        async move { daemon.count(&sql).await }
    };
    // The tip the view counts from is recorded with the watcher's next step.
    for _ in 0..100 {
        if view("confirmations").await == 10 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        (
            view("is_final").await,
            view("confirmations").await,
            view("confirmations_required").await
        ),
        (0, 10, 100),
        "the storefront sees it confirming, 10 of 100"
    );

    // At 100 confirmations it is spendable, and final.
    node.mine(90).await.expect("mines");
    let paid = daemon
        .wait_for(topup.id, "settled at 100 confirmations", |i| {
            i.paid_at_ms.is_some()
        })
        .await;
    assert!(paid.amount_final > Amount(0), "{paid:?}");
    assert_eq!(
        daemon
            .count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'topup_credit'")
            .await,
        1
    );
    daemon.assert_money_rules().await;
}

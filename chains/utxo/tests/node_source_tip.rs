//! `NodeSource` following the tip of a real Litecoin Core regtest node, one
//! watcher poll at a time.

use std::sync::Arc;

use paywatch_core::{CanonicalStream, Network, WatchSet};
use paywatch_testkit::{LitecoinNode, NodeOptions};
use paywatch_utxo::{watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params, RpcAuth};

/// A poll that reads one block past the tip on speculation finds, on the
/// next poll, that read empty and the new block missed: the block is then
/// seen a poll late. The first poll after a block connects it.
#[tokio::test]
async fn a_new_block_is_connected_by_the_first_poll_after_it() {
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("litecoind: {e}"));
    let tip = node.block_count().await.unwrap();
    let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
    let source = NodeSource::new(
        NodeRpc::new(
            &node.rpc_url(),
            RpcAuth::UserPassword {
                user: node.rpc_user().to_owned(),
                password: node.rpc_password().to_owned(),
            },
        ),
        NodeConfig {
            params,
            confirmations: 6,
            blocks_per_request: 50,
            mempool: false,
            mempool_wallet: None,
        },
        Arc::new(WatchSet::new(Network::Litecoin).keyed(watch_key(Network::Litecoin))),
    );
    let mut stream = CanonicalStream::new(source, Vec::new(), tip.saturating_sub(5), 64);
    let first = stream.next_batch(100).await.unwrap();
    assert!(!first.is_empty(), "caught up");
    assert!(stream.next_batch(100).await.unwrap().is_empty());
    for n in 1..=5 {
        node.mine(1).await.unwrap();
        let connected = stream.next_batch(100).await.unwrap().len();
        assert_eq!(connected, 1, "new block {n}: connected by the first poll");
    }
}

//! `NodeSource` and the canonical stream behind a load balancer over two
//! real Litecoin Core regtest nodes that disagree: one follows the chain,
//! the other is behind on a branch the network orphaned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paywatch_core::{BlockRef, CanonicalStream, ChainEvent, Network, WatchSet};
use paywatch_testkit::{Alternate, LitecoinNode, NodeOptions, RpcProxy};
use paywatch_utxo::{watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params, RpcAuth};
use serde_json::json;

const CONFIRMATIONS: u32 = 6;

fn source(node: &LitecoinNode, url: &str, watch: Arc<WatchSet>) -> NodeSource {
    NodeSource::new(
        NodeRpc::new(
            url,
            RpcAuth::UserPassword {
                user: node.rpc_user().to_owned(),
                password: node.rpc_password().to_owned(),
            },
        ),
        NodeConfig {
            params: Params::new(Network::Litecoin, Chain::Regtest).unwrap(),
            confirmations: CONFIRMATIONS,
            blocks_per_request: 50,
            mempool: false,
            mempool_wallet: None,
        },
        watch,
    )
}

async fn start() -> LitecoinNode {
    LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("litecoind: {e}"))
}

/// Waits until `node`'s best block is `hash`.
async fn until_best(node: &LitecoinNode, hash: &str) {
    let started = Instant::now();
    while node.best_hash().await.unwrap() != hash {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the node never reached {hash}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `b` takes `a`'s chain: they connect, `a` mines a block, `b` follows.
async fn share_history(a: &LitecoinNode, b: &LitecoinNode) {
    b.rpc(
        "addnode",
        json!([format!("127.0.0.1:{}", a.p2p_port()), "onetry"]),
    )
    .await
    .unwrap();
    let best = a.mine(1).await.unwrap().pop().unwrap();
    until_best(b, &best).await;
}

async fn cut(a: &LitecoinNode, b: &LitecoinNode) {
    for node in [a, b] {
        node.rpc("setnetworkactive", json!([false])).await.unwrap();
    }
}

/// The stream's events over the proxy: never a disconnect, and each
/// connected block on the good node's chain.
async fn poll_checked(
    stream: &mut CanonicalStream<NodeSource>,
    good: &LitecoinNode,
    connected: &mut Vec<ChainEvent>,
    turn: usize,
) {
    match stream.next_batch(20).await {
        Ok(batch) => {
            for event in batch {
                match &event {
                    ChainEvent::Disconnected { block } => panic!(
                        "turns of {turn}: the stream disconnected {block}, a block of the \
                         chain, for a backend behind it on an orphaned branch"
                    ),
                    ChainEvent::Connected { block, .. } => {
                        assert_eq!(
                            good.block_hash(block.height).await.unwrap(),
                            block.hash,
                            "turns of {turn}: connected a block of the orphaned branch"
                        );
                    }
                    _ => {}
                }
                connected.push(event);
            }
        }
        // A backend that does not know the other's blocks answers "not
        // found" halfway through a read: retried, never a decision.
        Err(e) => assert!(e.is_transient(), "turns of {turn}: {e}"),
    }
}

/// A payment final at 6 confirmations on the chain; a second node, cut off
/// before it, mined 3 blocks of its own and is behind. A load balancer sends
/// paywatch's requests to both in turns (per request, and in longer turns
/// as a sticky session does). The stream must never disconnect a block of
/// the chain (the final credit would be reversed, then credited again on
/// the next answer), connects only the chain's blocks, each once, and once
/// the lagging node rejoins it is simply caught up.
#[tokio::test]
async fn a_lagging_node_on_an_orphaned_branch_behind_a_balancer_never_disconnects_final_blocks() {
    let good = start().await;
    let lagging = start().await;
    share_history(&good, &lagging).await;
    cut(&good, &lagging).await;
    let fork = good.block_count().await.unwrap();

    let watch = Arc::new(WatchSet::new(Network::Litecoin).keyed(watch_key(Network::Litecoin)));
    let address = good.new_address().await.unwrap();
    watch.insert(&address);
    let txid = good.send(&address, "2").await.unwrap();
    good.mine(10).await.unwrap();
    lagging.mine(3).await.unwrap();
    assert!(lagging.block_count().await.unwrap() < good.block_count().await.unwrap());

    // Caught up on the good node alone: the payment, 10 confirmations.
    let start_height = fork - 2;
    let mut stream = CanonicalStream::new(
        source(&good, &good.rpc_url(), watch.clone()),
        Vec::new(),
        start_height,
        64,
    );
    let mut first = Vec::new();
    while let batch @ [_, ..] = &stream.next_batch(100).await.unwrap()[..] {
        first.extend(batch.iter().cloned());
    }
    let paid: Vec<(u64, String)> = first
        .iter()
        .flat_map(|e| match e {
            ChainEvent::Connected {
                block, transfers, ..
            } => transfers
                .iter()
                .map(|t| (block.height, t.txid.clone()))
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    assert_eq!(paid, vec![(fork + 1, txid.clone())]);
    let cursor: Vec<BlockRef> = first.iter().map(|e| e.block().clone()).collect();
    let final_height = stream.confirmed_final_height().await.unwrap().unwrap();
    assert!(final_height > fork + 1, "the payment's block is final");

    for turn in [64, 7, 3, 1] {
        let proxy = RpcProxy::start(
            vec![good.rpc_url(), lagging.rpc_url()],
            Alternate::new(turn),
        )
        .await
        .unwrap();
        let mut stream = CanonicalStream::new(
            source(&good, proxy.url(), watch.clone()),
            cursor.clone(),
            start_height,
            64,
        );
        let mut connected = Vec::new();
        for round in 0..200 {
            if round % 40 == 39 {
                good.mine(1).await.unwrap();
            }
            poll_checked(&mut stream, &good, &mut connected, turn).await;
        }
        for event in &connected {
            if let ChainEvent::Connected { transfers, .. } = event {
                assert!(
                    transfers.iter().all(|t| t.txid != txid),
                    "turns of {turn}: the payment was connected a second time"
                );
            }
        }
    }

    // The lagging node rejoins and takes the chain: behind the balancer,
    // the stream is simply caught up, with nothing disconnected.
    for node in [&good, &lagging] {
        node.rpc("setnetworkactive", json!([true])).await.unwrap();
    }
    share_history(&good, &lagging).await;
    let proxy = RpcProxy::start(vec![good.rpc_url(), lagging.rpc_url()], Alternate::new(1))
        .await
        .unwrap();
    let mut stream = CanonicalStream::new(
        source(&good, proxy.url(), watch.clone()),
        cursor.clone(),
        start_height,
        64,
    );
    let mut connected = Vec::new();
    let best = good.best_hash().await.unwrap();
    let started = Instant::now();
    while stream.cursor_tip().map(|b| b.hash.as_str()) != Some(best.as_str()) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never caught up"
        );
        poll_checked(&mut stream, &good, &mut connected, 1).await;
    }
    assert!(connected
        .iter()
        .all(|e| matches!(e, ChainEvent::Connected { transfers, .. } if transfers.is_empty())));
}

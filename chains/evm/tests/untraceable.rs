//! The source with `traces = true` in front of a node that cannot trace
//! some of what it is asked: a proxy before a real anvil answers trace
//! calls as geth does for a transaction whose tracer ran out of time, as a
//! provider without `debug_*` does, and as a node with pruned state does.
//! Tokens and top-level ETH in such a block are never held back; ETH sent
//! by contracts is looked for again, and reported as missed once seen.

use std::sync::Arc;
use std::time::Duration;

use paywatch_core::{Asset, AssetId, BlockSource, Network, SourceBlock, Transfer, WatchSet};
use paywatch_evm::{parse_address, watch_key, EvmConfig, EvmSource, Tokens, NATIVE_INDEX};
use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID};
use paywatch_testkit::trace_proxy::{TraceFault, TraceProxy};
use paywatch_testkit::{AnvilNode, AnvilOptions};

const WATCHED: &str = "0x00000000000000000000000000000000000000aa";

/// One block holding a USDT payment, a top-level ETH payment and ETH a
/// contract forwards, all to [`WATCHED`], with a proxy in front.
struct Scene {
    node: AnvilNode,
    proxy: TraceProxy,
    tokens: Tokens,
    height: u64,
    forwarded_tx: String,
}

async fn scene(fault: impl FnOnce(&str) -> Option<TraceFault>) -> Scene {
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let usdt = node
        .deploy_token("Tether", "USDT", 1_000_000_000)
        .await
        .unwrap();
    let forwarder = node.deploy_forwarder().await.unwrap();
    node.set_automine(false).await.unwrap();
    node.token_transfer(&usdt, ACCOUNTS[0], WATCHED, 777)
        .await
        .unwrap();
    node.send_eth(ACCOUNTS[1], WATCHED, 12_345).await.unwrap();
    let forwarded_tx = node
        .forward(&forwarder, ACCOUNTS[2], WATCHED, 5_000)
        .await
        .unwrap();
    let height = node.mine(1).await.unwrap();
    node.set_automine(true).await.unwrap();
    let receipt = node.receipt(&forwarded_tx).await.unwrap();
    assert_eq!(
        receipt["blockNumber"].as_str(),
        Some(format!("{height:#x}").as_str()),
        "all three payments in one block"
    );
    let proxy = TraceProxy::start(node.url(), fault(&forwarded_tx))
        .await
        .unwrap();
    let tokens = Tokens::new([(Asset::Usdt, parse_address(&usdt).unwrap())]);
    Scene {
        node,
        proxy,
        tokens,
        height,
        forwarded_tx,
    }
}

fn source(url: String, tokens: Tokens, retry_for: Duration) -> EvmSource {
    let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
    watch.extend([WATCHED]);
    let cfg = EvmConfig {
        url,
        chain_id: Some(CHAIN_ID),
        tokens,
        traces: true,
        blocks_per_request: 4,
        trace_timeout: Duration::from_secs(7),
        trace_retry_for: retry_for,
        ..EvmConfig::default()
    };
    EvmSource::new(cfg, Arc::new(watch)).unwrap()
}

async fn read(src: &EvmSource, height: u64) -> SourceBlock {
    src.tip().await.unwrap();
    src.block(height)
        .await
        .unwrap_or_else(|e| panic!("block {height}: {e}"))
        .unwrap()
}

fn eth(b: &SourceBlock) -> Vec<&Transfer> {
    b.transfers
        .iter()
        .filter(|t| t.asset == AssetId::Known(Asset::Eth))
        .collect()
}

/// The USDT and the top-level ETH payment are in the block, the forwarded
/// ETH is not (its trace is missing).
fn tokens_and_top_level_eth_only(b: &SourceBlock) {
    let usdt: Vec<_> = b
        .transfers
        .iter()
        .filter(|t| t.asset == AssetId::Known(Asset::Usdt))
        .collect();
    assert_eq!(usdt.len(), 1, "{:?}", b.transfers);
    assert_eq!(usdt[0].amount.0, 777);
    let eth = eth(b);
    assert_eq!(eth.len(), 1, "only the top-level ETH: {:?}", b.transfers);
    assert_eq!(eth[0].amount.0, 12_345);
    assert_eq!(eth[0].index, NATIVE_INDEX);
}

/// Steps (`tip`) until the source reports the block missed, or `within` passes.
async fn missed_within(src: &EvmSource, within: Duration) -> Option<u64> {
    let until = tokio::time::Instant::now() + within;
    loop {
        src.tip().await.unwrap();
        if let Some(h) = src.missed_from() {
            return Some(h);
        }
        if tokio::time::Instant::now() > until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn one_transaction_with_an_execution_timeout_holds_back_nothing_else() {
    let s = scene(|tx| Some(TraceFault::TxTimeout { tx: tx.to_owned() })).await;
    let src = source(s.proxy.url(), s.tokens.clone(), Duration::from_secs(600));
    let b = read(&src, s.height).await;
    tokens_and_top_level_eth_only(&b);
    assert!(s.proxy.calls().spoiled.values().sum::<u64>() > 0);
    assert_eq!(src.missed_from(), None, "nothing seen yet");

    // The node can trace it again: the block is reported missed, and read
    // again it holds the forwarded ETH.
    s.proxy.set_fault(None);
    assert_eq!(
        missed_within(&src, Duration::from_secs(20)).await,
        Some(s.height)
    );
    src.missed_queued(s.height);
    assert_eq!(src.missed_from(), None);
    let again = read(&src, s.height).await;
    let eth = eth(&again);
    assert_eq!(eth.len(), 2, "{:?}", again.transfers);
    let internal = eth.iter().find(|t| t.index != NATIVE_INDEX).unwrap();
    assert_eq!(internal.txid, s.forwarded_tx);
    assert_eq!(internal.amount.0, 5_000);
    assert_eq!(internal.index, NATIVE_INDEX + 1);
    assert!(internal.success);
    drop(s.node);
}

#[tokio::test]
async fn a_provider_without_debug_methods_still_pays_tokens_and_top_level_eth() {
    let s = scene(|_| Some(TraceFault::MethodNotFound)).await;
    let src = source(s.proxy.url(), s.tokens.clone(), Duration::from_secs(600));
    tokens_and_top_level_eth_only(&read(&src, s.height).await);
}

#[tokio::test]
async fn a_node_with_pruned_state_still_pays_tokens_and_top_level_eth() {
    let s = scene(|_| Some(TraceFault::MissingTrieNode)).await;
    let src = source(s.proxy.url(), s.tokens.clone(), Duration::from_secs(600));
    tokens_and_top_level_eth_only(&read(&src, s.height).await);
}

#[tokio::test]
async fn the_tracer_is_sent_a_timeout() {
    let s = scene(|_| None).await;
    let src = source(s.proxy.url(), s.tokens.clone(), Duration::from_secs(600));
    let b = read(&src, s.height).await;
    assert_eq!(eth(&b).len(), 2, "{:?}", b.transfers);
    let options = s.proxy.calls().options;
    assert!(!options.is_empty());
    for o in options {
        assert_eq!(o["tracer"], "callTracer", "{o}");
        assert_eq!(o["timeout"], "7s", "{o}");
    }
}

#[tokio::test]
async fn a_block_that_stays_untraceable_goes_to_the_operator_after_the_bound() {
    let s = scene(|_| Some(TraceFault::MissingTrieNode)).await;
    let src = source(s.proxy.url(), s.tokens.clone(), Duration::from_secs(2));
    tokens_and_top_level_eth_only(&read(&src, s.height).await);
    assert_eq!(src.trace_backlog().waiting, 1);
    assert_eq!(src.trace_backlog().given_up, 0);
    // What the watcher reads into paywatch_untraced_blocks and
    // paywatch_untraced_blocks_given_up_total (alert PaywatchEthTracesUnavailable).
    assert_eq!(
        src.unread_blocks(),
        Some(paywatch_core::UnreadBlocks {
            waiting: 1,
            given_up: 0,
            lowest: Some(s.height),
        })
    );
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    while src.trace_backlog().given_up == 0 && tokio::time::Instant::now() < until {
        src.tip().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let backlog = src.trace_backlog();
    assert_eq!(
        src.unread_blocks(),
        Some(paywatch_core::UnreadBlocks {
            waiting: 0,
            given_up: 1,
            lowest: None,
        })
    );
    assert_eq!(backlog.given_up, 1, "{backlog:?}");
    assert_eq!(backlog.waiting, 0, "{backlog:?}");
    assert_eq!(
        backlog.last_given_up.as_ref().map(|g| g.height),
        Some(s.height)
    );
    assert_eq!(
        src.missed_from(),
        None,
        "nothing was seen, nothing is claimed"
    );
}

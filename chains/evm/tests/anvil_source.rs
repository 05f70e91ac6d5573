//! The source alone against a real anvil: what it fetches, how it reads
//! ahead, and what it refuses.

use std::sync::Arc;

use paywatch_core::{Asset, AssetId, BlockSource, Network, WatchSet};
use paywatch_evm::{parse_address, watch_key, EvmConfig, EvmSource, Finality, Tokens};
use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID};
use paywatch_testkit::{AnvilNode, AnvilOptions};

async fn node() -> AnvilNode {
    AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"))
}

fn source(node: &AnvilNode, tokens: Tokens, watched: &[&str]) -> EvmSource {
    let watch = WatchSet::new(Network::Ethereum).keyed(watch_key());
    watch.extend(watched.iter().copied());
    let cfg = EvmConfig {
        url: node.url(),
        chain_id: Some(CHAIN_ID),
        tokens,
        traces: true,
        blocks_per_request: 7,
        ..EvmConfig::default()
    };
    EvmSource::new(cfg, Arc::new(watch)).unwrap()
}

const WATCHED: &str = "0x00000000000000000000000000000000000000aa";

#[tokio::test]
async fn blocks_link_up_and_carry_the_payments_in_them() {
    let node = node().await;
    let usdt = node
        .deploy_token("Tether", "USDT", 1_000_000_000)
        .await
        .unwrap();
    let tokens = Tokens::new([(Asset::Usdt, parse_address(&usdt).unwrap())]);
    let src = source(&node, tokens, &[WATCHED]);
    let eth_tx = node.send_eth(ACCOUNTS[1], WATCHED, 12345).await.unwrap();
    node.mine(10).await.unwrap();
    let tok_tx = node
        .token_transfer(&usdt, ACCOUNTS[0], WATCHED, 777)
        .await
        .unwrap();
    node.mine(20).await.unwrap();
    let tip = src.tip().await.unwrap();
    assert_eq!(tip.height, node.block_number().await.unwrap());
    let mut parent = src.block(0).await.unwrap().unwrap().block;
    let mut found = Vec::new();
    for h in 1..=tip.height {
        let b = src
            .block(h)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("block {h} of {}", tip.height));
        assert_eq!(b.block.height, h);
        assert_eq!(
            b.block.parent,
            parent.hash,
            "block {h} follows block {}",
            h - 1
        );
        assert_eq!(b.block.hash, node.block_hash(h).await.unwrap());
        found.extend(b.transfers);
        parent = b.block;
    }
    assert!(src.block(tip.height + 1).await.unwrap().is_none());
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].txid, eth_tx);
    assert_eq!(found[0].asset, AssetId::Known(Asset::Eth));
    assert_eq!(found[0].amount.0, 12345);
    assert_eq!(found[1].txid, tok_tx);
    assert_eq!(found[1].asset, AssetId::Known(Asset::Usdt));
    assert_eq!(found[1].amount.0, 777);
    assert_eq!(found[1].to, WATCHED);

    // The chain grows after the read-ahead ran dry.
    node.mine(3).await.unwrap();
    let tip2 = src.tip().await.unwrap();
    assert_eq!(tip2.height, tip.height + 3);
    for h in tip.height + 1..=tip2.height {
        assert!(src.block(h).await.unwrap().is_some(), "block {h}");
    }
}

#[tokio::test]
async fn finality_follows_the_finalized_tag_or_confirmations() {
    let node = node().await;
    node.mine(100).await.unwrap();
    let src = source(&node, Tokens::default(), &[]);
    assert_eq!(src.final_height().await.unwrap(), 100 - 64);
    let watch = Arc::new(WatchSet::new(Network::Ethereum).keyed(watch_key()));
    let five = EvmSource::new(
        EvmConfig {
            url: node.url(),
            finality: Finality::Confirmations(5),
            ..EvmConfig::default()
        },
        watch,
    )
    .unwrap();
    assert_eq!(five.final_height().await.unwrap(), 96);
}

#[tokio::test]
async fn a_node_on_another_chain_is_refused_for_good() {
    let node = node().await;
    let watch = Arc::new(WatchSet::new(Network::Ethereum).keyed(watch_key()));
    let src = EvmSource::new(
        EvmConfig {
            url: node.url(),
            chain_id: Some(1),
            ..EvmConfig::default()
        },
        watch,
    )
    .unwrap();
    let err = src.tip().await.unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("chain id 31337"), "{err}");
}

//! Smoke tests of the real-node harness: a regtest litecoind and ElectrumX
//! over it. They need the binaries (`bash deploy/install-nodes.sh`) and fail,
//! not skip, without them.

use std::time::Instant;

use bitcoin::hashes::{sha256, Hash};
use paywatch_testkit::litecoind::encode_hex;
use paywatch_testkit::{Auth, ElectrumX, LitecoinNode, NodeOptions};
use serde_json::json;

/// Electrum's scripthash: sha256 of the scriptPubKey, byte-reversed, hex.
fn scripthash(script: &[u8]) -> String {
    let mut digest = sha256::Hash::hash(script).to_byte_array();
    digest.reverse();
    encode_hex(&digest)
}

async fn start_node(opts: NodeOptions) -> LitecoinNode {
    let t = Instant::now();
    let node = LitecoinNode::start(opts)
        .await
        .unwrap_or_else(|e| panic!("starting litecoind: {e}"));
    eprintln!("litecoind ready (101 blocks mined) in {:?}", t.elapsed());
    node
}

#[tokio::test(flavor = "multi_thread")]
async fn payment_reaches_block_and_electrumx() {
    let node = start_node(NodeOptions {
        mweb: false,
        ..NodeOptions::default()
    })
    .await;
    assert_eq!(node.block_count().await.unwrap(), 101);
    assert!(node.rpc_url().starts_with("http://127.0.0.1:"));

    let address = node.new_address().await.unwrap();
    assert!(address.starts_with("rltc1q"), "{address}");
    let txid = node.send(&address, "1.5").await.unwrap();
    assert_eq!(node.mempool().await.unwrap(), vec![txid.clone()]);

    let hashes = node.mine(1).await.unwrap();
    assert_eq!(hashes.len(), 1);
    assert_eq!(node.best_hash().await.unwrap(), hashes[0]);
    assert_eq!(node.block_hash(102).await.unwrap(), hashes[0]);
    assert!(node.mempool().await.unwrap().is_empty());

    let raw = node.raw_block(&hashes[0]).await.unwrap();
    assert!(
        raw.len() > 80,
        "a header and two transactions: {} bytes",
        raw.len()
    );
    let header = node
        .rpc("getblockheader", json!([hashes[0], true]))
        .await
        .unwrap();
    let version = header["version"].as_i64().unwrap();
    let version = u32::try_from(version).unwrap();
    assert_eq!(
        raw[..4],
        version.to_le_bytes(),
        "raw block starts with its version"
    );

    // The output paying 1.5 LTC, exactly (compared as text, never a float).
    let tx = node
        .rpc("getrawtransaction", json!([txid, true]))
        .await
        .unwrap();
    let script = node.script_pubkey(&address).await.unwrap();
    let paid = tx["vout"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["scriptPubKey"]["hex"].as_str() == Some(encode_hex(&script).as_str()))
        .expect("an output to the address");
    assert_eq!(paid["value"].to_string(), "1.5");

    let t = Instant::now();
    let electrum = ElectrumX::start(&node)
        .await
        .unwrap_or_else(|e| panic!("starting ElectrumX: {e}"));
    eprintln!("ElectrumX listening in {:?}", t.elapsed());
    assert_eq!(electrum.wait_synced(102).await.unwrap(), 102);
    eprintln!("ElectrumX at height 102 after {:?}", t.elapsed());

    let history = electrum
        .request(
            "blockchain.scripthash.get_history",
            json!([scripthash(&script)]),
        )
        .await
        .unwrap();
    assert_eq!(history, json!([{ "tx_hash": txid, "height": 102 }]));

    // A new block reaches ElectrumX through its polling.
    node.mine_empty().await.unwrap();
    assert_eq!(electrum.wait_synced_with(&node).await.unwrap(), 103);
}

#[tokio::test(flavor = "multi_thread")]
async fn cookie_auth_survives_restart_and_kill() {
    let mut node = start_node(NodeOptions {
        auth: Auth::Cookie,
        ..NodeOptions::default()
    })
    .await;
    assert_eq!(node.rpc_user(), "__cookie__");
    let cookie = std::fs::read_to_string(node.cookie_file()).expect("cookie file");
    assert_eq!(
        cookie.trim(),
        format!("{}:{}", node.rpc_user(), node.rpc_password())
    );
    let first_password = node.rpc_password().to_owned();

    let address = node.new_address().await.unwrap();
    let txid = node.send(&address, "0.12345678").await.unwrap();
    node.mine(2).await.unwrap();
    let tip = node.best_hash().await.unwrap();

    let t = Instant::now();
    node.restart().await.unwrap();
    eprintln!("restart took {:?}", t.elapsed());
    assert_ne!(
        node.rpc_password(),
        first_password,
        "a new cookie per start"
    );
    assert_eq!(node.block_count().await.unwrap(), 103);
    assert_eq!(node.best_hash().await.unwrap(), tip);
    // The wallet is loaded again and still has its coins and transaction.
    let wallet_tx = node.rpc("gettransaction", json!([txid])).await.unwrap();
    assert_eq!(wallet_tx["confirmations"], json!(2));
    node.send(&address, "1").await.unwrap();

    // A crash: SIGKILL, then back on the same datadir and ports. Blocks
    // mined since the last clean start survive only if flushed.
    let tip = node.mine(1).await.unwrap().remove(0);
    node.flush().await.unwrap();
    let port = node.rpc_port();
    node.kill();
    assert!(!node.is_running());
    assert!(node.block_count().await.is_err(), "RPC is down after kill");
    node.start_again().await.unwrap();
    assert_eq!(node.rpc_port(), port);
    assert_eq!(node.best_hash().await.unwrap(), tip);
    let hash = node.mine(1).await.unwrap().remove(0);

    // Reorg helpers.
    node.invalidate(&hash).await.unwrap();
    assert_eq!(node.best_hash().await.unwrap(), tip);
    node.reconsider(&hash).await.unwrap();
    assert_eq!(node.best_hash().await.unwrap(), hash);
    node.stop().await.unwrap();
    assert!(!node.is_running());
}

#[tokio::test(flavor = "multi_thread")]
async fn rejects_float_style_amounts() {
    let node = start_node(NodeOptions::default()).await;
    let address = node.new_address().await.unwrap();
    for bad in ["1e-8", "-1", "1.123456789", ".5"] {
        let err = node.send(&address, bad).await.unwrap_err();
        assert!(err.to_string().contains("invalid amount"), "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mweb_chain_mines_across_activation() {
    let node = start_node(NodeOptions {
        mweb: true,
        ..NodeOptions::default()
    })
    .await;
    // MWEB activates at height 432: mining through it needs a peg-in, which
    // `mine` makes by itself.
    let hashes = node.mine(340).await.unwrap();
    assert_eq!(hashes.len(), 340);
    assert_eq!(node.block_count().await.unwrap(), 441);
    assert_eq!(hashes[339], node.best_hash().await.unwrap());
    assert_eq!(hashes[0], node.block_hash(102).await.unwrap());
    let info = node.rpc("getblockchaininfo", json!([])).await.unwrap();
    assert_eq!(info["softforks"]["mweb"]["active"], json!(true), "{info}");
    let mweb = node.new_mweb_address().await.unwrap();
    assert!(mweb.starts_with("tmweb1"), "{mweb}");

    let electrum = ElectrumX::start(&node)
        .await
        .unwrap_or_else(|e| panic!("starting ElectrumX: {e}"));
    electrum.wait_synced_with(&node).await.unwrap();
}

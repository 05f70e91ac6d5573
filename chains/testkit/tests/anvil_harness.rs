//! Tests of the anvil harness against a real anvil. They need the binary
//! (`bash deploy/install-nodes.sh`) and fail, not skip, without it.

use std::time::{Duration, Instant};

use paywatch_testkit::anvil::{ACCOUNTS, CHAIN_ID, DEV_BALANCE_WEI, TRANSFER_TOPIC, WEI_PER_ETH};
use paywatch_testkit::{AnvilError, AnvilNode, AnvilOptions, HarnessError};
use serde_json::{json, Value};

async fn start(opts: AnvilOptions) -> AnvilNode {
    let t = Instant::now();
    let node = AnvilNode::start(opts)
        .await
        .unwrap_or_else(|e| panic!("starting anvil: {e}"));
    eprintln!("anvil ready on {} in {:?}", node.url(), t.elapsed());
    node
}

/// A fresh address with no balance and no code, distinct per `n`.
fn payee(n: u8) -> String {
    format!("0x{:0>32}a11ce{n:03x}", "")
}

/// The 32-byte topic/word holding an address.
fn topic(address: &str) -> String {
    format!(
        "0x{:0>64}",
        address.trim_start_matches("0x").to_ascii_lowercase()
    )
}

fn status(receipt: &Value) -> &str {
    receipt["status"].as_str().unwrap_or("(none)")
}

#[tokio::test(flavor = "multi_thread")]
async fn starts_with_funded_dev_accounts() {
    let node = start(AnvilOptions::default()).await;
    assert_eq!(node.url(), format!("http://127.0.0.1:{}", node.port()));
    assert_eq!(node.ws_url(), format!("ws://127.0.0.1:{}", node.port()));
    assert_eq!(node.chain_id().await.unwrap(), CHAIN_ID);
    assert_eq!(node.block_number().await.unwrap(), 0);

    let accounts = node.rpc("eth_accounts", json!([])).await.unwrap();
    let lower: Vec<String> = ACCOUNTS.iter().map(|a| a.to_ascii_lowercase()).collect();
    assert_eq!(accounts, json!(lower));
    assert_eq!(node.balance(ACCOUNTS[9]).await.unwrap(), DEV_BALANCE_WEI);

    // anvil's tags: safe = latest - 32, finalized = latest - 64.
    assert_eq!(node.mine(100).await.unwrap(), 100);
    let finalized = node.block_by_tag("finalized").await.unwrap();
    assert_eq!(finalized["number"], "0x24"); // 36
    let safe = node.block_by_tag("safe").await.unwrap();
    assert_eq!(safe["number"], "0x44"); // 68
    assert_eq!(
        node.block_hash(36).await.unwrap(),
        finalized["hash"].as_str().unwrap()
    );

    // RPC errors carry the method and anvil's message.
    let err = node.rpc("no_such_method", json!([])).await.unwrap_err();
    assert!(
        matches!(err, AnvilError::Rpc { ref method, .. } if method == "no_such_method"),
        "{err}"
    );
    let err = node.send_eth("0x1234", ACCOUNTS[1], 1).await.unwrap_err();
    assert!(matches!(err, AnvilError::InvalidInput { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_binary_fails_with_install_hint() {
    let err = AnvilNode::start(AnvilOptions {
        binary: Some("/no/such/dir/anvil".into()),
        ..AnvilOptions::default()
    })
    .await
    .unwrap_err();
    assert!(
        matches!(err, AnvilError::Harness(HarnessError::MissingBinary { .. })),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("bash deploy/install-nodes.sh"), "{msg}");
    assert!(msg.contains("PAYWATCH_ANVIL"), "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_transfer_with_one_log() {
    let node = start(AnvilOptions::default()).await;
    let supply = 1_000_000 * 1_000_000; // 1M tokens, 6 decimals
    let usdt = node
        .deploy_token("Tether USD", "USDT", supply)
        .await
        .unwrap();
    let usdc = node.deploy_token("USD Coin", "USDC", supply).await.unwrap();
    assert_ne!(usdt, usdc);
    assert_eq!(
        node.token_balance(&usdt, ACCOUNTS[0]).await.unwrap(),
        supply
    );
    let decimals = node
        .rpc(
            "eth_call",
            json!([{ "to": usdt, "data": "0x313ce567" }, "latest"]),
        )
        .await
        .unwrap();
    assert_eq!(decimals, format!("0x{:064x}", 6));
    // name() and symbol(): the ABI-encoded constructor strings arrived.
    for (selector, text) in [("0x06fdde03", "Tether USD"), ("0x95d89b41", "USDT")] {
        let v = node
            .rpc(
                "eth_call",
                json!([{ "to": usdt, "data": selector }, "latest"]),
            )
            .await
            .unwrap();
        let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
        let expected = format!("0x{:064x}{:064x}{hex:0<64}", 0x20, text.len());
        assert_eq!(v, expected, "{text}");
    }

    let to = payee(1);
    let amount = 12_345_678; // 12.345678 USDT
    let hash = node
        .token_transfer(&usdt, ACCOUNTS[0], &to, amount)
        .await
        .unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(status(&receipt), "0x1", "{receipt}");
    let logs = receipt["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{receipt}");
    assert_eq!(logs[0]["address"], usdt.to_ascii_lowercase());
    assert_eq!(
        logs[0]["topics"],
        json!([TRANSFER_TOPIC, topic(ACCOUNTS[0]), topic(&to)])
    );
    assert_eq!(logs[0]["data"], format!("0x{amount:064x}"));
    assert_eq!(node.token_balance(&usdt, &to).await.unwrap(), amount);
    assert_eq!(node.token_balance(&usdc, &to).await.unwrap(), 0);
    assert_eq!(
        node.token_balance(&usdt, ACCOUNTS[0]).await.unwrap(),
        supply - amount
    );

    // More than the balance (none): mined, status 0, no log.
    let hash = node
        .failed_token_transfer(&usdc, ACCOUNTS[1], ACCOUNTS[2], 1)
        .await
        .unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(status(&receipt), "0x0", "{receipt}");
    assert_eq!(receipt["logs"], json!([]));
    assert_eq!(node.token_balance(&usdc, ACCOUNTS[2]).await.unwrap(), 0);

    // A transfer that would succeed is refused by the helper.
    let err = node
        .failed_token_transfer(&usdt, ACCOUNTS[0], &to, 1)
        .await
        .unwrap_err();
    assert!(matches!(err, AnvilError::InvalidInput { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn forwarder_pays_through_internal_calls() {
    let node = start(AnvilOptions::default()).await;
    let fwd = node.deploy_forwarder().await.unwrap();
    let fwd_lower = fwd.to_ascii_lowercase();

    // forward: one internal call carrying all of the value.
    let to = payee(2);
    let wei = 3 * WEI_PER_ETH / 2; // 1.5 ETH
    let hash = node.forward(&fwd, ACCOUNTS[1], &to, wei).await.unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(status(&receipt), "0x1", "{receipt}");
    assert_eq!(node.balance(&to).await.unwrap(), wei);
    assert_eq!(node.balance(&fwd).await.unwrap(), 0);

    let block_hash = receipt["blockHash"].as_str().unwrap().to_owned();
    let trace = node.trace_block(&block_hash).await.unwrap();
    let traces = trace.as_array().unwrap();
    assert_eq!(traces.len(), 1, "{trace}");
    assert_eq!(traces[0]["txHash"], hash);
    let top = &traces[0]["result"];
    assert_eq!(top["type"], "CALL");
    assert_eq!(top["from"], ACCOUNTS[1].to_ascii_lowercase());
    assert_eq!(top["to"], fwd_lower);
    assert_eq!(top["value"], format!("0x{wei:x}"));
    let calls = top["calls"].as_array().expect("internal calls");
    assert_eq!(calls.len(), 1, "{top}");
    assert_eq!(calls[0]["type"], "CALL");
    assert_eq!(calls[0]["from"], fwd_lower);
    assert_eq!(calls[0]["to"], to);
    assert_eq!(calls[0]["value"], format!("0x{wei:x}"));

    // split: two internal calls, half each (the odd wei to the second).
    let (a, b) = (payee(3), payee(4));
    let wei = WEI_PER_ETH + 1;
    let hash = node.split(&fwd, ACCOUNTS[1], &a, &b, wei).await.unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(status(&receipt), "0x1", "{receipt}");
    assert_eq!(node.balance(&a).await.unwrap(), WEI_PER_ETH / 2);
    assert_eq!(node.balance(&b).await.unwrap(), WEI_PER_ETH / 2 + 1);
    let trace = node
        .trace_block(receipt["blockHash"].as_str().unwrap())
        .await
        .unwrap();
    let calls = trace[0]["result"]["calls"].as_array().unwrap();
    let paid: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c["to"].as_str().unwrap(), c["value"].as_str().unwrap()))
        .collect();
    let half = format!("0x{:x}", WEI_PER_ETH / 2);
    let rest = format!("0x{:x}", WEI_PER_ETH / 2 + 1);
    assert_eq!(
        paid,
        vec![(a.as_str(), half.as_str()), (b.as_str(), rest.as_str())]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn forward_then_revert_is_mined_as_failed() {
    let node = start(AnvilOptions::default()).await;
    let fwd = node.deploy_forwarder().await.unwrap();
    let to = payee(5);
    let wei = WEI_PER_ETH;
    let before = node.balance(ACCOUNTS[3]).await.unwrap();
    let hash = node
        .forward_then_revert(&fwd, ACCOUNTS[3], &to, wei)
        .await
        .unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(status(&receipt), "0x0", "{receipt}");
    assert_eq!(node.balance(&to).await.unwrap(), 0);
    assert_eq!(node.balance(&fwd).await.unwrap(), 0);
    // The sender paid gas only.
    let after = node.balance(ACCOUNTS[3]).await.unwrap();
    assert!(before - after < WEI_PER_ETH / 100, "{before} -> {after}");

    // The trace still shows the (undone) internal transfer under a
    // reverted top call: a watcher must not count it.
    let trace = node
        .trace_block(receipt["blockHash"].as_str().unwrap())
        .await
        .unwrap();
    let top = &trace[0]["result"];
    assert!(top.get("error").is_some(), "{top}");
    assert_eq!(top["calls"][0]["to"], to);
    assert_eq!(top["calls"][0]["value"], format!("0x{wei:x}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn reorg_drops_and_remines_a_transaction() {
    let node = start(AnvilOptions::default()).await;
    node.mine(5).await.unwrap();
    let to = payee(6);
    let wei = 7 * WEI_PER_ETH;
    let hash = node.send_eth(ACCOUNTS[4], &to, wei).await.unwrap();
    let receipt = node.receipt(&hash).await.unwrap();
    assert_eq!(receipt["blockNumber"], "0x6");
    let old_hash = node.block_hash(6).await.unwrap();
    let raw = node.raw_transaction(&hash).await.unwrap();
    assert!(raw.starts_with("0x"), "{raw}");

    // Replace block 6: the payment is gone, the height is the same.
    node.reorg(1, &[]).await.unwrap();
    assert_eq!(node.block_number().await.unwrap(), 6);
    assert_ne!(node.block_hash(6).await.unwrap(), old_hash);
    assert_eq!(node.try_receipt(&hash).await.unwrap(), None);
    assert_eq!(node.balance(&to).await.unwrap(), 0);

    // Replace blocks 5 and 6, mining the same signed tx in the first.
    node.reorg(2, &[(raw.as_str(), 0)]).await.unwrap();
    assert_eq!(node.block_number().await.unwrap(), 6);
    let receipt = node.try_receipt(&hash).await.unwrap().expect("re-mined");
    assert_eq!(receipt["blockNumber"], "0x5");
    assert_eq!(receipt["blockHash"], node.block_hash(5).await.unwrap());
    assert_eq!(node.balance(&to).await.unwrap(), wei);

    let err = node.reorg(1, &[(raw.as_str(), 1)]).await.unwrap_err();
    assert!(matches!(err, AnvilError::InvalidInput { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn manual_mining_and_snapshots() {
    let node = start(AnvilOptions::default()).await;
    node.set_automine(false).await.unwrap();
    let to = payee(7);
    let first = node.send_eth(ACCOUNTS[5], &to, 1).await.unwrap();
    let second = node.send_eth(ACCOUNTS[5], &to, 2).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(node.try_receipt(&first).await.unwrap(), None);
    assert_eq!(node.block_number().await.unwrap(), 0);

    assert_eq!(node.mine(1).await.unwrap(), 1);
    for hash in [&first, &second] {
        let receipt = node.receipt(hash).await.unwrap();
        assert_eq!(receipt["blockNumber"], "0x1");
    }
    assert_eq!(node.balance(&to).await.unwrap(), 3);

    let snap = node.snapshot().await.unwrap();
    node.send_eth(ACCOUNTS[5], &to, 4).await.unwrap();
    node.mine(3).await.unwrap();
    assert_eq!(node.balance(&to).await.unwrap(), 7);
    node.revert(&snap).await.unwrap();
    assert_eq!(node.block_number().await.unwrap(), 1);
    assert_eq!(node.balance(&to).await.unwrap(), 3);
    assert!(node.revert(&snap).await.is_err(), "a snapshot is used up");
    node.set_automine(true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn block_time_mines_by_itself() {
    let node = start(AnvilOptions {
        block_time: Some(1),
        ..AnvilOptions::default()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.block_number().await.unwrap() < 2 {
        assert!(Instant::now() < deadline, "no blocks with --block-time 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn restart_with_state_file_keeps_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let opts = AnvilOptions {
        state_file: Some(state.clone()),
        ..AnvilOptions::default()
    };
    let mut node = start(opts.clone()).await;
    let to = payee(8);
    let token = node
        .deploy_token("Tether USD", "USDT", 1_000_000)
        .await
        .unwrap();
    node.token_transfer(&token, ACCOUNTS[0], &to, 250_000)
        .await
        .unwrap();
    node.send_eth(ACCOUNTS[6], &to, 42).await.unwrap();
    let height = node.mine(10).await.unwrap();
    let tip = node.block_hash(height).await.unwrap();
    let port = node.port();

    node.restart().await.unwrap();
    assert!(state.is_file());
    assert_eq!(node.port(), port);
    assert_eq!(node.block_number().await.unwrap(), height);
    assert_eq!(node.block_hash(height).await.unwrap(), tip);
    assert_eq!(node.balance(&to).await.unwrap(), 42);
    assert_eq!(node.token_balance(&token, &to).await.unwrap(), 250_000);

    // A kill writes nothing: blocks since the last clean stop are lost.
    node.mine(3).await.unwrap();
    node.kill();
    assert!(!node.is_running());
    assert!(node.rpc("eth_blockNumber", json!([])).await.is_err());
    node.start_again().await.unwrap();
    assert_eq!(node.block_number().await.unwrap(), height);

    // Another node on the same state file takes the chain over.
    node.stop().await.unwrap();
    drop(node);
    let node = start(opts).await;
    assert_eq!(node.block_number().await.unwrap(), height);
    assert_eq!(node.balance(&to).await.unwrap(), 42);
    assert_eq!(node.token_balance(&token, &to).await.unwrap(), 250_000);
}

/// One JSON-RPC call through `url`, the whole answer object.
async fn raw_call(url: &str, method: &str, params: Value) -> Value {
    reqwest::Client::new()
        .post(url)
        .json(&json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params }))
        .send()
        .await
        .expect("the proxy answers")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test]
async fn the_trace_proxy_answers_as_a_node_that_cannot_trace() {
    use paywatch_testkit::trace_proxy::{TraceFault, TraceProxy};
    let node = start(AnvilOptions::default()).await;
    let forwarder = node.deploy_forwarder().await.unwrap();
    node.set_automine(false).await.unwrap();
    let plain = node.send_eth(ACCOUNTS[1], &payee(1), 5).await.unwrap();
    let forwarded = node
        .forward(&forwarder, ACCOUNTS[2], &payee(2), 9)
        .await
        .unwrap();
    let height = node.mine(1).await.unwrap();
    let hash = node.block_hash(height).await.unwrap();
    let options = json!({ "tracer": "callTracer", "timeout": "20s" });
    let proxy = TraceProxy::start(
        node.url(),
        Some(TraceFault::TxTimeout {
            tx: forwarded.clone(),
        }),
    )
    .await
    .unwrap();

    // geth's per-transaction timeout: the block's trace succeeds, one entry
    // has only the error.
    let a = raw_call(
        &proxy.url(),
        "debug_traceBlockByHash",
        json!([hash, options]),
    )
    .await;
    let entries = a["result"].as_array().expect("a block trace");
    assert_eq!(entries.len(), 2, "{a}");
    let by_tx = |tx: &str| {
        entries
            .iter()
            .find(|e| e["txHash"].as_str() == Some(tx))
            .unwrap_or_else(|| panic!("{tx} in {a}"))
    };
    assert_eq!(by_tx(&forwarded)["error"], "execution timeout");
    assert!(by_tx(&forwarded).get("result").is_none());
    assert_eq!(by_tx(&plain)["result"]["type"], "CALL");

    // No debug_* at all: geth's -32601.
    proxy.set_fault(Some(TraceFault::MethodNotFound));
    let a = raw_call(
        &proxy.url(),
        "debug_traceBlockByHash",
        json!([hash, options]),
    )
    .await;
    assert_eq!(a["error"]["code"], -32601, "{a}");
    assert_eq!(
        a["error"]["message"],
        "the method debug_traceBlockByHash does not exist/is not available"
    );

    // Pruned state.
    proxy.set_fault(Some(TraceFault::MissingTrieNode));
    let a = raw_call(
        &proxy.url(),
        "debug_traceBlockByHash",
        json!([hash, options]),
    )
    .await;
    assert_eq!(a["error"]["code"], -32000, "{a}");
    assert!(a["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("missing trie node"));

    // Everything else is anvil's, and the options are recorded.
    let a = raw_call(&proxy.url(), "eth_blockNumber", json!([])).await;
    assert_eq!(a["result"], format!("{height:#x}"));
    proxy.set_fault(None);
    let a = raw_call(
        &proxy.url(),
        "debug_traceBlockByHash",
        json!([hash, options]),
    )
    .await;
    assert_eq!(a["result"].as_array().map(Vec::len), Some(2), "{a}");
    let calls = proxy.calls();
    assert_eq!(calls.options.len(), 4);
    assert!(calls.options.iter().all(|o| o["timeout"] == "20s"));
    assert_eq!(calls.spoiled.get("debug_traceBlockByHash"), Some(&3));
}

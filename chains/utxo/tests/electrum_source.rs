//! The Electrum source against a real ElectrumX over a real regtest
//! litecoind. They need the binaries (`bash deploy/install-nodes.sh`) and
//! fail, not skip, without them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use paywatch_core::{
    Amount, Asset, AssetId, BlockSource, CanonicalStream, ChainEvent, Network, SourceError,
    Transfer, Unconfirmed, WatchSet,
};
use paywatch_testkit::{ElectrumX, LitecoinNode, NodeOptions};
use paywatch_utxo::{watch_key, Chain, ElectrumConfig, ElectrumError, ElectrumSource, Params};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

struct Setup {
    node: LitecoinNode,
    server: ElectrumX,
}

async fn setup() -> Setup {
    let t = Instant::now();
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("starting litecoind: {e}"));
    let server = ElectrumX::start(&node)
        .await
        .unwrap_or_else(|e| panic!("starting ElectrumX: {e}"));
    server.wait_synced_with(&node).await.unwrap();
    eprintln!("litecoind and ElectrumX ready in {:?}", t.elapsed());
    Setup { node, server }
}

fn watch_set() -> Arc<WatchSet> {
    Arc::new(
        WatchSet::new(Network::Litecoin)
            .keyed(watch_key(Network::Litecoin))
            .listing(),
    )
}

fn config(url: &str) -> ElectrumConfig {
    ElectrumConfig {
        params: Params::new(Network::Litecoin, Chain::Regtest).unwrap(),
        url: url.to_owned(),
        confirmations: 6,
        batch_size: 2,
        max_subscriptions: 100,
        mempool: true,
    }
}

fn source(s: &Setup, watch: &Arc<WatchSet>) -> Arc<ElectrumSource> {
    Arc::new(ElectrumSource::new(config(&s.server.tcp_url()), watch.clone()).unwrap())
}

/// Mines `n` blocks and waits until ElectrumX has them.
async fn mine(s: &Setup, n: u64) -> Vec<String> {
    let hashes = s.node.mine(n).await.unwrap();
    s.server.wait_synced_with(&s.node).await.unwrap();
    hashes
}

/// The output index of `txid` that pays `address`.
async fn vout(s: &Setup, txid: &str, address: &str) -> u32 {
    let tx = s
        .node
        .rpc("getrawtransaction", json!([txid, true]))
        .await
        .unwrap();
    let n = tx["vout"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| {
            // litecoind 0.21 lists `addresses`; newer nodes say `address`.
            let key = &o["scriptPubKey"];
            key["address"].as_str() == Some(address)
                || key["addresses"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(address)))
        })
        .unwrap_or_else(|| panic!("{txid} pays {address}"))["n"]
        .as_u64()
        .unwrap();
    u32::try_from(n).unwrap()
}

fn payment(txid: &str, index: u32, to: &str, litoshi: u128) -> Transfer {
    Transfer {
        network: Network::Litecoin,
        asset: AssetId::Known(Asset::Ltc),
        txid: txid.to_owned(),
        index,
        to: to.to_owned(),
        from: None,
        amount: Amount(litoshi),
        success: true,
        matures_at: None,
    }
}

/// Polls the source's mempool view until `done` holds (ElectrumX polls the
/// node's mempool every 200 ms, and says so only then).
async fn unconfirmed_until(
    source: &ElectrumSource,
    done: impl Fn(&Unconfirmed) -> bool,
) -> Unconfirmed {
    let started = Instant::now();
    loop {
        let got = source.unconfirmed().await.unwrap().expect("mempool is on");
        if done(&got) {
            return got;
        }
        assert!(
            started.elapsed() < WAIT,
            "the mempool view never got there: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payment_shows_in_the_mempool_then_in_its_block() {
    let s = setup().await;
    let watch = watch_set();
    let address = s.node.new_address().await.unwrap();
    watch.insert(&address);
    let source = source(&s, &watch);

    let started = Instant::now();
    let tip = source.tip().await.unwrap();
    eprintln!(
        "first tip() (connect, subscribe, histories): {:?}",
        started.elapsed()
    );
    assert_eq!(tip.height, 101);
    assert_eq!(tip.hash, s.node.best_hash().await.unwrap());
    assert_eq!(tip.parent, s.node.block_hash(100).await.unwrap());
    assert_eq!(source.final_height().await.unwrap(), 96);
    let empty = source.unconfirmed().await.unwrap().unwrap();
    assert!(empty.transfers.is_empty(), "{empty:?}");
    assert_eq!(empty.tip, tip.hash);

    let txid = s.node.send(&address, "1.5").await.unwrap();
    let index = vout(&s, &txid, &address).await;
    let expected = payment(&txid, index, &address, 150_000_000);
    let pool = unconfirmed_until(&source, |u| !u.transfers.is_empty()).await;
    assert_eq!(pool.transfers, vec![expected.clone()]);
    assert_eq!(pool.tip, tip.hash);

    let mined = mine(&s, 1).await;
    let started = Instant::now();
    let tip = source.tip().await.unwrap();
    eprintln!("tip() after a block: {:?}", started.elapsed());
    assert_eq!((tip.height, tip.hash.as_str()), (102, mined[0].as_str()));

    let started = Instant::now();
    let block = source.block(102).await.unwrap().expect("block 102");
    eprintln!("block() with one payment: {:?}", started.elapsed());
    assert_eq!(block.block, tip);
    let header = s
        .node
        .rpc("getblockheader", json!([mined[0], true]))
        .await
        .unwrap();
    assert_eq!(block.timestamp, header["time"].as_i64().unwrap());
    assert_eq!(block.transfers, vec![expected]);
    assert_eq!(source.block_ref(102).await.unwrap(), Some(tip.clone()));

    // Mined: out of the mempool view at once, since the tip moved.
    let pool = source.unconfirmed().await.unwrap().unwrap();
    assert!(pool.transfers.is_empty(), "{pool:?}");
    assert_eq!(pool.tip, tip.hash);

    let before = source.block(101).await.unwrap().expect("block 101");
    assert!(before.transfers.is_empty());
    assert_eq!(before.block.hash, tip.parent);
    assert_eq!(source.block(103).await.unwrap(), None);
    assert_eq!(source.block_ref(103).await.unwrap(), None);
    assert_eq!(source.final_height().await.unwrap(), 97);
    let genesis = source.block_ref(0).await.unwrap().unwrap();
    assert_eq!(genesis.hash, s.node.block_hash(0).await.unwrap());
    assert_eq!(genesis.parent, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn payments_in_one_block_to_addresses_added_on_the_way() {
    let s = setup().await;
    let watch = watch_set();
    let first = s.node.new_address().await.unwrap();
    watch.insert(&first);
    let source = source(&s, &watch);
    source.tip().await.unwrap();

    // Added after the source subscribed the first: taken in on the next call.
    let second = s.node.new_address().await.unwrap();
    let third = s.node.new_address().await.unwrap();
    watch.extend([second.as_str(), third.as_str()]);
    let stranger = s.node.new_address().await.unwrap();

    let a = s.node.send(&first, "1.5").await.unwrap();
    let b = s.node.send(&second, "0.25").await.unwrap();
    let c = s
        .node
        .rpc(
            "sendmany",
            json!(["", { first.clone(): 2, third.clone(): 3, stranger.clone(): 4 }]),
        )
        .await
        .unwrap();
    let c = c.as_str().unwrap().to_owned();
    s.node.send(&stranger, "0.5").await.unwrap();

    let mut expected = vec![
        payment(&a, vout(&s, &a, &first).await, &first, 150_000_000),
        payment(&b, vout(&s, &b, &second).await, &second, 25_000_000),
        payment(&c, vout(&s, &c, &first).await, &first, 200_000_000),
        payment(&c, vout(&s, &c, &third).await, &third, 300_000_000),
    ];
    expected.sort_by(|x, y| (&x.txid, x.index).cmp(&(&y.txid, y.index)));
    let pool = unconfirmed_until(&source, |u| u.transfers.len() == 4).await;
    let mut got = pool.transfers.clone();
    got.sort_by(|x, y| (&x.txid, x.index).cmp(&(&y.txid, y.index)));
    assert_eq!(got, expected);

    let mined = mine(&s, 1).await;
    let tip = source.tip().await.unwrap();
    assert_eq!(tip.hash, mined[0]);
    let block = source.block(tip.height).await.unwrap().unwrap();
    assert_eq!(block.transfers.len(), 4, "{:?}", block.transfers);
    // In block order: each transaction where the block has it.
    let order: Vec<String> = s.node.rpc("getblock", json!([mined[0], 1])).await.unwrap()["tx"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect();
    let positions: Vec<usize> = block
        .transfers
        .iter()
        .map(|t| order.iter().position(|x| *x == t.txid).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] <= w[1]), "{positions:?}");
    let mut got = block.transfers.clone();
    got.sort_by(|x, y| (&x.txid, x.index).cmp(&(&y.txid, y.index)));
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reorg_takes_the_payment_out_of_its_block() {
    let s = setup().await;
    let watch = watch_set();
    let address = s.node.new_address().await.unwrap();
    watch.insert(&address);
    let source = source(&s, &watch);
    let mut stream = CanonicalStream::new(source.clone(), Vec::new(), 101, 6);
    let events = stream.next_batch(10).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");

    let txid = s.node.send(&address, "1.5").await.unwrap();
    let expected = payment(
        &txid,
        vout(&s, &txid, &address).await,
        &address,
        150_000_000,
    );
    let old = mine(&s, 1).await.remove(0);
    let events = stream.next_batch(10).await.unwrap();
    let [ChainEvent::Connected {
        block, transfers, ..
    }] = events.as_slice()
    else {
        panic!("one connect: {events:?}");
    };
    assert_eq!((block.height, block.hash.as_str()), (102, old.as_str()));
    assert_eq!(transfers, &vec![expected.clone()]);

    // Replace block 102 by an empty one: the payment goes back to the pool.
    // ElectrumX only looks for new blocks by height, so it follows a
    // replacement only once the new chain is longer: a second empty block.
    s.node.invalidate(&old).await.unwrap();
    let mut empty = Vec::new();
    for _ in 0..2 {
        let made = s
            .node
            .rpc("generateblock", json!([s.node.mining_address(), []]))
            .await
            .unwrap();
        empty.push(made["hash"].as_str().unwrap().to_owned());
    }
    s.server.wait_synced_with(&s.node).await.unwrap();
    assert_eq!(s.node.block_hash(102).await.unwrap(), empty[0]);

    let started = Instant::now();
    let block = source.block(102).await.unwrap().unwrap();
    eprintln!("block() across the reorg: {:?}", started.elapsed());
    assert_eq!(block.block.hash, empty[0]);
    assert!(block.transfers.is_empty(), "{:?}", block.transfers);

    // The stream follows the reorg: the payment's block goes, the two empty ones come.
    let mut events = Vec::new();
    loop {
        let batch = stream.next_batch(10).await.unwrap();
        if batch.is_empty() {
            break;
        }
        events.extend(batch);
    }
    match events.as_slice() {
        [ChainEvent::Disconnected { block: gone }, ChainEvent::Connected {
            block: first,
            transfers: none,
            ..
        }, ChainEvent::Connected {
            block: second,
            transfers: none_either,
            ..
        }] => {
            assert_eq!(gone.hash, old);
            assert_eq!((first.height, &first.hash), (102, &empty[0]));
            assert_eq!((second.height, &second.hash), (103, &empty[1]));
            assert!(none.is_empty() && none_either.is_empty(), "{events:?}");
        }
        other => panic!("a disconnect, then the two empty blocks: {other:?}"),
    }
    let pool = unconfirmed_until(&source, |u| !u.transfers.is_empty()).await;
    assert_eq!(pool.transfers, vec![expected.clone()]);
    assert_eq!(pool.tip, empty[1]);

    // The payment lands again in the next block.
    let next = mine(&s, 1).await.remove(0);
    let events = stream.next_batch(10).await.unwrap();
    let [ChainEvent::Connected {
        block, transfers, ..
    }] = events.as_slice()
    else {
        panic!("one connect: {events:?}");
    };
    assert_eq!((block.height, block.hash.as_str()), (104, next.as_str()));
    assert_eq!(transfers, &vec![expected]);
}

#[tokio::test(flavor = "multi_thread")]
async fn too_many_addresses_and_the_wrong_chain_are_fatal() {
    let s = setup().await;
    let watch = watch_set();
    for _ in 0..2 {
        watch.insert(&s.node.new_address().await.unwrap());
    }
    let mut cfg = config(&s.server.tcp_address());
    cfg.max_subscriptions = 2;
    let source = ElectrumSource::new(cfg, watch.clone()).unwrap();
    assert_eq!(source.tip().await.unwrap().height, 101);

    watch.insert(&s.node.new_address().await.unwrap());
    let err = source.tip().await.unwrap_err();
    let SourceError::Fatal(msg) = &err else {
        panic!("a limit needs an operator: {err}");
    };
    for needle in [
        "3 litecoin addresses",
        "limit of 2",
        "max_subscriptions",
        "full node",
    ] {
        assert!(
            msg.to_lowercase().contains(&needle.to_lowercase()),
            "{needle}: {msg}"
        );
    }
    let err = source.block(101).await.unwrap_err();
    assert!(!err.is_transient(), "{err}");

    // A mainnet configuration on a regtest server.
    let mut cfg = config(&s.server.tcp_url());
    cfg.params = Params::new(Network::Litecoin, Chain::Main).unwrap();
    let mainnet = ElectrumSource::new(cfg, watch_set()).unwrap();
    let err = mainnet.tip().await.unwrap_err();
    let SourceError::Fatal(msg) = &err else {
        panic!("the wrong chain needs an operator: {err}");
    };
    assert!(msg.contains("Litecoin regtest"), "{msg}");
}

#[tokio::test(flavor = "multi_thread")]
async fn reconnects_after_the_server_went_away() {
    let mut s = setup().await;
    let watch = watch_set();
    let address = s.node.new_address().await.unwrap();
    watch.insert(&address);
    let source = source(&s, &watch);
    source.tip().await.unwrap();

    s.server.stop().await.unwrap();
    let txid = s.node.send(&address, "1.5").await.unwrap();
    let mined = s.node.mine(1).await.unwrap();
    let err = source.tip().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains(&s.server.tcp_url()), "{err}");

    s.server.start_again(&s.node).await.unwrap();
    s.server.wait_synced_with(&s.node).await.unwrap();
    let tip = source.tip().await.unwrap();
    assert_eq!(tip.hash, mined[0]);
    let block = source.block(tip.height).await.unwrap().unwrap();
    assert_eq!(
        block.transfers,
        vec![payment(
            &txid,
            vout(&s, &txid, &address).await,
            &address,
            150_000_000
        )]
    );
}

#[test]
fn configuration_is_checked_up_front() {
    let unlisted = Arc::new(WatchSet::new(Network::Litecoin).keyed(watch_key(Network::Litecoin)));
    let err = ElectrumSource::new(config("127.0.0.1:50001"), unlisted).unwrap_err();
    assert!(matches!(err, ElectrumError::NotListing), "{err}");
    assert!(err.to_string().contains("listing"), "{err}");

    let err = ElectrumSource::new(config("ssl://electrum.example:50002"), watch_set()).unwrap_err();
    assert!(err.is_fatal() && err.to_string().contains("TLS"), "{err}");

    let bitcoin = Arc::new(WatchSet::new(Network::Bitcoin).listing());
    let err = ElectrumSource::new(config("127.0.0.1:50001"), bitcoin).unwrap_err();
    assert!(matches!(err, ElectrumError::WrongNetwork { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_transient_and_named() {
    // Bound and released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("tcp://127.0.0.1:{port}");
    let source = ElectrumSource::new(config(&url), watch_set()).unwrap();
    for _ in 0..2 {
        let err = source.tip().await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert!(err.to_string().contains(&url), "{err}");
    }
    let err = source.unconfirmed().await.unwrap_err();
    assert!(err.to_string().contains(&url), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn litecoin_mweb_transactions_are_read() {
    let t = Instant::now();
    let node = LitecoinNode::start(NodeOptions {
        mweb: true,
        ..NodeOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("starting litecoind: {e}"));
    // MWEB activates at height 432.
    node.mine(340).await.unwrap();
    let server = ElectrumX::start(&node)
        .await
        .unwrap_or_else(|e| panic!("starting ElectrumX: {e}"));
    server.wait_synced_with(&node).await.unwrap();
    eprintln!("MWEB chain and ElectrumX ready in {:?}", t.elapsed());
    let s = Setup { node, server };

    let watch = watch_set();
    let source = source(&s, &watch);
    source.tip().await.unwrap();

    // A payment out of MWEB (a peg-out): with its canonical coins locked,
    // the wallet can only pay from the 1 LTC pegged in while mining. The
    // watched output is then made by the block's HogEx, a transaction
    // serialized with MWEB data that Bitcoin's decoder refuses.
    let canonical = s.node.rpc("listunspent", json!([0])).await.unwrap();
    let outpoints: Vec<Value> = canonical
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["txid"].is_string() && u["vout"].is_u64())
        .map(|u| json!({ "txid": u["txid"], "vout": u["vout"] }))
        .collect();
    assert!(!outpoints.is_empty());
    s.node
        .rpc("lockunspent", json!([false, outpoints]))
        .await
        .unwrap();
    let address = s.node.new_address().await.unwrap();
    watch.insert(&address);
    source.tip().await.unwrap();
    s.node.send(&address, "0.5").await.unwrap();
    // Unmined, a peg-out pays nobody yet: the HogEx is made with the block.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pool = source.unconfirmed().await.unwrap().unwrap();
    assert!(pool.transfers.is_empty(), "{pool:?}");
    let mined = mine(&s, 1).await;
    let tip = source.tip().await.unwrap();
    assert_eq!(tip.hash, mined[0]);
    let block = source.block(tip.height).await.unwrap().unwrap();
    let txids = s.node.rpc("getblock", json!([mined[0], 1])).await.unwrap()["tx"].clone();
    let hogex = txids
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    let raw = s
        .node
        .rpc("getrawtransaction", json!([hogex]))
        .await
        .unwrap();
    let raw = paywatch_testkit::litecoind::decode_hex(raw.as_str().unwrap()).unwrap();
    assert_eq!(
        (raw[4], raw[5] & 0x08),
        (0, 0x08),
        "the HogEx carries the MWEB flag"
    );
    let paid = payment(
        &hogex,
        vout(&s, &hogex, &address).await,
        &address,
        50_000_000,
    );
    assert_eq!(block.transfers, vec![paid]);
}

/// Drives `stream` until it is caught up; returns every event.
async fn catch_up(stream: &mut CanonicalStream<Arc<ElectrumSource>>) -> Vec<ChainEvent> {
    let mut events = Vec::new();
    loop {
        // As the daemon asks by default (blocks_per_poll).
        let batch = stream.next_batch(100).await.unwrap();
        if batch.is_empty() {
            return events;
        }
        events.extend(batch);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn catching_up_200_blocks_finds_both_payments_at_their_heights() {
    let s = setup().await;
    let watch = watch_set();
    let first = s.node.new_address().await.unwrap();
    let second = s.node.new_address().await.unwrap();
    watch.extend([first.as_str(), second.as_str()]);
    let start = s.node.block_count().await.unwrap() + 1;
    s.node.mine(60).await.unwrap();
    let a = s.node.send(&first, "1.5").await.unwrap();
    let a_block = s.node.mine(1).await.unwrap().remove(0);
    s.node.mine(70).await.unwrap();
    let b = s.node.send(&second, "0.25").await.unwrap();
    let b_block = s.node.mine(1).await.unwrap().remove(0);
    s.node.mine(68).await.unwrap();
    let tip = s.server.wait_synced_with(&s.node).await.unwrap();
    assert_eq!(tip, start + 199);
    let (a_height, b_height) = (start + 60, start + 131);
    assert_eq!(s.node.block_hash(a_height).await.unwrap(), a_block);
    assert_eq!(s.node.block_hash(b_height).await.unwrap(), b_block);
    let paid_a = payment(&a, vout(&s, &a, &first).await, &first, 150_000_000);
    let paid_b = payment(&b, vout(&s, &b, &second).await, &second, 25_000_000);

    let source = source(&s, &watch);
    let mut stream = CanonicalStream::new(source.clone(), Vec::new(), start, 6);
    let started = Instant::now();
    let events = catch_up(&mut stream).await;
    eprintln!(
        "caught up {} blocks over ElectrumX in {:?}",
        events.len(),
        started.elapsed()
    );

    assert_eq!(events.len(), 200);
    let mut parent = s.node.block_hash(start - 1).await.unwrap();
    for (height, event) in (start..).zip(&events) {
        let ChainEvent::Connected {
            block, transfers, ..
        } = event
        else {
            panic!("only connects: {event:?}");
        };
        assert_eq!(block.height, height);
        assert_eq!(block.parent, parent, "at {height}");
        assert_eq!(block.hash, s.node.block_hash(height).await.unwrap());
        let expected = match height {
            h if h == a_height => vec![paid_a.clone()],
            h if h == b_height => vec![paid_b.clone()],
            _ => Vec::new(),
        };
        assert_eq!(transfers, &expected, "at {height}");
        parent.clone_from(&block.hash);
    }
    assert_eq!(
        stream.cursor_tip().map(|b| b.hash.clone()),
        Some(s.node.best_hash().await.unwrap())
    );
}

/// The server moves to another branch while the stream catches up over
/// headers read ahead of it. The first header not yet handed out still
/// names the stream's last block as its parent, but is no longer on the
/// server's chain: the stream must walk back, not connect it.
#[tokio::test(flavor = "multi_thread")]
async fn a_reorg_while_catching_up_is_followed_not_read_from_old_headers() {
    let s = setup().await;
    let watch = watch_set();
    let address = s.node.new_address().await.unwrap();
    watch.insert(&address);
    let start = s.node.block_count().await.unwrap() + 1;
    s.node.mine(5).await.unwrap();
    let txid = s.node.send(&address, "1.5").await.unwrap();
    let paid = payment(
        &txid,
        vout(&s, &txid, &address).await,
        &address,
        150_000_000,
    );
    // litecoind puts the transactions of at most 10 disconnected blocks
    // back in its mempool: the old branch stays shorter than that.
    s.node.mine(9).await.unwrap();
    let old_tip = s.server.wait_synced_with(&s.node).await.unwrap();
    let paid_at = start + 5;
    let mut old = Vec::new();
    for height in start..=old_tip {
        old.push(s.node.block_hash(height).await.unwrap());
    }

    // The first block brings the headers up to the tip with it.
    let source = source(&s, &watch);
    let mut stream = CanonicalStream::new(source.clone(), Vec::new(), start, 50);
    let events = stream.next_batch(10).await.unwrap();
    assert_eq!(events.len(), 10);
    for (event, hash) in events.iter().zip(&old) {
        let ChainEvent::Connected {
            block, transfers, ..
        } = event
        else {
            panic!("only connects: {event:?}");
        };
        assert_eq!(&block.hash, hash);
        let expected = if block.height == paid_at {
            vec![paid.clone()]
        } else {
            Vec::new()
        };
        assert_eq!(transfers, &expected, "at {}", block.height);
    }
    let cursor = start + 9;
    assert!(cursor < old_tip);

    // Replace the chain from the payment's block (below the stream's last
    // block) with a longer branch, mined to another address so no block of
    // it can be one of the old ones; the payment goes into its first block.
    let fork = paid_at;
    s.node
        .invalidate(&old[usize::try_from(fork - start).unwrap()])
        .await
        .unwrap();
    let elsewhere = s.node.new_address().await.unwrap();
    let branch: Vec<String> = s
        .node
        .rpc("generatetoaddress", json!([old_tip - fork + 2, elsewhere]))
        .await
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    let new_tip = s.server.wait_synced_with(&s.node).await.unwrap();
    assert_eq!(new_tip, old_tip + 1);

    let events = catch_up(&mut stream).await;
    let depth = usize::try_from(cursor - fork + 1).unwrap();
    let (gone, came) = events.split_at(depth.min(events.len()));
    for (event, height) in gone.iter().zip((fork..=cursor).rev()) {
        let ChainEvent::Disconnected { block } = event else {
            panic!("disconnects first, highest first, from {cursor} to {fork}: {events:?}");
        };
        assert_eq!(block.height, height);
        assert_eq!(block.hash, old[usize::try_from(height - start).unwrap()]);
    }
    assert_eq!(came.len(), branch.len(), "{events:?}");
    for ((event, hash), height) in came.iter().zip(&branch).zip(fork..) {
        let ChainEvent::Connected {
            block, transfers, ..
        } = event
        else {
            panic!("then the new branch's connects: {event:?}");
        };
        assert_eq!((block.height, &block.hash), (height, hash));
        let expected = if height == fork {
            vec![paid.clone()]
        } else {
            Vec::new()
        };
        assert_eq!(transfers, &expected, "at {height}");
    }
    assert_eq!(
        stream.cursor_tip().map(|b| b.hash.clone()),
        Some(s.node.best_hash().await.unwrap())
    );
}

/// `count` addresses nobody pays: P2WPKH of made-up key hashes.
fn idle_addresses(count: u32) -> Vec<String> {
    use bitcoin::hashes::{sha256, Hash as _};
    let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
    (0..count)
        .map(|i| {
            let digest = sha256::Hash::hash(&i.to_le_bytes()).to_byte_array();
            let mut hash = [0u8; 20];
            hash.copy_from_slice(&digest[..20]);
            let script =
                bitcoin::ScriptBuf::new_p2wpkh(&bitcoin::WPubkeyHash::from_byte_array(hash));
            paywatch_utxo::address_for_script(&params, &script).unwrap()
        })
        .collect()
}

/// Drives `stream` until it is caught up, through the transient errors of
/// a server that is starting again; returns every event.
async fn catch_up_through_restart(
    stream: &mut CanonicalStream<Arc<ElectrumSource>>,
) -> Vec<ChainEvent> {
    let started = Instant::now();
    let mut events = Vec::new();
    loop {
        match stream.next_batch(100).await {
            Ok(batch) if batch.is_empty() => return events,
            Ok(batch) => events.extend(batch),
            Err(e) if e.is_transient() && started.elapsed() < WAIT => {
                eprintln!("while the server starts again: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the stream failed: {e}"),
        }
    }
}

/// The transfers each connected event carries, by height.
fn transfers_by_height(events: &[ChainEvent]) -> Vec<(u64, Vec<Transfer>)> {
    events
        .iter()
        .map(|e| match e {
            ChainEvent::Connected {
                block, transfers, ..
            } => (block.height, transfers.clone()),
            other => panic!("only connects here: {other:?}"),
        })
        .collect()
}

/// Our session on the server: the one holding the watched addresses.
async fn our_session(s: &Setup, subscriptions: u64) -> paywatch_testkit::ElectrumSession {
    let sessions = s.server.sessions().await.unwrap();
    sessions
        .iter()
        .find(|x| x.subscriptions >= subscriptions)
        .cloned()
        .unwrap_or_else(|| panic!("no session holds {subscriptions} subscriptions: {sessions:?}"))
}

/// A busy shop's 5,000 watched addresses over an ElectrumX with its default
/// cost limits (soft 1,000, hard 10,000), through a catch-up, 20 new blocks
/// (payments in some: seen in the mempool first, or first in their block),
/// and a server restart with a payment made while it was down. ElectrumX
/// must never close the session over its cost, and paywatch must re-read a
/// history only when its status changed: over the 20 blocks it sends less
/// than one reading of every history would, and after the reconnect, about
/// what subscribing again takes.
#[tokio::test(flavor = "multi_thread")]
async fn five_thousand_addresses_are_followed_within_electrumxs_cost_limits() {
    const WATCHED: u32 = 5_000;
    let mut s = setup().await;
    let paid: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(s.node.new_address().await.unwrap());
        }
        v
    };
    let idle = idle_addresses(WATCHED - 6);
    let watch = watch_set();
    watch.extend(paid.iter().chain(&idle).map(String::as_str));
    let cfg = ElectrumConfig {
        // As config/default.toml and the production example have them.
        batch_size: 500,
        max_subscriptions: 10_000,
        ..config(&s.server.tcp_url())
    };
    let source = Arc::new(ElectrumSource::new(cfg, watch.clone()).unwrap());

    let mut expected: Vec<(u64, Transfer)> = Vec::new();
    let start = s.node.block_count().await.unwrap() + 1;
    s.node.mine(10).await.unwrap();
    let txid = s.node.send(&paid[0], "1").await.unwrap();
    let height = s.node.block_count().await.unwrap() + 1;
    s.node.mine(1).await.unwrap();
    expected.push((
        height,
        payment(
            &txid,
            vout(&s, &txid, &paid[0]).await,
            &paid[0],
            100_000_000,
        ),
    ));
    mine(&s, 10).await;

    let mut stream = CanonicalStream::new(source.clone(), Vec::new(), start, 6);
    let mut events = catch_up(&mut stream).await;
    assert_eq!(events.len(), 21);
    let after_catch_up = our_session(&s, u64::from(WATCHED)).await;
    eprintln!("after subscribing {WATCHED} addresses and catching up: {after_catch_up:?}");

    for block in 0..20u32 {
        let payee = match block {
            3 => Some((&paid[1], true)),
            8 => Some((&paid[2], false)),
            12 => Some((&paid[3], true)),
            17 => Some((&paid[4], false)),
            _ => None,
        };
        let mut sent = None;
        if let Some((to, through_mempool)) = payee {
            let txid = s.node.send(to, "0.5").await.unwrap();
            if through_mempool {
                unconfirmed_until(&source, |u| u.transfers.iter().any(|t| t.txid == txid)).await;
            }
            sent = Some((to.clone(), txid));
        }
        let height = s.node.block_count().await.unwrap() + 1;
        mine(&s, 1).await;
        if let Some((to, txid)) = sent {
            expected.push((
                height,
                payment(&txid, vout(&s, &txid, &to).await, &to, 50_000_000),
            ));
        }
        let got = catch_up(&mut stream).await;
        assert_eq!(got.len(), 1, "block {block}: {got:?}");
        events.extend(got);
    }
    let after_blocks = our_session(&s, u64::from(WATCHED)).await;
    eprintln!("after 20 blocks: {after_blocks:?}");

    // A payment while the server is down; the source meets a new session.
    s.server.stop().await.unwrap();
    let txid = s.node.send(&paid[5], "0.25").await.unwrap();
    let height = s.node.block_count().await.unwrap() + 1;
    s.node.mine(1).await.unwrap();
    expected.push((
        height,
        payment(&txid, vout(&s, &txid, &paid[5]).await, &paid[5], 25_000_000),
    ));
    s.server.start_again(&s.node).await.unwrap();
    s.server.wait_synced_with(&s.node).await.unwrap();
    let got = catch_up_through_restart(&mut stream).await;
    assert_eq!(got.len(), 1, "after the restart: {got:?}");
    events.extend(got);
    let after_reconnect = our_session(&s, u64::from(WATCHED)).await;
    eprintln!("after the reconnect: {after_reconnect:?}");

    // Every payment, at its height, and nothing else.
    let found: Vec<(u64, Transfer)> = transfers_by_height(&events)
        .into_iter()
        .flat_map(|(h, ts)| ts.into_iter().map(move |t| (h, t)))
        .collect();
    assert_eq!(found, expected);

    assert!(
        !s.server.closed_a_session_over_cost(),
        "ElectrumX closed paywatch's session over its cost:\n{}",
        s.server.log_tail()
    );
    assert_eq!(
        s.server.timed_out_requests(),
        0,
        "requests timed out waiting for the throttled session:\n{}",
        s.server.log_tail()
    );
    // ElectrumX counts each request of a batch. Subscribing is one per
    // address; reading every history again would be another.
    let watched = u64::from(WATCHED);
    assert!(
        after_catch_up.requests < watched + watched / 10,
        "subscribing {watched} addresses (one paid) and catching up took {} requests",
        after_catch_up.requests
    );
    let asked = after_blocks.requests - after_catch_up.requests;
    assert!(
        asked < watched / 10,
        "20 blocks took {asked} requests ({} bytes) for {watched} addresses",
        after_blocks.bytes_received - after_catch_up.bytes_received
    );
    assert!(
        after_reconnect.requests < watched + watched / 10,
        "after the reconnect, {} requests for {watched} addresses: subscribing again \
         is needed, reading every history again is not",
        after_reconnect.requests
    );
}

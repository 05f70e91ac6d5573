//! `NodeSource` following a busy mempool of a real Litecoin Core regtest
//! node through a watch-only wallet, against reading the whole txid list.

use std::sync::{Arc, Mutex};

use paywatch_core::{BlockSource, CanonicalStream, Network, WatchSet};
use paywatch_testkit::{LitecoinNode, NodeOptions};
use paywatch_utxo::{watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params, RpcAuth};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What went through a [`relay`]: the methods called and the bytes the node sent.
#[derive(Default)]
struct Traffic {
    methods: Vec<String>,
    bytes_down: usize,
}

/// A TCP relay in front of the node that counts what passes.
async fn relay(node_port: u16) -> (String, Arc<Mutex<Traffic>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let traffic = Arc::new(Mutex::new(Traffic::default()));
    let counted = traffic.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let Ok(node) = TcpStream::connect(("127.0.0.1", node_port)).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_node, mut to_node) = node.into_split();
                // Counted before passing on, so a caller that has its answer
                // finds it counted.
                let up = async {
                    let mut seen = Vec::new();
                    let mut known = 0;
                    let mut buf = vec![0u8; 64 << 10];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let methods: Vec<String> = text
                            .split(r#""method":"#)
                            .skip(1)
                            .map(|part| {
                                let name = part.trim_start().trim_start_matches('"');
                                name.split('"').next().unwrap_or_default().to_owned()
                            })
                            .collect();
                        counted
                            .lock()
                            .unwrap()
                            .methods
                            .extend(methods.iter().skip(known).cloned());
                        known = methods.len();
                        if to_node.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    // The client is gone: so is the relay, or the node would
                    // keep the connection and wait for it when told to stop.
                    let _ = to_node.shutdown().await;
                };
                let down = async {
                    let mut buf = vec![0u8; 64 << 10];
                    while let Ok(n @ 1..) = from_node.read(&mut buf).await {
                        counted.lock().unwrap().bytes_down += n;
                        if to_client.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                tokio::join!(up, down);
            });
        }
    });
    (url, traffic)
}

fn source(
    node: &LitecoinNode,
    url: &str,
    wallet: Option<&str>,
    watch: Arc<WatchSet>,
) -> NodeSource {
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
            confirmations: 6,
            blocks_per_request: 50,
            mempool: true,
            mempool_wallet: wallet.map(str::to_owned),
        },
        watch,
    )
}

fn listing_watch() -> Arc<WatchSet> {
    Arc::new(
        WatchSet::new(Network::Litecoin)
            .keyed(watch_key(Network::Litecoin))
            .listing(),
    )
}

/// One idle watcher poll: the tip, the final height, then the mempool.
async fn idle_poll(stream: &mut CanonicalStream<NodeSource>) -> Vec<(String, u128)> {
    assert!(stream.next_batch(100).await.unwrap().is_empty(), "idle");
    stream.confirmed_final_height().await.unwrap();
    let snapshot = stream
        .source()
        .unconfirmed()
        .await
        .unwrap()
        .expect("mempool followed");
    let tip = stream.cursor_tip().unwrap().hash.clone();
    assert_eq!(snapshot.tip, tip, "a whole snapshot at the cursor's tip");
    let mut seen: Vec<(String, u128)> = snapshot
        .transfers
        .iter()
        .map(|t| (t.to.clone(), t.amount.0))
        .collect();
    seen.sort();
    seen
}

async fn caught_up(source: NodeSource, node: &LitecoinNode) -> CanonicalStream<NodeSource> {
    let tip = node.block_count().await.unwrap();
    let mut stream = CanonicalStream::new(source, Vec::new(), tip, 64);
    while !stream.next_batch(100).await.unwrap().is_empty() {}
    stream
}

/// Each idle poll used to fetch the node's whole txid list: 3,000 waiting
/// transactions are 200 KB a poll (20,000 on mainnet, megabytes). Through
/// a watch-only wallet a poll reads only the payments to watched
/// addresses, an address watched after the source started included, and
/// the wallet outlives a node restart.
#[tokio::test]
async fn an_idle_poll_over_a_full_mempool_reads_only_the_watched_payments() {
    let mut node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("litecoind: {e}"));
    node.fill_mempool(3_000).await.unwrap();
    let (url, traffic) = relay(node.rpc_port()).await;

    // Before: the whole list, every poll.
    let watch = listing_watch();
    let first = node.new_address().await.unwrap();
    watch.insert(&first);
    let mut whole = caught_up(source(&node, &url, None, watch.clone()), &node).await;
    idle_poll(&mut whole).await;
    *traffic.lock().unwrap() = Traffic::default();
    idle_poll(&mut whole).await;
    let whole_bytes = traffic.lock().unwrap().bytes_down;
    assert!(
        whole_bytes > 150_000,
        "the whole txid list: {whole_bytes} bytes"
    );

    let mut wallet = caught_up(
        source(&node, &url, Some("paywatch-mempool"), watch.clone()),
        &node,
    )
    .await;
    assert_eq!(idle_poll(&mut wallet).await, vec![], "nothing paid yet");
    node.send(&first, "1.5").await.unwrap();
    let paid_first = (first.clone(), 150_000_000);
    assert_eq!(idle_poll(&mut wallet).await, vec![paid_first.clone()]);

    *traffic.lock().unwrap() = Traffic::default();
    assert_eq!(idle_poll(&mut wallet).await, vec![paid_first.clone()]);
    {
        let t = traffic.lock().unwrap();
        assert!(
            !t.methods.iter().any(|m| m == "getrawmempool"),
            "no whole list: {:?}",
            t.methods
        );
        assert!(
            t.bytes_down < 10_000,
            "an idle poll read {} bytes ({:?}); the whole list was {whole_bytes}",
            t.bytes_down,
            t.methods
        );
        assert!(
            t.methods.len() <= 5,
            "calls in an idle poll: {:?}",
            t.methods
        );
    }

    // An address issued while the source runs is imported at the next poll,
    // before the customer can have paid.
    let second = node.new_address().await.unwrap();
    watch.insert(&second);
    idle_poll(&mut wallet).await;
    node.send(&second, "0.25").await.unwrap();
    let paid_second = (second.clone(), 25_000_000);
    let mut both = vec![paid_first.clone(), paid_second.clone()];
    both.sort();
    assert_eq!(idle_poll(&mut wallet).await, both);

    // The node restarts: its wallet comes back with it, imports kept.
    node.restart().await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..50 {
        match wallet.source().unconfirmed().await {
            Ok(Some(s)) if s.tip == wallet.cursor_tip().unwrap().hash => {
                seen = s
                    .transfers
                    .iter()
                    .map(|t| (t.to.clone(), t.amount.0))
                    .collect();
                seen.sort();
                if seen == both {
                    break;
                }
            }
            _ => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(seen, both, "after a node restart");
    node.send(&second, "0.5").await.unwrap();
    // The wallet hears of a new transaction a moment after the mempool
    // takes it (behind the reloaded pool, after a restart); the next
    // polls see it.
    let mut after = Vec::new();
    for _ in 0..50 {
        after = idle_poll(&mut wallet).await;
        if after.contains(&(second.clone(), 50_000_000)) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        after.contains(&(second.clone(), 50_000_000)),
        "a payment after the restart: {after:?}"
    );
}

/// A wallet that holds keys is someone's wallet, not paywatch's: imports
/// would land among their money, so it is refused, naming the setting.
#[tokio::test]
async fn a_mempool_wallet_with_private_keys_is_refused_naming_the_setting() {
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("litecoind: {e}"));
    let watch = listing_watch();
    watch.insert(&node.new_address().await.unwrap());
    let stream = caught_up(
        source(
            &node,
            &node.rpc_url(),
            Some(paywatch_testkit::litecoind::WALLET),
            watch,
        ),
        &node,
    )
    .await;
    let err = stream.source().unconfirmed().await.unwrap_err().to_string();
    assert!(
        err.contains("rpc.mempool_wallet") && err.contains("private keys"),
        "{err}"
    );
}

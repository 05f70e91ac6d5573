//! `NodeSource` following a busy mempool of a real Litecoin Core regtest
//! node through a watch-only wallet, against reading the whole txid list;
//! the wallet a legacy one (as Litecoin Core makes it) or a descriptor one
//! (as Bitcoin Core 23 and later make it).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bitcoin::hashes::Hash as _;
use paywatch_core::{BlockSource, CanonicalStream, Network, WatchSet};
use paywatch_testkit::rpc_proxy::{Answer, Backends, Route};
use paywatch_testkit::{LitecoinNode, NodeOptions, RpcProxy};
use paywatch_utxo::{watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params, RpcAuth};
use serde_json::{json, Value};
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

/// Bitcoin Core 26 and later in front of a real litecoind, as far as the
/// mempool wallet meets it: `createwallet` makes a descriptor wallet unless
/// told `descriptors: false`, which it refuses without
/// `-deprecatedrpc=create_bdb`; a descriptor wallet says so in
/// `getwalletinfo`, refuses `importmulti`, and takes `importdescriptors`
/// only with each descriptor's checksum and a timestamp. (This litecoind is
/// built without SQLite, so the wallet underneath is a legacy one, fed the
/// same descriptors through `importmulti`.)
#[derive(Default)]
struct DescriptorDefault {
    descriptor_wallets: Mutex<Vec<String>>,
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Answer {
    Answer {
        status: 500,
        body: json!({"result": null, "error": {"code": code, "message": message}, "id": id}),
    }
}

impl DescriptorDefault {
    fn is_descriptor_wallet(&self, path: &str) -> bool {
        path.strip_prefix("/wallet/").is_some_and(|name| {
            self.descriptor_wallets
                .lock()
                .unwrap()
                .iter()
                .any(|w| w == name)
        })
    }

    async fn import_descriptors(
        &self,
        backends: &Backends,
        path: &str,
        auth: Option<&str>,
        id: &Value,
        requests: &[Value],
    ) -> Answer {
        let mut results = Vec::new();
        for request in requests {
            let desc = request["desc"].as_str().unwrap_or_default();
            let Some((bare, given)) = desc.split_once('#') else {
                results.push(
                    json!({"success": false, "error": {"code": -5, "message": "Missing checksum"}}),
                );
                continue;
            };
            if request.get("timestamp").is_none() {
                results.push(json!({"success": false, "error": {"code": -8, "message": "Missing required timestamp field for key"}}));
                continue;
            }
            let info = backends
                .forward(
                    0,
                    "/",
                    auth,
                    &json!({"id": 0, "method": "getdescriptorinfo", "params": [bare]}),
                )
                .await
                .unwrap();
            let computed = info.body["result"]["checksum"].as_str().unwrap_or_default();
            if computed != given {
                results.push(json!({"success": false, "error": {"code": -5, "message":
                    format!("Provided checksum '{given}' does not match computed checksum '{computed}'")}}));
                continue;
            }
            let imported = backends
                .forward(
                    0,
                    path,
                    auth,
                    &json!({"id": 0, "method": "importmulti", "params": [[{
                        "desc": desc, "timestamp": request["timestamp"], "watchonly": true
                    }], {"rescan": false}]}),
                )
                .await
                .unwrap();
            results.push(imported.body["result"][0].clone());
        }
        Answer {
            status: 200,
            body: json!({"result": results, "error": null, "id": id}),
        }
    }
}

#[async_trait]
impl Route for DescriptorDefault {
    async fn handle(
        &self,
        backends: &Backends,
        path: &str,
        auth: Option<&str>,
        mut body: Value,
    ) -> Answer {
        let method = body["method"].as_str().unwrap_or_default().to_owned();
        let id = body["id"].clone();
        let descriptor_wallet = self.is_descriptor_wallet(path);
        match method.as_str() {
            "createwallet" => {
                let params = &mut body["params"];
                let name = params["wallet_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if params.get("descriptors") == Some(&Value::Bool(false)) {
                    return rpc_error(
                        &id,
                        -4,
                        "BDB wallet creation is deprecated and will be removed in a future release. \
                         In this release it can be re-enabled temporarily with the \
                         -deprecatedrpc=create_bdb setting.",
                    );
                }
                params["descriptors"] = Value::Bool(false);
                let answer = backends.forward(0, path, auth, &body).await.unwrap();
                if answer.body["error"].is_null() {
                    self.descriptor_wallets.lock().unwrap().push(name);
                }
                answer
            }
            "importmulti" if descriptor_wallet => {
                rpc_error(&id, -4, "Only legacy wallets are supported by this command")
            }
            "importdescriptors" if descriptor_wallet => {
                let requests = body["params"][0].as_array().cloned().unwrap_or_default();
                self.import_descriptors(backends, path, auth, &id, &requests)
                    .await
            }
            "importdescriptors" => rpc_error(
                &id,
                -4,
                "importdescriptors is not available for non-descriptor wallets",
            ),
            "getwalletinfo" if descriptor_wallet => {
                let mut answer = backends.forward(0, path, auth, &body).await.unwrap();
                answer.body["result"]["descriptors"] = Value::Bool(true);
                answer.body["result"]["format"] = Value::String("sqlite".to_owned());
                answer
            }
            _ => backends.forward(0, path, auth, &body).await.unwrap(),
        }
    }
}

/// Bitcoin Core 23 and later make a descriptor wallet by default (26 and
/// later refuse a new legacy one): paywatch used to create that wallet,
/// then refuse it on every poll, so the mempool was never followed. The
/// wallet it makes is the node's kind; addresses go in as `addr(...)`
/// descriptors, checksummed, and payments show at zero confirmations.
#[tokio::test]
async fn a_node_that_makes_descriptor_wallets_by_default_follows_the_mempool_through_one() {
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("litecoind: {e}"));
    let core = RpcProxy::start(vec![node.rpc_url()], DescriptorDefault::default())
        .await
        .unwrap();
    let watch = listing_watch();
    // Not the paying wallet's own: it could spend a payment to itself.
    let first = foreign_address(1);
    watch.insert(&first);
    let mut wallet = caught_up(
        source(&node, core.url(), Some("paywatch-mempool"), watch.clone()),
        &node,
    )
    .await;
    assert_eq!(idle_poll(&mut wallet).await, vec![], "nothing paid yet");
    node.send(&first, "1.5").await.unwrap();
    assert_eq!(
        idle_poll(&mut wallet).await,
        vec![(first.clone(), 150_000_000)]
    );

    // An address watched later is imported the same way.
    let second = foreign_address(2);
    watch.insert(&second);
    idle_poll(&mut wallet).await;
    node.send(&second, "0.25").await.unwrap();
    let mut both = vec![(first.clone(), 150_000_000), (second.clone(), 25_000_000)];
    both.sort();
    assert_eq!(idle_poll(&mut wallet).await, both);

    // A second source (another instance, or a restart) finds the descriptor
    // wallet made before and uses it as it is.
    let mut again = caught_up(
        source(&node, core.url(), Some("paywatch-mempool"), watch.clone()),
        &node,
    )
    .await;
    assert_eq!(idle_poll(&mut again).await, both);
}

/// A P2WPKH address of a made-up key: nobody's wallet on the node.
fn foreign_address(n: u8) -> String {
    let script = bitcoin::ScriptBuf::new_p2wpkh(&bitcoin::WPubkeyHash::from_byte_array([n; 20]));
    paywatch_utxo::address_for_script(
        &Params::new(Network::Litecoin, Chain::Regtest).unwrap(),
        &script,
    )
    .unwrap()
}

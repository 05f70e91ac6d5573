//! Catch-up over a Litecoin regtest node, for benches/ltc-catchup.sh, which
//! runs it beside the raw-RPC floor and bitcoin-etl on the same chain.
//!
//!   ltc_catchup collect --rpc URL --start A --end B --out FILE
//!       (untimed) every address paid by a non-coinbase output in A..=B
//!   ltc_catchup source --rpc URL --start A --end B --watch FILE
//!       the node source and canonical stream alone: fetch, parse, verify, filter
//!   ltc_catchup daemon --rpc URL --start A --end B --watch FILE --db URL
//!       the watcher as `paywatch run` runs it, writing to the database
//!
//! Prints one JSON line: transfers found, blocks, seconds of catch-up.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use paywatch::clock::SystemClock;
use paywatch::ingest::Ingest;
use paywatch::store::Store;
use paywatch::watcher::{self, WatcherConfig, WatcherDeps};
use paywatch_core::{BlockSource, CanonicalStream, Network, WatchSet};
use paywatch_utxo::{
    address_for_script, from_hex, watch_key, Chain, NodeConfig, NodeRpc, NodeSource, Params,
    RawBlock, RpcAuth,
};
use serde_json::json;

struct Args {
    mode: String,
    rpc: String,
    start: u64,
    end: u64,
    file: String,
    db: String,
}

fn args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let mode = it.next().context("mode: collect, source or daemon")?;
    let mut a = Args {
        mode,
        rpc: String::new(),
        start: 0,
        end: 0,
        file: String::new(),
        db: String::new(),
    };
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rpc" => a.rpc = value,
            "--start" => a.start = value.parse()?,
            "--end" => a.end = value.parse()?,
            "--out" | "--watch" => a.file = value,
            "--db" => a.db = value,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// http://user:password@host:port → the URL and the credentials.
fn rpc(url: &str) -> anyhow::Result<NodeRpc> {
    let (scheme, rest) = url.split_once("://").context("URL needs a scheme")?;
    let (creds, host) = rest.rsplit_once('@').context("URL needs user:password@")?;
    let (user, password) = creds.split_once(':').context("user:password")?;
    Ok(NodeRpc::new(
        &format!("{scheme}://{host}"),
        RpcAuth::UserPassword {
            user: user.into(),
            password: password.into(),
        },
    ))
}

fn params() -> Params {
    Params::new(Network::Litecoin, Chain::Regtest).expect("litecoin regtest")
}

fn source(a: &Args, watch: Arc<WatchSet>) -> anyhow::Result<NodeSource> {
    let cfg = NodeConfig {
        params: params(),
        confirmations: 6,
        blocks_per_request: 100,
        mempool: false,
        mempool_wallet: None,
    };
    Ok(NodeSource::new(rpc(&a.rpc)?, cfg, watch))
}

fn watch_set(file: &str) -> anyhow::Result<Arc<WatchSet>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
    let set = WatchSet::new(Network::Litecoin).keyed(watch_key(Network::Litecoin));
    set.extend(text.lines().filter(|l| !l.is_empty()));
    Ok(Arc::new(set))
}

async fn collect(a: &Args) -> anyhow::Result<()> {
    let rpc = rpc(&a.rpc)?;
    let mut addresses = BTreeSet::new();
    let mut outputs = 0u64;
    for h in a.start..=a.end {
        let hash: String = rpc.call("getblockhash", json!([h])).await?;
        let hex: String = rpc.call("getblock", json!([hash, 0])).await?;
        let bytes = from_hex(&hex)?;
        let block = RawBlock::parse(&bytes)?;
        for tx in 1..block.tx_count() {
            for out in block.outputs(tx) {
                if let Some(address) = address_for_script(&params(), out.script) {
                    outputs += 1;
                    addresses.insert(address);
                }
            }
        }
    }
    let text: String = addresses.iter().map(|a| format!("{a}\n")).collect();
    std::fs::write(&a.file, text)?;
    println!(
        "{}",
        json!({"addresses": addresses.len(), "outputs": outputs})
    );
    Ok(())
}

async fn run_source(a: &Args) -> anyhow::Result<()> {
    let watch = watch_set(&a.file)?;
    let source = source(a, watch)?;
    let t0 = Instant::now();
    let mut stream = CanonicalStream::new(source, Vec::new(), a.start, 100);
    let mut transfers = 0usize;
    let mut blocks = 0usize;
    while stream.cursor_tip().is_none_or(|c| c.height < a.end) {
        for e in stream.next_batch(100).await? {
            if let paywatch_core::ChainEvent::Connected { transfers: t, .. } = e {
                transfers += t.len();
                blocks += 1;
            }
        }
    }
    let secs = t0.elapsed();
    println!(
        "{}",
        json!({"transfers": transfers, "blocks": blocks, "catchup_s": secs.as_secs_f64()})
    );
    Ok(())
}

async fn run_daemon(a: &Args) -> anyhow::Result<()> {
    let watch = watch_set(&a.file)?;
    let store = Store::connect(&a.db).await?;
    store.migrate().await?;
    let clock = Arc::new(SystemClock);
    let source = source(a, watch.clone())?;
    // The node's tip may be above the range: stop at its end.
    let tip = source.tip().await?.height;
    if tip < a.end {
        bail!("the node is at {tip}, below {}", a.end);
    }
    let cfg = WatcherConfig {
        network: Network::Litecoin,
        start_height: Some(a.start),
        max_reorg_depth: 100,
        poll_interval: Duration::from_millis(20),
        events_per_transaction: 100,
        blocks_per_poll: 100,
        dormancy: None,
        backstop_after_end: Duration::from_secs(86_400),
    };
    let deps = WatcherDeps {
        store: store.clone(),
        ingest: Ingest::new(store.clone(), clock.clone()),
        watch,
        clock,
        progress: Arc::new(tokio::sync::Notify::new()),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let t0 = Instant::now();
    let task = tokio::spawn(watcher::run(cfg, source, deps, stop_rx));
    loop {
        let at = store
            .chain_status(Network::Litecoin)
            .await?
            .and_then(|s| s.cursor_height);
        if at >= Some(a.end) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed();
    let _ = stop_tx.send(true);
    task.await??;
    let transfers = store
        .count_raw(&format!(
            "SELECT COUNT(*) FROM transfers WHERE block_height <= {}",
            a.end
        ))
        .await?;
    println!(
        "{}",
        json!({"transfers": transfers, "blocks_to": a.end, "catchup_s": secs.as_secs_f64(), "database": store.dialect().as_str()})
    );
    store.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    match a.mode.as_str() {
        "collect" => collect(&a).await,
        "source" => run_source(&a).await,
        "daemon" => run_daemon(&a).await,
        other => bail!("unknown mode {other}"),
    }
}

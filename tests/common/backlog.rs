//! A backlog of top-ups paid on a real anvil before the daemon under test
//! catches up on it, and the checks every fault story ends with: each
//! payment recorded once, each block connected once, each top-up credited
//! once, and the money rules.

use std::time::{Duration, Instant};

use paywatch::intents::IntentService;
use paywatch::intents::NewIntent;
use paywatch::reconcile::Status;
use paywatch::store::{IntentRecord, Store};
use paywatch_core::Network;
use paywatch_testkit::AnvilNode;

use super::eth::{
    Contracts, ETH_FOR_100_USD, ETH_PAYER, FINALITY_DEPTH, STABLE_FOR_100_USD, TOKEN_HOLDER,
};

/// `n` top-ups of 100 USD, paid in ETH, USDT and USDC in turn, with
/// `blocks_between` empty blocks after each; finally everything is mined
/// final. Returns the intents and the last height.
pub async fn pay_backlog(
    node: &AnvilNode,
    contracts: &Contracts,
    intents: &IntentService,
    n: usize,
    blocks_between: u64,
) -> (Vec<IntentRecord>, u64) {
    let mut made = Vec::new();
    for i in 0..n {
        let asset = ["ETH", "USDT", "USDC"][i % 3];
        let intent = intents
            .create(&NewIntent {
                kind: "topup".into(),
                reference: format!("backlog-{i}"),
                account: "acct-1".into(),
                asset: asset.into(),
                network: Network::Ethereum.as_str().into(),
                usd_amount: "100".into(),
            })
            .await
            .expect("intent created");
        let token = match asset {
            "USDT" => Some(&contracts.usdt),
            "USDC" => Some(&contracts.usdc),
            _ => None,
        };
        match token {
            Some(t) => {
                node.token_transfer(t, TOKEN_HOLDER, &intent.address, STABLE_FOR_100_USD)
                    .await
            }
            None => {
                node.send_eth(ETH_PAYER, &intent.address, ETH_FOR_100_USD)
                    .await
            }
        }
        .expect("paid");
        node.mine(blocks_between).await.unwrap();
        made.push(intent);
    }
    node.mine(FINALITY_DEPTH).await.unwrap();
    (made, node.block_number().await.unwrap())
}

/// The network's cursor height, 0 before the first block.
pub async fn cursor(store: &Store, network: Network) -> u64 {
    store
        .chain_status(network)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.cursor_height)
        .unwrap_or(0)
}

/// Waits until the cursor reaches `height`; `why` and `logs` name the
/// failure.
pub async fn wait_cursor(
    store: &Store,
    network: Network,
    height: u64,
    why: &str,
    logs: impl Fn() -> String,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let at = cursor(store, network).await;
        if at >= height {
            return at;
        }
        if Instant::now() > deadline {
            panic!("cursor at {at}, never reached {height} ({why})\n{}", logs());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for every intent to be paid and the cursor to reach `end`, then
/// checks that nothing was lost or doubled between `start` and `end`.
pub async fn assert_recorded_once_and_credited_once(
    store: &Store,
    network: Network,
    intents: &[IntentRecord],
    (start, end): (u64, u64),
    logs: impl Fn() -> String,
) {
    for i in intents {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let r = store.intent(i.id).await.unwrap().unwrap();
            if r.status == Status::Paid {
                break;
            }
            if Instant::now() > deadline {
                panic!("intent {} never paid: {r:?}\n{}", i.id, logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    wait_cursor(store, network, end, "the end of the chain", &logs).await;
    let n = i64::try_from(intents.len()).unwrap();
    let count = |sql: &'static str| async move { store.count_raw(sql).await.unwrap() };
    assert_eq!(
        count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NULL").await,
        n,
        "every payment recorded exactly once"
    );
    assert_eq!(count("SELECT COUNT(*) FROM transfers").await, n);
    assert_eq!(count("SELECT COUNT(DISTINCT txid) FROM transfers").await, n);
    let connected = i64::try_from(end - start + 1).unwrap();
    assert_eq!(
        count("SELECT COUNT(*) FROM blocks WHERE orphaned_at IS NULL").await,
        connected,
        "every block from the start height connected once"
    );
    assert_eq!(
        count("SELECT COUNT(DISTINCT height) FROM blocks").await,
        connected,
        "and no height twice"
    );
    assert_eq!(count("SELECT COUNT(*) FROM settlements").await, n);
    assert_eq!(
        store.balance_cents("acct-1").await.unwrap(),
        n * 10_000,
        "each top-up credited once"
    );
    assert_money_rules(store).await;
}

/// The money-rule checker: no double, missing or orphan credit, and the
/// ledger's top-ups equal the settled ones.
pub async fn assert_money_rules(store: &Store) {
    let check = store.check_invariants().await.unwrap();
    assert!(
        check.violations.is_empty(),
        "money rules broken: {:#?}",
        check.violations
    );
    assert_eq!(check.ledger_topup_cents, check.settled_topup_cents);
}

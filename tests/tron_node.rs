//! The Tron watcher end to end, through the daemon's own intents, against
//! the testkit Tron node over real gRPC.

mod common;

use common::tron::{
    tron_settings, tron_world, TronOptions, TRX_FOR_100_USD, USDT_CONTRACT, USDT_FOR_100_USD,
};
use common::{Backend, TestDb};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Amount, BlockSource, Network};
use paywatch_testkit::tron::{Fault, InternalTxSaving};
use paywatch_testkit::{TronNode, TronNodeOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_trx_and_usdt_payments_confirm_then_pay_once_solidified() {
    let w = tron_world(TronOptions::default()).await;
    let trx = w.daemon.order("gpu-trx", "100").await;
    let usdt = w.daemon.create_in("USDT", "topup", "top-usdt", "100").await;
    assert_eq!(trx.amount_due, Amount(u128::from(TRX_FOR_100_USD)));
    assert_eq!(usdt.amount_due, Amount(USDT_FOR_100_USD));
    for i in [&trx, &usdt] {
        paywatch_tron::parse_address(&i.address)
            .unwrap_or_else(|e| panic!("a valid Tron address {}: {e}", i.address));
    }
    assert_ne!(trx.address, usdt.address);

    let trx_tx = w.pay_trx(&trx.address, TRX_FOR_100_USD);
    w.pay_usdt(&usdt.address, USDT_FOR_100_USD);
    let tip = w.node.mine(3).unwrap();
    // Confirming shows once the payment's block is read; its count of
    // confirmations only once the two blocks after it are.
    w.daemon.wait_cursor(tip).await;
    for i in [&trx, &usdt] {
        let seen = w
            .daemon
            .wait_for(i.id, "confirming before solidification", |r| {
                r.status == Status::Confirming && r.amount_pending == r.amount_due
            })
            .await;
        assert_eq!(seen.amount_final, Amount(0));
    }
    assert_eq!(
        w.daemon
            .count(
                "SELECT COUNT(*) FROM paywatch_intent_transfers \
                 WHERE confirmations = 3 AND is_final = 0"
            )
            .await,
        2,
        "the storefront sees 3 confirmations, not final\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);

    w.solidify();
    for i in [&trx, &usdt] {
        let paid = w
            .daemon
            .wait_for(i.id, "paid once solidified", |r| r.status == Status::Paid)
            .await;
        assert_eq!(paid.exception, None, "{:?}", paid.reason);
        assert_eq!(paid.amount_final, i.amount_due);
    }
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{}' AND asset = 'TRX' \
                 AND from_address = '{}'",
                trx_tx.to_hex(),
                w.payer().address()
            ))
            .await,
        1,
        "recorded once, by its txid and sender\n{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_over_late_and_duplicate_payments_are_flagged() {
    let w = tron_world(TronOptions {
        expiry_secs: 8,
        ..TronOptions::default()
    })
    .await;
    let short = w.daemon.create_in("USDT", "order", "short", "100").await;
    let topup = w.daemon.create("topup", "topup-1", "100").await;
    let late = w.daemon.create_in("USDT", "order", "late", "100").await;

    w.pay_usdt(&short.address, USDT_FOR_100_USD / 2);
    w.pay_trx(&topup.address, TRX_FOR_100_USD * 3 / 2);
    w.solidify();
    let over = w
        .daemon
        .wait_for(topup.id, "paid for its price, its excess to review", |i| {
            i.exception == Some(Exception::Overpaid) && i.paid_at_ms.is_some()
        })
        .await;
    assert_eq!(over.status, Status::NeedsReview);
    assert_eq!(over.amount_excess, Amount(u128::from(TRX_FOR_100_USD / 2)));

    w.pay_trx(&topup.address, TRX_FOR_100_USD);
    w.solidify();
    let dup = w
        .daemon
        .wait_for(topup.id, "needs review for a second payment", |i| {
            i.exception == Some(Exception::Duplicate)
        })
        .await;
    assert_eq!(
        dup.exception,
        Some(Exception::Duplicate),
        "{:?}",
        dup.reason
    );
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000,
        "credited once"
    );

    let under = w
        .daemon
        .wait_for(short.id, "underpaid at expiry", |i| {
            i.status == Status::NeedsReview
        })
        .await;
    assert_eq!(
        under.exception,
        Some(Exception::Underpaid),
        "{:?}",
        under.reason
    );

    w.daemon
        .wait_for(late.id, "expired", |i| i.status == Status::Expired)
        .await;
    // The test node stamps blocks with the wall clock's 3-second slots:
    // pay clearly after the expiry slot.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    w.pay_usdt(&late.address, USDT_FOR_100_USD);
    w.solidify();
    let paid_late = w
        .daemon
        .wait_for(late.id, "paid late", |i| i.status == Status::NeedsReview)
        .await;
    assert_eq!(
        paid_late.exception,
        Some(Exception::PaidLate),
        "{:?}",
        paid_late.reason
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trx_at_a_usdt_address_is_wrong_asset_and_another_token_is_spam() {
    let w = tron_world(TronOptions::default()).await;
    let usdt = w
        .daemon
        .create_in("USDT", "order", "wants-usdt", "100")
        .await;
    let trx = w.daemon.create_in("TRX", "order", "wants-trx", "100").await;
    w.pay_trx(&usdt.address, TRX_FOR_100_USD);
    // TRC-20 dust from a token no method accepts: address poisoning.
    w.pay_other(&trx.address, 5_000_000);
    w.solidify();
    let r = w
        .daemon
        .wait_for(usdt.id, "wrong asset", |r| r.status == Status::NeedsReview)
        .await;
    assert_eq!(r.exception, Some(Exception::WrongAsset), "{:?}", r.reason);
    assert_eq!(
        r.amount_final,
        Amount(0),
        "nothing of its own method arrived"
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE asset = 'token:{}' AND amount = 5000000",
                w.other.address()
            ))
            .await,
        1,
        "the other token is recorded by its contract\n{}",
        w.daemon.transfers_table().await
    );
    let r = w.daemon.intent(trx.id).await;
    assert_eq!(
        r.status,
        Status::AwaitingPayment,
        "spam moves nothing: {:?}",
        r.reason
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

/// Real USDC (Circle's mainnet contract) sent to a USDT address is money a
/// person can return with the key: a wrong asset, never spam; a token that
/// only calls itself USDC is spam and moves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_usdc_at_a_usdt_address_is_wrong_asset_and_a_look_alike_is_spam() {
    let w = tron_world(TronOptions::default()).await;
    let usdt = w.daemon.create_in("USDT", "order", "got-usdc", "100").await;
    let poisoned = w.daemon.create_in("USDT", "order", "poisoned", "100").await;
    w.pay_usdc(&usdt.address, USDT_FOR_100_USD);
    w.pay_other(&poisoned.address, USDT_FOR_100_USD);
    w.solidify();
    let r = w
        .daemon
        .wait_for(usdt.id, "wrong asset", |r| r.status == Status::NeedsReview)
        .await;
    assert_eq!(r.exception, Some(Exception::WrongAsset), "{:?}", r.reason);
    assert_eq!(r.amount_final, Amount(0), "no USDT arrived");
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE asset = 'USDC' AND network = 'tron' \
                 AND to_address = '{}' AND amount = {USDT_FOR_100_USD}",
                usdt.address
            ))
            .await,
        1,
        "recorded as USDC\n{}",
        w.daemon.transfers_table().await
    );
    let p = w.daemon.intent(poisoned.id).await;
    assert_eq!(
        p.status,
        Status::AwaitingPayment,
        "spam moves nothing: {:?}",
        p.reason
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_trc20_call_does_not_count_and_a_contract_made_one_does() {
    let w = tron_world(TronOptions::default()).await;
    let failed = w.daemon.create_in("USDT", "order", "reverted", "100").await;
    let by_contract = w.daemon.create_in("USDT", "order", "payout", "100").await;
    w.node
        .trc20_transfer_failing(&w.usdt, &w.payer(), &failed.address, USDT_FOR_100_USD)
        .unwrap();
    // The calldata names neither the token nor the customer: only the log does.
    w.node
        .contract_trc20_transfer(
            &w.payer_account,
            &w.payer,
            &w.usdt,
            &by_contract.address,
            USDT_FOR_100_USD,
        )
        .unwrap();
    w.solidify();
    w.daemon
        .wait_for(by_contract.id, "paid by a contract", |r| {
            r.status == Status::Paid
        })
        .await;
    let f = w.daemon.intent(failed.id).await;
    assert_eq!(f.status, Status::AwaitingPayment, "{:?}", f.reason);
    assert_eq!(f.amount_final, Amount(0));
    assert_eq!(f.amount_pending, Amount(0));
}

/// A payout contract pays the customer's TRX: neither the call nor a log
/// names the intent's address, only the info's internal transaction, which
/// a node keeps with `vm.saveInternalTx = true`. Paid on `backend`; a
/// payout in a block made while the node kept none is not seen.
async fn trx_sent_by_a_contract_pays_the_intent_on(backend: Backend) {
    let w = tron_world(TronOptions {
        backend,
        node: TronNodeOptions {
            internal_tx: InternalTxSaving::Off,
            ..TronNodeOptions::default()
        },
        ..TronOptions::default()
    })
    .await;
    let unseen = w.daemon.order("unseen-trx", "100").await;
    let paid = w.daemon.order("payout-trx", "100").await;
    assert_eq!(paid.amount_due, Amount(u128::from(TRX_FOR_100_USD)));
    w.node
        .contract_trx_payout(&w.payer_account, &w.payer, &unseen.address, TRX_FOR_100_USD)
        .unwrap();
    w.node.mine(1).unwrap();
    w.node.set_internal_tx_saving(InternalTxSaving::On);
    let tx = w
        .node
        .contract_trx_payout(&w.payer_account, &w.payer, &paid.address, TRX_FOR_100_USD)
        .unwrap();
    w.solidify();
    let done = w
        .daemon
        .wait_for(paid.id, "paid by a contract's TRX", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(done.exception, None, "{:?}", done.reason);
    assert_eq!(done.amount_final, paid.amount_due);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{}' AND asset = 'TRX' \
                 AND idx = {} AND from_address = '{}' AND tx_status = 'success'",
                tx.to_hex(),
                paywatch_tron::INTERNAL_INDEX,
                w.payer.address()
            ))
            .await,
        1,
        "recorded once, keyed by its internal index, from the contract\n{}",
        w.daemon.transfers_table().await
    );
    // Without the node setting there is nothing to read: the limit the
    // README states.
    let u = w.daemon.intent(unseen.id).await;
    assert_eq!(u.amount_final, Amount(0), "{:?}", u.reason);
    assert_eq!(u.amount_pending, Amount(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trx_sent_by_a_contract_pays_the_intent() {
    trx_sent_by_a_contract_pays_the_intent_on(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trx_sent_by_a_contract_pays_the_intent_on_postgres() {
    trx_sent_by_a_contract_pays_the_intent_on(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usdt_sent_on_tron_to_an_ethereum_intents_address_is_wrong_network() {
    let mut w = tron_world(TronOptions {
        with_ethereum: true,
        ..TronOptions::default()
    })
    .await;
    w.daemon.network = Network::Ethereum;
    let eth_intent = w.daemon.create_in("USDT", "order", "eth-usdt", "100").await;
    w.daemon.network = Network::Tron;
    assert!(eth_intent.address.starts_with("0x"));
    let (_, twin) = paywatch::twin::twin(Network::Ethereum, &eth_intent.address).unwrap();

    // The customer's wallet shows the same key on Tron; they pay there.
    w.pay_usdt(&twin, USDT_FOR_100_USD);
    w.solidify();
    let r = w
        .daemon
        .wait_for(eth_intent.id, "wrong network", |r| {
            r.status == Status::NeedsReview
        })
        .await;
    assert_eq!(r.exception, Some(Exception::WrongNetwork), "{:?}", r.reason);
    let reason = r.reason.unwrap_or_default();
    assert!(reason.contains("tron"), "{reason}");
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE network = 'tron' AND to_address = '{twin}' \
                 AND asset = 'USDT'"
            ))
            .await,
        1,
        "recorded on Tron at the twin\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM paywatch_intent_transfers WHERE intent_id = {} \
                 AND network = 'tron' AND to_address = '{twin}' AND counts_toward_intent = 0",
                eth_intent.id
            ))
            .await,
        1,
        "the storefront sees it among the intent's transfers, not counting"
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_before_solidification_moves_then_drops_the_payment_and_nothing_is_credited_twice()
{
    let w = tron_world(TronOptions::default()).await;
    let i = w.daemon.create_in("USDT", "order", "reorged", "100").await;
    let tx = w.pay_usdt(&i.address, USDT_FOR_100_USD);
    let tip = w.node.mine(2).unwrap();
    let first_height = w.node.tx_height(&tx).unwrap();
    w.daemon
        .wait_for(i.id, "confirming", |r| r.status == Status::Confirming)
        .await;
    w.daemon.wait_cursor(tip).await;

    // Another branch takes the last 2 blocks: the payment lands 2 higher.
    let tip = w.node.reorg(2, &[vec![], vec![], vec![tx]]).unwrap();
    assert_eq!(w.node.tx_height(&tx), Some(first_height + 2));
    w.daemon.wait_cursor(tip).await;
    let moved = w
        .daemon
        .wait_for(i.id, "still confirming at its new height", |r| {
            r.status == Status::Confirming && r.amount_pending == r.amount_due
        })
        .await;
    assert_eq!(moved.amount_final, Amount(0));
    assert_eq!(
        w.daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NOT NULL")
            .await,
        1,
        "the first sighting is orphaned\n{}",
        w.daemon.transfers_table().await
    );

    // A third branch drops it for good: the intent waits again.
    let tip = w.node.reorg(3, &[vec![], vec![], vec![], vec![]]).unwrap();
    w.daemon.wait_cursor(tip).await;
    let back = w
        .daemon
        .wait_for(i.id, "awaiting again", |r| {
            r.status == Status::AwaitingPayment
        })
        .await;
    assert_eq!(back.amount_pending, Amount(0));

    // The customer's wallet sends again; it pays once, when solidified.
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.solidify();
    w.daemon
        .wait_for(i.id, "paid after the reorgs", |r| r.status == Status::Paid)
        .await;
    assert_eq!(
        w.daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NULL")
            .await,
        1,
        "one live transfer\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_catching_up_loses_nothing_and_credits_once() {
    let mut w = tron_world(TronOptions::default()).await;
    let mut intents = Vec::new();
    for n in 0..10 {
        let asset = ["TRX", "USDT"][n % 2];
        intents.push(
            w.daemon
                .create_in(asset, "topup", &format!("catchup-{n}"), "100")
                .await,
        );
    }
    let start = w.node.tip();
    w.daemon.wait_cursor(start).await;
    w.daemon.stop().await;
    for (n, intent) in intents.iter().enumerate() {
        if n % 2 == 0 {
            w.pay_trx(&intent.address, TRX_FOR_100_USD);
        } else {
            w.pay_usdt(&intent.address, USDT_FOR_100_USD);
        }
        w.node.fill_blocks(100, 20).unwrap();
    }
    let end = w.node.mine(25).unwrap();

    w.daemon.start_again().await;
    w.daemon.wait_cursor(start + 400).await;
    w.daemon.crash();
    w.daemon.start_again().await;
    for i in &intents {
        w.daemon
            .wait_for(i.id, "paid after catching up", |r| r.status == Status::Paid)
            .await;
    }
    w.daemon.wait_cursor(end).await;
    let ours: Vec<String> = intents.iter().map(|i| format!("'{}'", i.address)).collect();
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NULL AND to_address IN ({})",
                ours.join(",")
            ))
            .await,
        10,
        "every payment recorded exactly once"
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 10);
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10 * 10_000
    );
    w.daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_or_inconsistent_node_degrades_the_watcher_and_nothing_is_recorded() {
    let w = tron_world(TronOptions::default()).await;
    let i = w.daemon.create_in("USDT", "order", "faults", "100").await;

    w.node.set_fault(Fault::Unavailable);
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.node.mine(1).unwrap();
    let s = w.daemon.wait_chain_state("degraded").await;
    assert!(
        s.last_error
            .as_deref()
            .is_some_and(|e| e.contains("Unavailable") || e.contains("unavailable")),
        "{s:?}"
    );

    // Answers that do not connect: infos of another block, parents unknown.
    w.node.set_fault(Fault::Disconnected);
    w.node.mine(1).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        w.daemon.count("SELECT COUNT(*) FROM transfers").await,
        0,
        "nothing from an inconsistent answer is recorded\n{}",
        w.daemon.transfers_table().await
    );

    w.node.set_fault(Fault::None);
    w.daemon.wait_chain_state("running").await;
    w.solidify();
    w.daemon
        .wait_for(i.id, "paid once the node is well", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(
        w.daemon.count("SELECT COUNT(*) FROM transfers").await,
        1,
        "{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_payment_on_postgres_with_a_node_restart() {
    let mut w = tron_world(TronOptions {
        backend: Backend::Postgres,
        node: TronNodeOptions {
            genesis_number: 70_000_000,
            ..TronNodeOptions::default()
        },
        ..TronOptions::default()
    })
    .await;
    let i = w.daemon.create_in("USDT", "topup", "pg-usdt", "100").await;
    w.node.stop().await.unwrap();
    w.daemon.wait_chain_state("degraded").await;
    w.node.start_again().await.unwrap();
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.solidify();
    w.daemon
        .wait_for(i.id, "paid on PostgreSQL", |r| r.status == Status::Paid)
        .await;
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
    assert_eq!(
        w.usdt.address(),
        USDT_CONTRACT,
        "paid through the default mainnet contract"
    );
}

/// java-tron serves WalletSolidity (the solidified height paywatch settles
/// on) only on its solidity port. Without `rpc.solidity_url` paywatch would
/// ask the FullNode port, which answers UNIMPLEMENTED for ever, and every
/// payment would stay confirming: the setting is required, and a solidity
/// URL that points at a FullNode anyway halts the watcher saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tron_node_without_its_solidity_port_is_refused_by_name() {
    let node = TronNode::start(TronNodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("tron node: {e}"));
    node.mine(25).expect("mines");
    let db = TestDb::new(Backend::Sqlite).await;
    let mut settings = tron_settings(&db.url, &node, &TronOptions::default());
    let ns = settings.networks.get_mut("tron").unwrap();
    ns.rpc.solidity_url = None;
    let watch = std::sync::Arc::new(paywatch::chains::watch_set(Network::Tron, Some(ns)));
    let e = paywatch::chains::source(Network::Tron, ns, watch.clone())
        .err()
        .expect("refused at start");
    let text = e.to_string();
    assert!(
        text.contains("rpc.solidity_url") && text.contains("50061"),
        "{text}"
    );

    // Pointed at the FullNode's port anyway: the watcher halts, naming it.
    ns.rpc.solidity_url = Some(node.url());
    let source = paywatch::chains::source(Network::Tron, ns, watch)
        .expect("a source")
        .expect("a node source");
    let e = source.final_height().await.unwrap_err();
    assert!(!e.is_transient(), "retrying cannot fix it: {e}");
    assert!(e.to_string().contains("rpc.solidity_url"), "{e}");
}

/// A Lite FullNode closes the history queries paywatch reads unless
/// `openHistoryQueryWhenLiteFN` is set: retrying never helps, so the watcher
/// halts naming the node setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lite_fullnode_halts_the_watcher_naming_the_node_setting() {
    let w = tron_world(TronOptions::default()).await;
    let i = w.daemon.create_in("USDT", "order", "lite", "100").await;
    w.node.set_fault(Fault::LiteFullNode);
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.node.mine(1).unwrap();
    let s = w.daemon.wait_chain_state("halted").await;
    let why = s.last_error.unwrap_or_default();
    assert!(why.contains("openHistoryQueryWhenLiteFN"), "{why}");
}

/// `storage.transHistory.switch = off` gives empty transaction infos for
/// every block: token payments would vanish. The watcher halts naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_keeping_no_transaction_history_halts_the_watcher_naming_the_switch() {
    let w = tron_world(TronOptions::default()).await;
    let i = w
        .daemon
        .create_in("USDT", "order", "no-history", "100")
        .await;
    w.node.set_fault(Fault::NoTransactionHistory);
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.node.mine(1).unwrap();
    let s = w.daemon.wait_chain_state("halted").await;
    let why = s.last_error.unwrap_or_default();
    assert!(why.contains("transHistory"), "{why}");
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM transfers").await, 0);
}

/// A hosted provider (TronGrid and the commercial ones): TLS, and an API
/// key in every request's metadata. With `rpc.metadata` and an `https://`
/// URL (here with the test CA in `rpc.ca_file`), payments are seen and paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosted_provider_over_tls_with_an_api_key_is_watched() {
    let key = ("TRON-PRO-API-KEY".to_owned(), "k-7f3a".to_owned());
    let w = tron_world(TronOptions {
        node: TronNodeOptions {
            tls: true,
            api_key: Some(key.clone()),
            ..TronNodeOptions::default()
        },
        metadata: vec![key],
        ..TronOptions::default()
    })
    .await;
    assert!(w.node.url().starts_with("https://"));
    let i = w.daemon.create_in("USDT", "order", "hosted", "100").await;
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.solidify();
    w.daemon
        .wait_for(i.id, "paid through the provider", |r| {
            r.status == Status::Paid
        })
        .await;
}

/// The same provider, asked without the key it wants: the watcher stays
/// degraded and says which setting to check, never the key itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_refusing_the_api_key_names_the_setting() {
    let node = TronNode::start(TronNodeOptions {
        api_key: Some(("TRON-PRO-API-KEY".into(), "k-right".into())),
        ..TronNodeOptions::default()
    })
    .await
    .unwrap();
    let o = TronOptions {
        metadata: vec![("TRON-PRO-API-KEY".into(), "k-wrong-secret".into())],
        ..TronOptions::default()
    };
    let db = common::TestDb::new(o.backend).await;
    let settings = tron_settings(&db.url, &node, &o);
    let mut daemon = common::daemon::Daemon::start(db, settings).await;
    daemon.network = Network::Tron;
    let s = daemon.wait_chain_state("degraded").await;
    let why = s.last_error.unwrap_or_default();
    assert!(why.contains("rpc.metadata"), "{why}");
    assert!(!why.contains("k-wrong-secret"), "{why}");
}

/// A provider allows 5 requests a second and suspends a key that goes past
/// it. With `rpc.requests_per_second = 4`, paywatch never goes past it, and
/// payments are paid as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_paced_within_the_providers_budget() {
    let w = tron_world(TronOptions {
        node: TronNodeOptions {
            requests_per_second: Some(5),
            ..TronNodeOptions::default()
        },
        requests_per_second: Some(4),
        ..TronOptions::default()
    })
    .await;
    let i = w.daemon.create_in("USDT", "order", "budget", "100").await;
    w.pay_usdt(&i.address, USDT_FOR_100_USD);
    w.node.mine(3).unwrap();
    w.solidify();
    w.daemon
        .wait_for(i.id, "paid within the budget", |r| r.status == Status::Paid)
        .await;
    assert_eq!(
        w.node.refused_for_budget(),
        0,
        "never past the provider's budget"
    );
}

/// Each poll used to read the block after the tip on speculation (empty:
/// the new block came a poll late), read the tip block twice (once as the
/// tip, once by number), and read the block at the final height by number
/// although the solidity API had just answered it: 10 rpcs and two polls
/// for each new block, 3 rpcs for each idle poll (`examples/node_budget
/// tron`). Now a new block is connected by the first poll after it and
/// downloaded once, and an idle poll asks only for the tip and the
/// solidified block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_block_is_connected_by_the_first_poll_and_downloaded_once() {
    let node = TronNode::start(TronNodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("tron node: {e}"));
    node.mine(30).expect("mines");
    // Solidified two blocks behind: the final-height check then names a
    // block the stream remembers, and must compare it.
    node.set_solidity_lag(2);
    let settings = tron_settings("sqlite::memory:", &node, &TronOptions::default());
    let ns = settings.networks.get("tron").unwrap();
    let watch = std::sync::Arc::new(paywatch::chains::watch_set(Network::Tron, Some(ns)));
    let source = paywatch::chains::source(Network::Tron, ns, watch)
        .expect("a source")
        .expect("a node source");
    let mut stream = paywatch_core::CanonicalStream::new(source, Vec::new(), node.tip(), 64);
    while poll(&mut stream).await > 0 {}
    let rpcs = |since: &std::collections::BTreeMap<&'static str, (u64, u64)>| {
        let now = node.served();
        now.iter()
            .map(|(rpc, (n, _))| (*rpc, n - since.get(rpc).map_or(0, |(k, _)| *k)))
            .filter(|(_, n)| *n > 0)
            .collect::<std::collections::BTreeMap<_, _>>()
    };

    let before = node.served();
    for n in 1..=5 {
        node.mine(1).unwrap();
        assert_eq!(
            poll(&mut stream).await,
            1,
            "new block {n}: the first poll connects it"
        );
    }
    let following = rpcs(&before);
    assert_eq!(
        following.get("Wallet/GetBlockByNum2").copied().unwrap_or(0)
            + following
                .get("Wallet/GetBlockByLimitNext2")
                .copied()
                .unwrap_or(0),
        0,
        "each new block is downloaded once, as the tip: {following:?}"
    );

    let before = node.served();
    for _ in 0..5 {
        assert_eq!(poll(&mut stream).await, 0);
    }
    let idle = rpcs(&before);
    assert_eq!(
        idle,
        std::collections::BTreeMap::from([
            ("Wallet/GetNowBlock2", 5),
            ("WalletSolidity/GetNowBlock2", 5)
        ]),
        "an idle poll asks for the tip and the solidified block alone"
    );
}

/// One watcher poll: towards the tip, then the final height.
async fn poll(
    stream: &mut paywatch_core::CanonicalStream<std::sync::Arc<dyn BlockSource>>,
) -> usize {
    let connected = stream.next_batch(100).await.unwrap().len();
    stream.confirmed_final_height().await.unwrap();
    connected
}

/// A payout contract's TRX on a node that keeps no internal transactions
/// (`vm.saveInternalTx` off, java-tron's default) is in no answer paywatch
/// reads, yet it is in the receiver's balance: the balance backstop finds
/// it at a solidified height, with its exact amount, once, and lists it for
/// an operator. The intent stays unpaid. A direct TRX payment beside it,
/// recorded, explains its own address's balance.
async fn contract_trx_is_a_balance_gap_on(backend: Backend) {
    let w = tron_world(TronOptions {
        backend,
        node: TronNodeOptions {
            internal_tx: InternalTxSaving::Off,
            ..TronNodeOptions::default()
        },
        ..TronOptions::default()
    })
    .await;
    let unseen = w.daemon.order("payout-unsaved", "100").await;
    let direct = w.daemon.order("paid-directly", "100").await;
    // Addresses are compared once the watch set has held them a while.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    w.node
        .contract_trx_payout(&w.payer_account, &w.payer, &unseen.address, TRX_FOR_100_USD)
        .unwrap();
    w.pay_trx(&direct.address, TRX_FOR_100_USD);
    w.solidify();
    w.daemon
        .wait_for(direct.id, "paid directly", |r| r.status == Status::Paid)
        .await;
    let store = &w.daemon.ctx.store;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let gaps = loop {
        let gaps = store.open_balance_gaps(100).await.unwrap();
        if !gaps.is_empty() {
            break gaps;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no balance gap was found\n{}",
            w.daemon.transfers_table().await
        );
        w.node.mine(1).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    // More solidified heights find the same difference: nothing new.
    for _ in 0..5 {
        w.node.mine(1).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(store.open_balance_gaps(100).await.unwrap(), gaps);
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let g = &gaps[0];
    assert_eq!(
        (g.network, g.address.as_str(), g.intent_id),
        (Network::Tron, unseen.address.as_str(), Some(unseen.id))
    );
    let sun = u128::from(TRX_FOR_100_USD);
    assert_eq!((g.node_balance, g.counted, g.unexplained), (sun, 0, sun));
    let u = w.daemon.intent(unseen.id).await;
    assert_eq!(
        (u.status, u.amount_final, u.amount_pending),
        (Status::AwaitingPayment, Amount(0), Amount(0)),
        "nothing settles by itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trx_a_contract_sent_without_internal_transactions_is_a_balance_gap() {
    contract_trx_is_a_balance_gap_on(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trx_a_contract_sent_without_internal_transactions_is_a_balance_gap_on_postgres() {
    contract_trx_is_a_balance_gap_on(Backend::Postgres).await;
}

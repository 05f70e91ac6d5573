//! Payments on a real anvil node, through the daemon's own intents: ETH by
//! value and by internal call, USDT and USDC by Transfer log, finality by
//! the `finalized` tag. anvil is started by the test (`bash
//! deploy/install-nodes.sh` installs it) and a missing one fails it.

mod common;

use std::time::Duration;

use common::eth::{
    deploy_contracts, eth_settings, eth_world, Daemon, EthOptions, ETH_FOR_100_USD, ETH_PAYER,
    FINALITY_DEPTH, STABLE_FOR_100_USD, TOKEN_HOLDER,
};
use common::{Backend, TestDb};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::Amount;
use paywatch_testkit::{AnvilNode, AnvilOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_eth_usdt_and_usdc_payments_confirm_then_pay_at_finality() {
    let w = eth_world(EthOptions::default()).await;
    let eth = w.daemon.order("gpu-eth", "100").await;
    let usdt = w.daemon.create_in("USDT", "order", "gpu-usdt", "100").await;
    let usdc = w.daemon.create_in("USDC", "order", "gpu-usdc", "100").await;
    assert_eq!(eth.amount_due, Amount(ETH_FOR_100_USD));
    assert_eq!(usdt.amount_due, Amount(STABLE_FOR_100_USD));
    for i in [&eth, &usdt, &usdc] {
        assert!(
            i.address.starts_with("0x")
                && i.address.len() == 42
                && i.address == i.address.to_lowercase(),
            "a derived address, stored lowercase: {}",
            i.address
        );
    }
    assert_eq!(
        [&eth.address, &usdt.address, &usdc.address]
            .into_iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        3,
        "every intent has its own address"
    );

    let eth_tx = w.pay_eth(&eth.address, ETH_FOR_100_USD).await;
    w.pay_usdt(&usdt.address, STABLE_FOR_100_USD).await;
    w.pay_usdc(&usdc.address, STABLE_FOR_100_USD).await;
    for i in [&eth, &usdt, &usdc] {
        let seen = w
            .daemon
            .wait_for(i.id, "confirming before finality", |r| {
                r.status == Status::Confirming && r.amount_pending == r.amount_due
            })
            .await;
        assert_eq!(
            seen.amount_final,
            Amount(0),
            "not final before the finalized tag"
        );
    }
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);

    w.finalize().await;
    for i in [&eth, &usdt, &usdc] {
        let paid = w
            .daemon
            .wait_for(i.id, "paid at finality", |r| r.status == Status::Paid)
            .await;
        assert_eq!(paid.exception, None, "{:?}", paid.reason);
        assert_eq!(paid.amount_final, i.amount_due);
    }
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 3);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{eth_tx}' AND asset = 'ETH' \
                 AND from_address = '{}' AND tx_status = 'success'",
                ETH_PAYER.to_lowercase()
            ))
            .await,
        1,
        "the ETH payment is recorded once, by its 0x-prefixed hash\n{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_over_late_and_duplicate_payments_are_flagged() {
    let w = eth_world(EthOptions {
        expiry_secs: 10,
        ..EthOptions::default()
    })
    .await;
    let short = w
        .daemon
        .create_in("USDT", "order", "gpu-short", "100")
        .await;
    let topup = w.daemon.create("topup", "topup-1", "100").await;
    let late = w.daemon.create_in("USDC", "order", "gpu-late", "100").await;

    w.pay_usdt(&short.address, STABLE_FOR_100_USD / 2).await;
    w.pay_eth(&topup.address, ETH_FOR_100_USD * 3 / 2).await;
    w.finalize().await;
    let over = w
        .daemon
        .wait_for(topup.id, "paid for its price, its excess to review", |i| {
            i.exception == Some(Exception::Overpaid) && i.paid_at_ms.is_some()
        })
        .await;
    assert_eq!(over.status, Status::NeedsReview);
    assert_eq!(over.amount_excess, Amount(ETH_FOR_100_USD / 2));

    w.pay_eth(&topup.address, ETH_FOR_100_USD).await;
    w.finalize().await;
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
    assert_eq!(under.amount_final, Amount(STABLE_FOR_100_USD / 2));

    w.daemon
        .wait_for(late.id, "expired", |i| i.status == Status::Expired)
        .await;
    // Block times are whole seconds: pay clearly after the expiry second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    w.pay_usdc(&late.address, STABLE_FOR_100_USD).await;
    w.finalize().await;
    let paid_late = w
        .daemon
        .wait_for(late.id, "paid late", |i| i.status == Status::NeedsReview)
        .await;
    assert_eq!(paid_late.exception, Some(Exception::PaidLate));
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usdc_to_a_usdt_address_and_eth_to_a_token_address_are_wrong_asset_and_a_fake_usdt_is_spam()
{
    let w = eth_world(EthOptions::default()).await;
    let usdt = w
        .daemon
        .create_in("USDT", "order", "usdt-gets-usdc", "100")
        .await;
    let usdc = w
        .daemon
        .create_in("USDC", "order", "usdc-gets-eth", "100")
        .await;
    let eth = w.daemon.order("eth-gets-other", "100").await;
    let paid = w
        .daemon
        .create_in("USDT", "order", "paid-then-poisoned", "100")
        .await;
    w.pay_usdc(&usdt.address, STABLE_FOR_100_USD).await;
    w.pay_eth(&usdc.address, ETH_FOR_100_USD).await;
    let other = w.contracts.other.clone();
    w.pay_token(&other, &eth.address, 5_000_000).await;
    w.pay_token(&w.contracts.usdt, &paid.address, STABLE_FOR_100_USD)
        .await;
    w.finalize().await;
    w.daemon
        .wait_for(paid.id, "paid", |r| r.status == Status::Paid)
        .await;
    // Address poisoning: a look-alike "Tether USD" contract sends dust to a
    // paid address and to an open one.
    let fake = w
        .node
        .deploy_token("Tether USD", "USDT", 1_000_000_000)
        .await
        .expect("a fake USDT deployed");
    w.pay_token(&fake, &paid.address, 1).await;
    w.pay_token(&fake, &eth.address, 100_000_000).await;
    w.finalize().await;
    for i in [&usdt, &usdc] {
        let r = w
            .daemon
            .wait_for(i.id, "wrong asset", |r| r.status == Status::NeedsReview)
            .await;
        assert_eq!(r.exception, Some(Exception::WrongAsset), "{:?}", r.reason);
    }
    // Tokens no method accepts are recorded by their contract, and move nothing.
    let spam = |to: String, token: String| {
        let daemon = &w.daemon;
        async move {
            daemon
                .count(&format!(
                    "SELECT COUNT(*) FROM transfers WHERE to_address = '{to}' AND asset = 'token:{}'",
                    token.to_lowercase()
                ))
                .await
        }
    };
    assert_eq!(
        spam(eth.address.clone(), other.clone()).await,
        1,
        "{}",
        w.daemon.transfers_table().await
    );
    // The fake's dust was mined after the rest: wait for it to be read.
    for _ in 0..600 {
        if spam(paid.address.clone(), fake.clone()).await == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(spam(eth.address.clone(), fake.clone()).await, 1);
    assert_eq!(spam(paid.address.clone(), fake.clone()).await, 1);
    let r = w.daemon.intent(eth.id).await;
    assert_eq!(r.status, Status::AwaitingPayment, "{:?}", r.reason);
    let r = w.daemon.intent(paid.id).await;
    assert_eq!(r.status, Status::Paid, "{:?}", r.reason);
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
    w.daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eth_paid_by_a_contract_is_seen_through_traces_and_a_reverted_one_is_not_counted() {
    let w = eth_world(EthOptions::default()).await;
    let whole = w.daemon.order("via-contract", "100").await;
    let halves = w.daemon.order("split-by-contract", "100").await;
    let other_half = w.daemon.order("other-half", "100").await;
    let reverted = w.daemon.order("reverted", "100").await;
    let fwd = w.contracts.forwarder.clone();
    w.node
        .forward(&fwd, ETH_PAYER, &whole.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    // One transaction paying two watched addresses by two internal calls.
    w.node
        .split(
            &fwd,
            ETH_PAYER,
            &halves.address,
            &other_half.address,
            ETH_FOR_100_USD * 2,
        )
        .await
        .unwrap();
    let failed = w
        .node
        .forward_then_revert(&fwd, ETH_PAYER, &reverted.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    assert_eq!(w.node.receipt(&failed).await.unwrap()["status"], "0x0");
    w.finalize().await;
    for i in [&whole, &halves, &other_half] {
        let paid = w
            .daemon
            .wait_for(i.id, "paid by an internal call", |r| {
                r.status == Status::Paid
            })
            .await;
        assert_eq!(paid.exception, None, "{:?}", paid.reason);
    }
    let r = w.daemon.intent(reverted.id).await;
    assert_eq!(r.status, Status::AwaitingPayment);
    assert_eq!(r.amount_final, Amount(0));
    assert_eq!(r.amount_pending, Amount(0));
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{failed}' AND tx_status = 'success'"
            ))
            .await,
        0,
        "a reverted internal call moved nothing\n{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_traces_eth_paid_by_a_contract_is_not_seen() {
    let w = eth_world(EthOptions {
        traces: false,
        ..EthOptions::default()
    })
    .await;
    let via_contract = w.daemon.order("unseen", "100").await;
    let direct = w.daemon.order("seen", "100").await;
    let fwd = w.contracts.forwarder.clone();
    w.node
        .forward(&fwd, ETH_PAYER, &via_contract.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    w.pay_eth(&direct.address, ETH_FOR_100_USD).await;
    w.finalize().await;
    w.daemon
        .wait_for(direct.id, "paid directly", |r| r.status == Status::Paid)
        .await;
    // The direct payment came later in the chain; by now the other was read too.
    let r = w.daemon.intent(via_contract.id).await;
    assert_eq!(
        (r.status, r.amount_final),
        (Status::AwaitingPayment, Amount(0)),
        "the README says so: internal ETH transfers need traces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_token_transfer_is_not_a_payment() {
    let w = eth_world(EthOptions::default()).await;
    let i = w
        .daemon
        .create_in("USDT", "order", "failed-usdt", "100")
        .await;
    let usdt = w.contracts.usdt.clone();
    // The payer holds no USDT: the transfer reverts and emits no log.
    let failed = w
        .node
        .failed_token_transfer(&usdt, ETH_PAYER, &i.address, STABLE_FOR_100_USD)
        .await
        .unwrap();
    assert_eq!(w.node.receipt(&failed).await.unwrap()["status"], "0x0");
    let ok = w.daemon.order("after-it", "100").await;
    w.pay_eth(&ok.address, ETH_FOR_100_USD).await;
    w.finalize().await;
    w.daemon
        .wait_for(ok.id, "the later payment", |r| r.status == Status::Paid)
        .await;
    let r = w.daemon.intent(i.id).await;
    assert_eq!(
        (r.status, r.amount_final),
        (Status::AwaitingPayment, Amount(0))
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{failed}'"
            ))
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_before_finality_takes_the_payment_back_until_it_is_mined_again() {
    let w = eth_world(EthOptions::default()).await;
    let intent = w.daemon.order("gpu-reorg", "100").await;
    let tx = w.pay_eth(&intent.address, ETH_FOR_100_USD).await;
    let raw = w.node.raw_transaction(&tx).await.unwrap();
    w.node.mine(3).await.unwrap();
    let first_height = w.node.receipt(&tx).await.unwrap()["blockNumber"]
        .as_str()
        .map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap())
        .unwrap();
    w.daemon
        .wait_for(intent.id, "confirming", |r| r.status == Status::Confirming)
        .await;
    let tip = w.tip().await;
    w.daemon.wait_cursor(tip).await;

    // Replace the payment's block and the three after it with empty ones.
    w.node.reorg(4, &[]).await.unwrap();
    assert!(
        w.node.try_receipt(&tx).await.unwrap().is_none(),
        "the payment is gone"
    );
    w.node.mine(1).await.unwrap();
    let back = w
        .daemon
        .wait_for(intent.id, "awaiting payment again", |r| {
            r.status == Status::AwaitingPayment && r.amount_pending == Amount(0)
        })
        .await;
    assert_eq!(back.amount_final, Amount(0));
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{tx}' AND orphaned_at IS NOT NULL"
            ))
            .await,
        1,
        "the vanished payment is kept, marked orphaned"
    );

    // The same transaction mined again, two blocks deep into a new branch.
    w.node.reorg(3, &[(raw.as_str(), 1)]).await.unwrap();
    let again = w.node.receipt(&tx).await.unwrap();
    let second_height = again["blockNumber"]
        .as_str()
        .map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap())
        .unwrap();
    assert_ne!(
        (again["blockHash"].as_str().unwrap(), second_height),
        ("", first_height)
    );
    w.daemon
        .wait_for(intent.id, "confirming again", |r| {
            r.status == Status::Confirming
        })
        .await;
    w.finalize().await;
    let paid = w
        .daemon
        .wait_for(intent.id, "paid after the reorg", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(paid.amount_final, Amount(ETH_FOR_100_USD));
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{tx}' AND orphaned_at IS NULL"
            ))
            .await,
        1,
        "{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_catching_up_2000_blocks_loses_nothing_and_credits_once() {
    // Tracing an old block needs its state: anvil keeps only 256 by default,
    // as a pruned node would; an archive node keeps them all.
    let mut w = eth_world(EthOptions {
        anvil: AnvilOptions {
            history_states: Some(5_000),
            ..AnvilOptions::default()
        },
        ..EthOptions::default()
    })
    .await;
    let mut intents = Vec::new();
    for i in 0..20 {
        let asset = ["ETH", "USDT", "USDC"][i % 3];
        intents.push(
            w.daemon
                .create_in(asset, "topup", &format!("catchup-{i}"), "100")
                .await,
        );
    }
    let start = w.tip().await;
    w.daemon.wait_cursor(start).await;
    w.daemon.stop().await;
    for (i, intent) in intents.iter().enumerate() {
        match i % 3 {
            0 => w.pay_eth(&intent.address, ETH_FOR_100_USD).await,
            1 => w.pay_usdt(&intent.address, STABLE_FOR_100_USD).await,
            _ => w.pay_usdc(&intent.address, STABLE_FOR_100_USD).await,
        };
        w.node.mine(99).await.unwrap();
    }
    let end = w.tip().await;
    assert!(end >= start + 2000, "{start}..{end}");

    w.daemon.start_again().await;
    w.daemon.wait_cursor(start + 1000).await;
    w.daemon.crash();
    w.daemon.start_again().await;
    for i in &intents {
        w.daemon
            .wait_for(i.id, "paid after catching up", |r| r.status == Status::Paid)
            .await;
    }
    w.daemon.wait_cursor(end).await;
    assert_eq!(
        w.daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NULL")
            .await,
        20,
        "every payment recorded exactly once\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 20);
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        20 * 10_000
    );
    w.daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anvil_restart_with_its_state_degrades_the_watcher_which_then_carries_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = eth_world(EthOptions {
        anvil: AnvilOptions {
            state_file: Some(dir.path().join("anvil-state.json")),
            ..AnvilOptions::default()
        },
        ..EthOptions::default()
    })
    .await;
    let before = w.daemon.order("before-restart", "100").await;
    let after = w
        .daemon
        .create_in("USDT", "order", "after-restart", "100")
        .await;
    w.pay_eth(&before.address, ETH_FOR_100_USD).await;
    w.daemon
        .wait_for(before.id, "confirming", |r| r.status == Status::Confirming)
        .await;
    let height = w.tip().await;

    w.node.stop().await.unwrap();
    let degraded = w.daemon.wait_chain_state("degraded").await;
    assert!(
        degraded
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("127.0.0.1")),
        "the error names the node: {degraded:?}"
    );
    w.node.start_again().await.unwrap();
    assert_eq!(w.tip().await, height, "anvil kept its chain");
    w.pay_usdt(&after.address, STABLE_FOR_100_USD).await;
    w.finalize().await;
    for i in [&before, &after] {
        w.daemon
            .wait_for(i.id, "paid after the node came back", |r| {
                r.status == Status::Paid
            })
            .await;
    }
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_confirmations_instead_of_the_finalized_tag() {
    let w = eth_world(EthOptions {
        confirmations: Some(5),
        ..EthOptions::default()
    })
    .await;
    let i = w
        .daemon
        .create_in("USDC", "order", "five-deep", "100")
        .await;
    w.pay_usdc(&i.address, STABLE_FOR_100_USD).await;
    w.node.mine(3).await.unwrap();
    let four = w
        .daemon
        .wait_for(i.id, "confirming at 4 confirmations", |r| {
            r.status == Status::Confirming
        })
        .await;
    assert_eq!(four.amount_final, Amount(0));
    w.node.mine(1).await.unwrap();
    w.daemon
        .wait_for(i.id, "paid at 5 confirmations", |r| {
            r.status == Status::Paid
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newheads_subscription_wakes_the_watcher_long_before_its_next_poll() {
    let w = eth_world(EthOptions {
        ws: true,
        poll_interval_ms: 600_000,
        ..EthOptions::default()
    })
    .await;
    let i = w.daemon.create_in("USDT", "order", "woken", "100").await;
    w.pay_usdt(&i.address, STABLE_FOR_100_USD).await;
    // wait_for gives up after a minute, long before the 10-minute poll.
    w.daemon
        .wait_for(i.id, "confirming through the newHeads trigger", |r| {
            r.status == Status::Confirming
        })
        .await;
    w.finalize().await;
    w.daemon
        .wait_for(i.id, "paid, again woken by heads", |r| {
            r.status == Status::Paid
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usdt_sent_on_ethereum_to_a_tron_intents_address_is_wrong_network() {
    let mut w = eth_world(EthOptions {
        with_tron: true,
        ..EthOptions::default()
    })
    .await;
    w.daemon.network = paywatch_core::Network::Tron;
    let tron_intent = w
        .daemon
        .create_in("USDT", "order", "tron-usdt", "100")
        .await;
    w.daemon.network = paywatch_core::Network::Ethereum;
    let (_, twin) =
        paywatch::twin::twin(paywatch_core::Network::Tron, &tron_intent.address).unwrap();
    assert!(twin.starts_with("0x"), "{twin}");

    w.pay_usdt(&twin, STABLE_FOR_100_USD).await;
    w.finalize().await;
    let r = w
        .daemon
        .wait_for(tron_intent.id, "wrong network", |r| {
            r.status == Status::NeedsReview
        })
        .await;
    assert_eq!(r.exception, Some(Exception::WrongNetwork), "{:?}", r.reason);
    assert_eq!(r.amount_final, Amount(0), "it never counts as payment");
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE network = 'ethereum' AND to_address = '{twin}'"
            ))
            .await,
        1,
        "{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM paywatch_intent_transfers WHERE intent_id = {} \
                 AND network = 'ethereum' AND counts_toward_intent = 0",
                tron_intent.id
            ))
            .await,
        1,
        "the storefront sees it among the intent's transfers, not counting"
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_payment_on_postgres() {
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let contracts = deploy_contracts(&node).await;
    let o = EthOptions {
        backend: Backend::Postgres,
        ..EthOptions::default()
    };
    let db = TestDb::new(o.backend).await;
    let settings = eth_settings(&db.url, &node, &contracts, &o);
    let daemon = Daemon::start(db, settings).await;
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    let i = daemon.create_in("USDT", "topup", "pg-usdt", "100").await;
    node.token_transfer(
        &contracts.usdt,
        TOKEN_HOLDER,
        &i.address,
        STABLE_FOR_100_USD,
    )
    .await
    .unwrap();
    node.mine(64).await.unwrap();
    daemon
        .wait_for(i.id, "paid on PostgreSQL", |r| r.status == Status::Paid)
        .await;
    assert_eq!(
        daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
}

/// geth's answer for a transaction whose tracer ran out of time holds back
/// nothing else: the USDT and the top-level ETH payment in its block
/// settle, and the ETH a contract sent in it arrives once the node can
/// trace it again (the block is read again, as a missed one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_untraceable_transaction_holds_back_neither_tokens_nor_eth_and_its_internal_eth_comes_later(
) {
    untraceable_transaction_beside_payments(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_untraceable_transaction_on_postgres() {
    untraceable_transaction_beside_payments(Backend::Postgres).await;
}

async fn untraceable_transaction_beside_payments(backend: Backend) {
    use paywatch_testkit::trace_proxy::TraceFault;
    let w = eth_world(EthOptions {
        backend,
        trace_proxy: true,
        ..EthOptions::default()
    })
    .await;
    let proxy = w.proxy.as_ref().expect("a trace proxy");
    let usdt = w
        .daemon
        .create_in("USDT", "order", "usdt-beside", "100")
        .await;
    let eth = w.daemon.order("eth-beside", "100").await;
    let internal = w.daemon.order("eth-by-contract", "100").await;
    let fwd = w.contracts.forwarder.clone();

    w.node.set_automine(false).await.unwrap();
    w.pay_usdt(&usdt.address, STABLE_FOR_100_USD).await;
    w.pay_eth(&eth.address, ETH_FOR_100_USD).await;
    let forwarded = w
        .node
        .forward(&fwd, ETH_PAYER, &internal.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    proxy.set_fault(Some(TraceFault::TxTimeout {
        tx: forwarded.clone(),
    }));
    let height = w.node.mine(1).await.unwrap();
    w.node.set_automine(true).await.unwrap();
    w.finalize().await;

    for i in [&usdt, &eth] {
        let paid = w
            .daemon
            .wait_for(i.id, "paid beside the untraceable transaction", |r| {
                r.status == Status::Paid
            })
            .await;
        assert_eq!(paid.exception, None, "{:?}", paid.reason);
    }
    assert!(
        proxy.calls().spoiled.values().sum::<u64>() > 0,
        "the node was made unable to trace block {height}"
    );
    let waiting = w.daemon.intent(internal.id).await;
    assert_eq!(
        waiting.status,
        Status::AwaitingPayment,
        "without its trace the contract's ETH is not seen yet"
    );

    proxy.set_fault(None);
    let paid = w
        .daemon
        .wait_for(internal.id, "paid once the traces come back", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(paid.exception, None, "{:?}", paid.reason);
    assert_eq!(paid.amount_final, internal.amount_due);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{forwarded}' AND asset = 'ETH' \
                 AND tx_status = 'success'"
            ))
            .await,
        1,
        "the contract's ETH is recorded once\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 3);
}

/// The wait for a block's traces is kept in memory by the source. Killed
/// while it waited, paywatch must not forget the block: the restarted
/// watcher reads it again from the height the store kept, and the ETH a
/// contract sent in it pays the intent once the node can trace it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untraced_block_waited_on_when_paywatch_is_killed_is_read_again_after_the_restart() {
    use paywatch_testkit::trace_proxy::TraceFault;
    let mut w = eth_world(EthOptions {
        trace_proxy: true,
        ..EthOptions::default()
    })
    .await;
    let internal = w.daemon.order("eth-by-contract-crash", "100").await;
    let fwd = w.contracts.forwarder.clone();
    w.node.set_automine(false).await.unwrap();
    let forwarded = w
        .node
        .forward(&fwd, ETH_PAYER, &internal.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    let proxy = w.proxy.as_ref().expect("a trace proxy");
    proxy.set_fault(Some(TraceFault::TxTimeout {
        tx: forwarded.clone(),
    }));
    let height = w.node.mine(1).await.unwrap();
    w.node.set_automine(true).await.unwrap();
    w.finalize().await;
    w.daemon.wait_cursor(height).await;
    assert_eq!(
        w.daemon
            .count("SELECT COUNT(*) FROM chain_state WHERE network = 'ethereum' AND unread_from IS NOT NULL")
            .await,
        1,
        "the wait for block {height}'s traces is kept in the store"
    );

    w.daemon.crash();
    w.proxy.as_ref().expect("a trace proxy").set_fault(None);
    w.daemon.start_again().await;
    let paid = w
        .daemon
        .wait_for(internal.id, "paid after the restart", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(paid.amount_final, internal.amount_due, "{:?}", paid.reason);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{forwarded}' AND asset = 'ETH'"
            ))
            .await,
        1,
        "recorded once\n{}",
        w.daemon.transfers_table().await
    );
}

/// Without traces, ETH a contract sends to an open intent's address is in
/// no block paywatch reads, yet it is in the address's balance: at the next
/// final height the balance backstop finds it, once, as money no transfer
/// explains, with its exact amount, and lists it for an operator. The
/// intent is left unpaid: nothing settles by itself. A token beside it and
/// a direct payment elsewhere add nothing; an address the merchant swept
/// before a contract paid it cannot be compared and is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_traces_eth_a_contract_sent_is_a_balance_gap_in_the_review_queue() {
    contract_eth_is_a_balance_gap(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_traces_eth_a_contract_sent_is_a_balance_gap_on_postgres() {
    contract_eth_is_a_balance_gap(Backend::Postgres).await;
}

async fn contract_eth_is_a_balance_gap(backend: Backend) {
    let w = eth_world(EthOptions {
        backend,
        traces: false,
        ..EthOptions::default()
    })
    .await;
    let via_contract = w.daemon.order("paid-by-a-safe", "100").await;
    let direct = w.daemon.order("paid-directly", "100").await;
    let swept = w.daemon.order("swept-first", "100").await;
    let fwd = w.contracts.forwarder.clone();
    // The swept address: paid directly (recorded), half of it swept out by
    // the merchant, then paid by a contract: its balance says nothing now.
    w.pay_eth(&swept.address, ETH_FOR_100_USD).await;
    w.wait_sent_mined().await;
    w.sweep(&swept.address, ETH_FOR_100_USD / 2).await;
    w.wait_sent_mined().await;
    w.node
        .forward(&fwd, ETH_PAYER, &swept.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    // Addresses are compared once the watch set has held them a while.
    tokio::time::sleep(Duration::from_secs(6)).await;
    w.node
        .forward(&fwd, ETH_PAYER, &via_contract.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    // A token at the same address is no native coin: it neither explains
    // nor makes a difference.
    w.pay_usdt(&via_contract.address, STABLE_FOR_100_USD).await;
    w.pay_eth(&direct.address, ETH_FOR_100_USD).await;
    w.finalize().await;
    w.daemon
        .wait_for(direct.id, "paid directly", |r| r.status == Status::Paid)
        .await;

    let store = &w.daemon.ctx.store;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
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
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Later final heights find the same difference: nothing new.
    w.node.mine(FINALITY_DEPTH).await.unwrap();
    w.daemon.wait_cursor(w.tip().await).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps_later = store.open_balance_gaps(100).await.unwrap();
    assert_eq!(gaps_later, gaps, "the same gap is recorded once");
    assert_eq!(
        gaps.len(),
        1,
        "only the unswept contract-paid address: {gaps:?}"
    );
    let g = &gaps[0];
    assert_eq!(g.address, via_contract.address);
    assert_eq!(g.intent_id, Some(via_contract.id));
    assert_eq!(
        (g.node_balance, g.counted, g.unexplained),
        (ETH_FOR_100_USD, 0, ETH_FOR_100_USD)
    );

    let queue = common::eth::review_queue(&w.daemon).await;
    let listed = queue["balance_gaps"].as_array().expect("balance_gaps");
    assert_eq!(listed.len(), 1, "{queue}");
    assert_eq!(listed[0]["network"], "ethereum");
    assert_eq!(listed[0]["asset"], "ETH");
    assert_eq!(listed[0]["address"], via_contract.address.as_str());
    assert_eq!(listed[0]["intent_id"], via_contract.id);
    assert_eq!(listed[0]["unexplained"], ETH_FOR_100_USD.to_string());
    assert_eq!(listed[0]["counted"], "0");
    assert_eq!(listed[0]["handled_at_ms"], serde_json::Value::Null);

    // An operator looks at the chain, refunds, and marks the gap handled:
    // it leaves the queue with who did it and why, and only once.
    let api = common::eth::operator_client(&w.daemon).await;
    let mark = |id: String, body: &'static str| {
        let api = &api;
        async move {
            api.call(
                reqwest::Method::POST,
                &format!("/v1/balance-gaps/{id}/handled"),
                Some(common::api::OPERATOR),
                None,
                Some(body.into()),
            )
            .await
        }
    };
    let id = g.id.to_string();
    let (status, refused) = mark(id.clone(), r#"{"actor": "ana"}"#).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("note"),
        "{refused}"
    );
    let (status, handled) = mark(
        id.clone(),
        r#"{"actor": "ana", "note": "a Safe paid; refunded in 0xabc"}"#,
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{handled}");
    assert_eq!(handled["handled_by"], "ana");
    assert_eq!(handled["handled_note"], "a Safe paid; refunded in 0xabc");
    assert_eq!(handled["unexplained"], ETH_FOR_100_USD.to_string());
    let queue = common::eth::review_queue(&w.daemon).await;
    assert_eq!(queue["balance_gaps"], serde_json::json!([]), "{queue}");
    let (status, again) = mark(id, r#"{"actor": "bo", "note": "refunded too"}"#).await;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{again}");
    assert_eq!(again["error"]["code"], "already_handled");
    assert!(
        again["error"]["message"].as_str().unwrap().contains("ana"),
        "{again}"
    );
    let (status, _) = mark("999999".into(), r#"{"actor": "bo", "note": "x"}"#).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);

    // Nothing settles by itself: the intent is as the chain's transfers say
    // (in review for the USDT, another method's asset), never paid.
    let r = w.daemon.intent(via_contract.id).await;
    assert_eq!(
        (r.status, r.exception, r.amount_final, r.amount_pending),
        (
            Status::NeedsReview,
            Some(Exception::WrongAsset),
            Amount(0),
            Amount(0)
        )
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM settlements WHERE intent_id = {}",
                via_contract.id
            ))
            .await,
        0
    );
}

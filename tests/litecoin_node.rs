//! Payments on a real Litecoin Core regtest node, through the daemon's own
//! intents, read directly from the node and through a real ElectrumX.
//! Each scenario runs once per backend; the nodes are started by the test
//! (`bash deploy/install-nodes.sh` installs them) and missing ones fail it.

mod common;

use common::ltc::{settings_for, Daemon, Options, Via};
use common::{Backend, TestDb};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::Amount;
use paywatch_testkit::{Alternate, ElectrumX, LitecoinNode, NodeOptions, RpcProxy};
use serde_json::json;

const ONE_LTC: u128 = 100_000_000;

/// A node, an ElectrumX when the scenario reads through one, and the daemon.
struct World {
    node: LitecoinNode,
    electrum: Option<ElectrumX>,
    daemon: Daemon,
}

async fn world(via: Via, node_opts: NodeOptions, opts: Options) -> World {
    let node = LitecoinNode::start(node_opts)
        .await
        .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    let electrum = match via {
        Via::Electrum => Some(
            ElectrumX::start(&node)
                .await
                .unwrap_or_else(|e| panic!("ElectrumX: {e}")),
        ),
        Via::Node => None,
    };
    let db = TestDb::new(opts.backend).await;
    let opts = Options { via, ..opts };
    let settings = settings_for(&db.url, &node, electrum.as_ref(), &opts);
    let daemon = Daemon::start(db, settings).await;
    // A fresh database starts at the node's tip: pay only once it is read,
    // or a payment mined first would lie below where the watcher starts.
    daemon
        .wait_cursor(node.block_count().await.expect("block count"))
        .await;
    World {
        node,
        electrum,
        daemon,
    }
}

impl World {
    async fn pay(&self, address: &str, ltc: &str) -> String {
        self.node.send(address, ltc).await.expect("wallet pays")
    }

    async fn mine(&self, n: u64) -> Vec<String> {
        self.node.mine(n).await.expect("mines")
    }

    /// Waits for the daemon's backend to see the node's tip.
    async fn settle_backend(&self) {
        if let Some(e) = &self.electrum {
            e.wait_synced_with(&self.node)
                .await
                .expect("ElectrumX follows the node");
        }
    }
}

async fn exact_payment_confirms_from_the_mempool_then_pays_at_six_confirmations(via: Via) {
    let w = world(via, NodeOptions::default(), Options::default()).await;
    let intent = w.daemon.order("gpu-1", "100").await;
    assert_eq!(intent.amount_due, Amount(ONE_LTC), "100 USD at 100 USD/LTC");
    assert!(
        intent.address.starts_with("rltc1q"),
        "a BIP84 regtest address: {}",
        intent.address
    );

    let txid = w.pay(&intent.address, "1").await;
    let seen = w
        .daemon
        .wait_for(intent.id, "confirming from the mempool", |i| {
            i.status == Status::Confirming && i.amount_pending == Amount(ONE_LTC)
        })
        .await;
    assert_eq!(
        seen.amount_final,
        Amount(0),
        "zero confirmations are not final"
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM paywatch_intent_transfers WHERE intent_id = {} \
                 AND in_mempool = 1 AND block_hash IS NULL AND block_height IS NULL \
                 AND confirmations = 0 AND is_final = 0 AND orphaned_at IS NULL",
                intent.id
            ))
            .await,
        1,
        "the storefront sees the payment waiting in the mempool"
    );
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{txid}' AND block_hash = 'mempool'"
            ))
            .await,
        1
    );

    w.mine(5).await;
    w.settle_backend().await;
    let five = w
        .daemon
        .wait_for(intent.id, "5 confirmations, still confirming", |i| {
            i.status == Status::Confirming && i.amount_final == Amount(0)
        })
        .await;
    assert_eq!(five.paid_at_ms, None);
    w.mine(1).await;
    let paid = w
        .daemon
        .wait_for(intent.id, "paid at 6 confirmations", |i| {
            i.status == Status::Paid
        })
        .await;
    assert_eq!(paid.exception, None);
    assert_eq!(paid.amount_final, Amount(ONE_LTC));
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{txid}' AND orphaned_at IS NULL"
            ))
            .await,
        1,
        "the mined row took over from the mempool row"
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM paywatch_intent_transfers WHERE intent_id = {} \
                 AND in_mempool = 0 AND confirmations = 6 AND is_final = 1 AND orphaned_at IS NULL",
                intent.id
            ))
            .await,
        1,
        "the storefront sees the mined payment, final"
    );
}

async fn two_transactions_summing_to_the_amount_pay_the_order(via: Via) {
    let w = world(via, NodeOptions::default(), Options::default()).await;
    let intent = w.daemon.order("gpu-2", "100").await;
    w.pay(&intent.address, "0.4").await;
    w.mine(1).await;
    w.pay(&intent.address, "0.6").await;
    w.mine(6).await;
    let paid = w
        .daemon
        .wait_for(intent.id, "paid by two transactions", |i| {
            i.status == Status::Paid
        })
        .await;
    assert_eq!(paid.amount_final, Amount(ONE_LTC));
    assert_eq!(paid.exception, None);
}

async fn overpaid_is_paid_for_its_price_and_its_excess_and_a_second_payment_need_review(via: Via) {
    let w = world(via, NodeOptions::default(), Options::default()).await;
    let intent = w.daemon.create("topup", "topup-1", "100").await;
    w.pay(&intent.address, "1.5").await;
    w.mine(6).await;
    let paid = w
        .daemon
        .wait_for(intent.id, "paid for its price, its excess to review", |i| {
            i.exception == Some(Exception::Overpaid) && i.paid_at_ms.is_some()
        })
        .await;
    assert_eq!(paid.status, Status::NeedsReview);
    assert_eq!(paid.amount_excess, Amount(ONE_LTC / 2));

    w.pay(&intent.address, "1").await;
    w.mine(6).await;
    let dup = w
        .daemon
        .wait_for(intent.id, "needs review for a second payment", |i| {
            i.exception == Some(Exception::Duplicate)
        })
        .await;
    assert_eq!(
        dup.exception,
        Some(Exception::Duplicate),
        "{:?}",
        dup.reason
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000,
        "credited once"
    );
}

/// Intents that expire within seconds, for stories of late money.
/// ElectrumX 2 holds small replies up to a second to pad traffic, so a
/// poll through it takes seconds: its intents get more time to be paid.
fn short_expiry(via: Via) -> Options {
    Options {
        expiry_secs: if via == Via::Electrum { 30 } else { 10 },
        ..Options::default()
    }
}

async fn underpaid_and_late_payments_need_review(via: Via) {
    let w = world(via, NodeOptions::default(), short_expiry(via)).await;
    let short = w.daemon.order("gpu-short", "100").await;
    let late = w.daemon.order("gpu-late", "100").await;
    w.pay(&short.address, "0.5").await;
    // Seen in the mempool before expiry: that time is when it was received.
    w.daemon
        .wait_for(short.id, "the short payment seen", |i| {
            i.amount_pending == Amount(ONE_LTC / 2)
        })
        .await;
    w.mine(6).await;
    let under = w
        .daemon
        .wait_for(short.id, "underpaid at expiry", |i| {
            i.status == Status::NeedsReview
        })
        .await;
    assert_eq!(
        under.exception,
        Some(Exception::Underpaid),
        "{:?}\n{}",
        under.reason,
        w.daemon.transfers_table().await
    );
    assert_eq!(under.amount_final, Amount(ONE_LTC / 2));

    w.daemon
        .wait_for(late.id, "expired", |i| i.status == Status::Expired)
        .await;
    // Block times are whole seconds: a payment in the second after expiry
    // could carry a block time just before it, and count as on time.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    w.pay(&late.address, "1").await;
    w.mine(6).await;
    let paid_late = w
        .daemon
        .wait_for(late.id, "paid late", |i| i.status == Status::NeedsReview)
        .await;
    assert_eq!(paid_late.exception, Some(Exception::PaidLate));
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

async fn reorg_before_finality_returns_the_intent(via: Via) {
    // The wallet must not put the payment back after the node restarts, so
    // the test broadcasts it itself.
    let node_opts = NodeOptions {
        extra_args: vec!["-walletbroadcast=0".into(), "-persistmempool=0".into()],
        ..NodeOptions::default()
    };
    let mut w = world(via, node_opts, Options::default()).await;
    let intent = w.daemon.order("gpu-reorg", "100").await;
    let txid = w.pay(&intent.address, "1").await;
    let hex = w.node.rpc("gettransaction", json!([txid])).await.unwrap()["hex"]
        .as_str()
        .unwrap()
        .to_owned();
    w.node
        .rpc("sendrawtransaction", json!([hex]))
        .await
        .unwrap();
    let mined = w.mine(2).await;
    w.settle_backend().await;
    w.daemon
        .wait_for(intent.id, "confirming in a block", |i| {
            i.status == Status::Confirming && i.amount_pending == Amount(ONE_LTC)
        })
        .await;
    let paying_block = w.node.rpc("gettransaction", json!([txid])).await.unwrap()["blockhash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(paying_block, mined[0]);
    w.daemon
        .wait_cursor(w.node.block_count().await.unwrap())
        .await;

    // Replace both blocks: the payment goes back to the mempool.
    w.node.invalidate(&mined[0]).await.unwrap();
    w.node.mine_empty().await.unwrap();
    w.node.mine_empty().await.unwrap();
    let replacement = w.node.mine_empty().await.unwrap();
    w.settle_backend().await;
    w.daemon.wait_cursor_at(&replacement).await;
    let back = w
        .daemon
        .wait_for(intent.id, "back to zero confirmations", |i| {
            i.status == Status::Confirming
                && i.amount_pending == Amount(ONE_LTC)
                && i.amount_final == Amount(0)
        })
        .await;
    assert_eq!(back.paid_at_ms, None);
    let orphaned = w
        .daemon
        .count(&format!(
            "SELECT COUNT(*) FROM transfers WHERE block_hash = '{}' AND orphaned_at IS NOT NULL",
            mined[0]
        ))
        .await;
    assert_eq!(orphaned, 1, "the reorged-out row is kept, orphaned");

    // A node restart empties its mempool and the wallet keeps quiet: the
    // payment is gone for good, and the intent waits again.
    w.node.restart().await.unwrap();
    let tip = w.mine(6).await.pop().unwrap();
    if let Some(e) = &mut w.electrum {
        // ElectrumX reconnects by itself; wait for it to see the new tip.
        e.wait_synced_with(&w.node).await.unwrap();
    }
    w.daemon.wait_cursor_at(&tip).await;
    let gone = w
        .daemon
        .wait_for(intent.id, "awaiting payment again", |i| {
            i.status == Status::AwaitingPayment && i.amount_pending == Amount(0)
        })
        .await;
    assert_eq!(gone.amount_final, Amount(0));
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

/// A refund support sends is followed on the real chain by the watcher,
/// which learns its destination from the store as another instance's would:
/// one that pays too little is a mismatch and reopens the case; the one
/// that pays it reads `refunded` once final.
async fn a_refund_is_followed_on_chain_until_final(via: Via) {
    let w = world(via, NodeOptions::default(), short_expiry(via)).await;
    let late = w.daemon.order("gpu-refund", "100").await;
    w.daemon
        .wait_for(late.id, "expired", |i| i.status == Status::Expired)
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    w.pay(&late.address, "1").await;
    w.mine(6).await;
    w.daemon
        .wait_for(late.id, "paid late", |i| {
            i.exception == Some(Exception::PaidLate)
        })
        .await;

    let destination = w.node.new_address().await.expect("a wallet address");
    let act = |action, key: &'static str, destination: Option<String>, txid: Option<String>| {
        let ctx = &w.daemon.ctx;
        async move {
            ctx.reconciler
                .act(&paywatch::reconcile::CaseAction {
                    intent_id: late.id,
                    action,
                    role: "support",
                    actor: "ana",
                    token_name: "support",
                    note: "the customer asked for the money back",
                    key,
                    destination: destination.as_deref(),
                    txid: txid.as_deref(),
                    to_intent: None,
                })
                .await
                .expect("the action is recorded")
        }
    };
    use paywatch::reconcile::{Action, ActionOutcome};
    let done = |o: ActionOutcome| assert!(matches!(o, ActionOutcome::Done { .. }), "{o:?}");
    done(
        act(
            Action::RefundRequired,
            "r1",
            Some(destination.clone()),
            None,
        )
        .await,
    );
    // Sent at once: the watcher learns the destination at its next look
    // and reads again the blocks since the refund was required.
    let short = w.pay(&destination, "0.5").await;
    done(act(Action::RefundSent, "r2", None, Some(short.clone())).await);
    w.mine(6).await;
    let case = w
        .daemon
        .wait_for(late.id, "a case for the short refund", |i| {
            i.reason_code.as_deref() == Some("refund_mismatch")
        })
        .await;
    assert_eq!(case.status, Status::NeedsReview);
    assert!(
        case.reason
            .as_deref()
            .unwrap_or_default()
            .contains("less than"),
        "{:?}",
        case.reason
    );

    let full = w.pay(&destination, "1").await;
    done(act(Action::RefundSent, "r3", None, Some(full.clone())).await);
    w.daemon
        .wait_for(late.id, "resolved while the refund confirms", |i| {
            i.status == Status::Resolved
        })
        .await;
    let unconfirmed = w
        .daemon
        .count("SELECT COUNT(*) FROM refunds WHERE state = 'sent_unconfirmed'")
        .await;
    assert_eq!(unconfirmed, 1, "not final before six confirmations");
    w.mine(6).await;
    w.settle_backend().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while w
        .daemon
        .count("SELECT COUNT(*) FROM refunds WHERE state = 'refunded'")
        .await
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the refund never read refunded:\n{}",
            w.daemon.transfers_table().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{full}' AND to_address = '{destination}' \
                 AND orphaned_at IS NULL AND final_at IS NOT NULL"
            ))
            .await,
        1,
        "the refund's output recorded as the watcher saw it"
    );
    w.daemon.assert_money_rules().await;
}

/// Each story once per backend: `via_node::name` and `via_electrumx::name`.
macro_rules! on_both_backends {
    ($($name:ident => $story:ident),+ $(,)?) => {
        mod via_node {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$story(super::Via::Node).await })+
        }
        mod via_electrumx {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$story(super::Via::Electrum).await })+
        }
    };
}

on_both_backends!(
    exact_payment => exact_payment_confirms_from_the_mempool_then_pays_at_six_confirmations,
    two_transactions => two_transactions_summing_to_the_amount_pay_the_order,
    overpaid_then_second_payment => overpaid_is_paid_for_its_price_and_its_excess_and_a_second_payment_need_review,
    underpaid_and_late => underpaid_and_late_payments_need_review,
    reorg_before_finality => reorg_before_finality_returns_the_intent,
    refund_followed_on_chain => a_refund_is_followed_on_chain_until_final,
);

/// The same story on PostgreSQL, as production runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_payment_on_postgres() {
    let w = world(
        Via::Node,
        NodeOptions::default(),
        Options {
            backend: Backend::Postgres,
            ..Options::default()
        },
    )
    .await;
    let intent = w.daemon.order("gpu-pg", "100").await;
    w.pay(&intent.address, "1").await;
    w.mine(6).await;
    w.daemon
        .wait_for(intent.id, "paid", |i| i.status == Status::Paid)
        .await;
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

/// Issue 21, found 2: every issued address stayed subscribed for ever, so
/// an Electrum watcher halted once the addresses ever issued passed the
/// server's limit (`max_subscriptions`), in about a week at 1,250 intents a
/// day. Now an address whose intent ended and saw no money goes dormant:
/// out of the subscriptions, looked up by the sweep. Here the limit is 3;
/// five addresses are issued, the first three expire unpaid and go
/// dormant, a new intent is paid on time, and a customer pays an expired
/// one late: the sweep finds it, puts the address back and the payment
/// goes to review, while the watcher never halts.
async fn electrum_watching_outlives_its_subscription_limit_as_ended_addresses_go_dormant(
    backend: Backend,
) {
    let opts = Options {
        backend,
        via: Via::Electrum,
        expiry_secs: 20,
        electrum_limits: Some((3, 1, 2)),
        ..Options::default()
    };
    let w = world(Via::Electrum, NodeOptions::default(), opts).await;
    let mut expired = Vec::new();
    for i in 0..3 {
        expired.push(w.daemon.order(&format!("dormant-{i}"), "100").await);
    }
    for intent in &expired {
        w.daemon
            .wait_for(intent.id, "expired", |i| i.status == Status::Expired)
            .await;
    }
    let dormant_sql = "SELECT COUNT(*) FROM addresses WHERE dormant_at IS NOT NULL";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while w.daemon.count(dormant_sql).await < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the expired intents' addresses never went dormant"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let watch = w.daemon.ctx.watch[&w.daemon.network].clone();

    // Five issued, the limit three: the two new ones are watched.
    let fresh = w.daemon.order("after-dormancy", "100").await;
    let other = w.daemon.order("after-dormancy-2", "100").await;
    w.pay(&fresh.address, "1").await;
    w.mine(6).await;
    w.daemon
        .wait_for(fresh.id, "paid on time", |i| i.status == Status::Paid)
        .await;
    assert!(watch.len() <= 3, "{} live addresses", watch.len());
    assert!(watch.contains(&other.address) && !watch.contains(&expired[0].address));

    // Paid days late, as far as this intent is concerned.
    let late = &expired[1];
    let txid = w.pay(&late.address, "1").await;
    w.mine(6).await;
    let paid_late = w
        .daemon
        .wait_for(late.id, "paid late, found by the sweep", |i| {
            i.status == Status::NeedsReview
        })
        .await;
    assert_eq!(paid_late.exception, Some(Exception::PaidLate));
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{txid}' AND orphaned_at IS NULL \
                 AND block_hash <> 'mempool'"
            ))
            .await,
        1,
        "the late payment is recorded once, mined\n{}",
        w.daemon.transfers_table().await
    );
    assert!(watch.contains(&late.address), "woken: watched again");
    assert!(watch.len() <= 3, "{} live addresses", watch.len());
    let status = w
        .daemon
        .ctx
        .store
        .chain_status(w.daemon.network)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(status.watcher_state, "halted", "{status:?}");
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
    w.daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electrum_watching_outlives_its_subscription_limit_on_sqlite() {
    electrum_watching_outlives_its_subscription_limit_as_ended_addresses_go_dormant(
        Backend::Sqlite,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electrum_watching_outlives_its_subscription_limit_on_postgres() {
    electrum_watching_outlives_its_subscription_limit_as_ended_addresses_go_dormant(
        Backend::Postgres,
    )
    .await;
}

/// paywatch is killed while it catches up 500 blocks, and started again: every
/// payment in them is credited, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_catching_up_500_blocks_loses_nothing_and_credits_once() {
    let node = LitecoinNode::start(NodeOptions::default()).await.unwrap();
    let db = TestDb::new(Backend::Sqlite).await;
    let start = node.block_count().await.unwrap() + 1;
    let opts = Options {
        start_height: Some(start),
        ..Options::default()
    };
    let mut settings = settings_for(&db.url, &node, None, &opts);
    // Small batches, so the kill lands mid-way.
    settings
        .networks
        .get_mut("litecoin")
        .unwrap()
        .blocks_per_poll = 5;
    let mut daemon = Daemon::start(db, settings).await;
    let mut intents = Vec::new();
    for i in 0..5 {
        intents.push(daemon.create("topup", &format!("topup-{i}"), "100").await);
    }
    daemon.stop().await;

    for intent in &intents {
        node.send(&intent.address, "1").await.unwrap();
        node.mine(100).await.unwrap();
    }
    let tip = node.block_count().await.unwrap();
    assert!(tip >= start + 499);

    daemon.start_again().await;
    daemon.wait_cursor(start + 120).await;
    daemon.crash();
    let at_crash = daemon
        .ctx
        .store
        .chain_status(paywatch_core::Network::Litecoin)
        .await
        .unwrap()
        .and_then(|s| s.cursor_height)
        .unwrap();
    assert!(
        at_crash < tip,
        "the kill came mid catch-up ({at_crash} of {tip})"
    );

    daemon.start_again().await;
    for intent in &intents {
        daemon
            .wait_for(intent.id, "paid after the restart", |i| {
                i.status == Status::Paid
            })
            .await;
    }
    daemon.wait_cursor(tip).await;
    assert_eq!(daemon.count("SELECT COUNT(*) FROM settlements").await, 5);
    assert_eq!(
        daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NULL AND block_hash <> 'mempool'")
            .await,
        5,
        "each payment recorded once"
    );
    assert_eq!(
        daemon.count("SELECT COUNT(*) FROM ledger_entries").await,
        5,
        "one credit per top-up"
    );
    assert_eq!(
        daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        50_000
    );
    daemon.assert_money_rules().await;
    daemon.stop().await;
}

/// The node goes away mid-run (cookie auth: it writes a new cookie when it
/// comes back); the watcher reports itself degraded, retries, and carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restart_degrades_the_watcher_which_then_carries_on() {
    let mut node = LitecoinNode::start(NodeOptions {
        auth: paywatch_testkit::Auth::Cookie,
        ..NodeOptions::default()
    })
    .await
    .unwrap();
    let db = TestDb::new(Backend::Sqlite).await;
    let settings = settings_for(&db.url, &node, None, &Options::default());
    let daemon = Daemon::start(db, settings).await;
    let intent = daemon.order("gpu-outage", "100").await;
    daemon.wait_cursor(node.block_count().await.unwrap()).await;

    node.stop().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let s = daemon
            .ctx
            .store
            .chain_status(paywatch_core::Network::Litecoin)
            .await
            .unwrap()
            .unwrap();
        if s.watcher_state == "degraded" {
            assert!(
                s.last_error
                    .as_deref()
                    .unwrap_or("")
                    .contains("unreachable"),
                "the reason names the outage: {:?}",
                s.last_error
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never degraded: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    node.start_again().await.unwrap();
    node.send(&intent.address, "1").await.unwrap();
    node.mine(6).await.unwrap();
    daemon
        .wait_for(intent.id, "paid after the outage", |i| {
            i.status == Status::Paid
        })
        .await;
    let s = daemon
        .ctx
        .store
        .chain_status(paywatch_core::Network::Litecoin)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.watcher_state, "running");
}

/// A chain with MWEB active: every block from the live node, HogEx and
/// extension block included, parses and verifies, and a payment in those
/// blocks is credited while MWEB peg-ins go on beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mweb_active_live_blocks_parse_whole_and_payments_are_seen() {
    let node = LitecoinNode::start(NodeOptions {
        mweb: true,
        ..NodeOptions::default()
    })
    .await
    .unwrap();
    // Past activation at 432; the harness pegs in where mining needs it.
    let height = node.block_count().await.unwrap();
    node.mine(440 - height).await.unwrap();
    let db = TestDb::new(Backend::Sqlite).await;
    let opts = Options {
        start_height: Some(425),
        ..Options::default()
    };
    let settings = settings_for(&db.url, &node, None, &opts);
    let daemon = Daemon::start(db, settings).await;
    let intent = daemon.order("gpu-mweb", "100").await;

    let mweb = node.new_mweb_address().await.unwrap();
    node.send(&mweb, "2").await.unwrap();
    node.send(&intent.address, "1").await.unwrap();
    node.mine(6).await.unwrap();
    let paid = daemon
        .wait_for(intent.id, "paid on an MWEB chain", |i| {
            i.status == Status::Paid
        })
        .await;
    assert_eq!(paid.amount_final, Amount(ONE_LTC));

    let tip = node.block_count().await.unwrap();
    let mut with_extension = 0;
    for h in 425..=tip {
        let hash = node.block_hash(h).await.unwrap();
        let bytes = node.raw_block(&hash).await.unwrap();
        let block =
            paywatch_utxo::RawBlock::parse(&bytes).unwrap_or_else(|e| panic!("block {h}: {e}"));
        block
            .verify(Some(hash.parse().unwrap()))
            .unwrap_or_else(|e| panic!("block {h}: {e}"));
        if block.mweb_len() > 0 {
            with_extension += 1;
        }
    }
    assert!(
        with_extension >= (tip - 432),
        "blocks after activation carry an extension block"
    );
    daemon.wait_cursor(tip).await;
}

/// `deploy/devnet.sh` on a real regtest node: the node's wallet plays the
/// customer and mines, and the daemon takes the intent to paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_devnet_customer_pays_open_intents_on_a_regtest_node() {
    let node = LitecoinNode::start(NodeOptions::default()).await.unwrap();
    let db = TestDb::new(Backend::Sqlite).await;
    let mut settings = settings_for(&db.url, &node, None, &Options::default());
    settings.devchain.enabled = true;
    settings.devchain.autopay = true;
    settings.devchain.block_secs = 1;
    let daemon = Daemon::start(db, settings).await;
    let intent = daemon.order("gpu-devnet", "49.99").await;
    let paid = daemon
        .wait_for(intent.id, "paid by the regtest wallet", |i| {
            i.status == Status::Paid
        })
        .await;
    assert_eq!(paid.amount_final, intent.amount_due, "exactly what was due");
    assert_eq!(paid.exception, None);
}

/// A final payment, then a load balancer that also sends paywatch to a
/// second node, cut off before the payment and behind on 3 blocks of its
/// own (restored from a snapshot, or a backend that lost its peers). Its
/// lower tip is not a reorg: the order stays paid, nothing is reversed or
/// credited again, no event or webhook goes out twice, and once the node
/// rejoins the chain the watcher simply follows it. Runs on both stores.
async fn a_lagging_backend_on_a_stale_branch_never_reverses_a_final_payment(backend: Backend) {
    let good = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    let lagging = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    // The two share a history, then lose each other.
    lagging
        .rpc(
            "addnode",
            json!([format!("127.0.0.1:{}", good.p2p_port()), "onetry"]),
        )
        .await
        .unwrap();
    let shared = good.mine(1).await.unwrap().pop().unwrap();
    let started = std::time::Instant::now();
    while lagging.best_hash().await.unwrap() != shared {
        assert!(started.elapsed().as_secs() < 60, "the nodes never met");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for node in [&good, &lagging] {
        node.rpc("setnetworkactive", json!([false])).await.unwrap();
    }
    lagging.mine(3).await.unwrap();

    // Turns of 64 requests each: whole polls go to one node, then the other.
    let proxy = RpcProxy::start(vec![good.rpc_url(), lagging.rpc_url()], Alternate::new(64))
        .await
        .unwrap();
    let db = TestDb::new(backend).await;
    let mut settings = settings_for(&db.url, &good, None, &Options::default());
    settings
        .networks
        .get_mut("litecoin")
        .expect("litecoin settings")
        .rpc
        .url = proxy.url().to_owned();
    let daemon = Daemon::start(db, settings).await;
    daemon.wait_cursor(good.block_count().await.unwrap()).await;

    let intent = daemon.order("gpu-lagging", "100").await;
    good.send(&intent.address, "1").await.unwrap();
    let tip = good.mine(7).await.unwrap().pop().unwrap();
    daemon.wait_cursor_at(&tip).await;
    let paid = daemon
        .wait_for(intent.id, "paid", |i| i.status == Status::Paid)
        .await;
    let events = |id: i64| format!("SELECT COUNT(*) FROM intent_events WHERE intent_id = {id}");
    let events_when_paid = daemon.count(&events(intent.id)).await;
    let outbox_when_paid = daemon.count("SELECT COUNT(*) FROM outbox").await;

    // A few seconds of polls (about 10 a second), half of them answered by
    // the lagging node; the chain grows meanwhile.
    for _ in 0..4 {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let i = daemon.intent(intent.id).await;
        assert_eq!(
            (i.status, i.exception, i.reversed_at_ms, i.amount_final),
            (Status::Paid, None, None, paid.amount_final),
            "a lagging backend reversed a final payment:\n{}",
            daemon.transfers_table().await
        );
        good.mine(1).await.unwrap();
    }
    let tip = good.best_hash().await.unwrap();
    daemon.wait_cursor_at(&tip).await;
    assert_eq!(
        daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NOT NULL")
            .await,
        0,
        "nothing of the chain was orphaned:\n{}",
        daemon.transfers_table().await
    );
    assert_eq!(
        daemon.count("SELECT COUNT(*) FROM settlements").await,
        1,
        "settled once"
    );
    assert_eq!(daemon.count(&events(intent.id)).await, events_when_paid);
    assert_eq!(
        daemon.count("SELECT COUNT(*) FROM outbox").await,
        outbox_when_paid,
        "no webhook or feed event went out again"
    );
    daemon.assert_money_rules().await;

    // The lagging node rejoins and takes the chain: nothing changes.
    for node in [&good, &lagging] {
        node.rpc("setnetworkactive", json!([true])).await.unwrap();
    }
    lagging
        .rpc(
            "addnode",
            json!([format!("127.0.0.1:{}", good.p2p_port()), "onetry"]),
        )
        .await
        .unwrap();
    let tip = good.mine(1).await.unwrap().pop().unwrap();
    let started = std::time::Instant::now();
    while lagging.best_hash().await.unwrap() != tip {
        assert!(
            started.elapsed().as_secs() < 60,
            "the lagging node never caught up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    daemon.wait_cursor_at(&tip).await;
    let i = daemon.intent(intent.id).await;
    assert_eq!((i.status, i.reversed_at_ms), (Status::Paid, None));
    assert_eq!(daemon.count(&events(intent.id)).await, events_when_paid);
    daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_backend_on_a_stale_branch_never_reverses_a_final_payment_on_sqlite() {
    a_lagging_backend_on_a_stale_branch_never_reverses_a_final_payment(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_backend_on_a_stale_branch_never_reverses_a_final_payment_on_postgres() {
    a_lagging_backend_on_a_stale_branch_never_reverses_a_final_payment(Backend::Postgres).await;
}

/// The node's P2P announcements (issue 34): with polls ten minutes apart,
/// a payment is seen and its block pays the order because the node told
/// paywatch, over its P2P port, the moment it knew. The node lets
/// paywatch's address skip the delay it puts on announcing transactions
/// to inbound peers (`-whitelist=noban@127.0.0.1`, as the README says).
async fn p2p_world(
    p2p: impl Fn(&LitecoinNode) -> String,
    poll_ms: u64,
) -> (LitecoinNode, Daemon, String) {
    let node = LitecoinNode::start(NodeOptions {
        extra_args: vec!["-whitelist=noban@127.0.0.1".into()],
        ..NodeOptions::default()
    })
    .await
    .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    let db = TestDb::new(Backend::Sqlite).await;
    let mut settings = settings_for(
        &db.url,
        &node,
        None,
        &Options {
            confirmations: 1,
            ..Options::default()
        },
    );
    let n = settings
        .networks
        .get_mut("litecoin")
        .expect("litecoin settings");
    n.poll_interval_ms = poll_ms;
    n.rpc.p2p = Some(p2p(&node));
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    settings.metrics.listen = metrics.to_string();
    let daemon = Daemon::start(db, settings).await;
    daemon
        .wait_cursor(node.block_count().await.expect("block count"))
        .await;
    (node, daemon, format!("http://{metrics}/metrics"))
}

/// Waits until the metrics say `want` of the push fallback.
async fn wait_push_fallback(metrics: &str, want: u8) {
    let line = format!("paywatch_push_fallback{{network=\"litecoin\"}} {want}");
    let mut last = String::new();
    for _ in 0..300 {
        if let Ok(r) = reqwest::get(metrics).await {
            last = r.text().await.unwrap_or_default();
            if last.lines().any(|l| l == line) {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let seen: Vec<&str> = last
        .lines()
        .filter(|l| l.contains("push_fallback"))
        .collect();
    panic!("the metrics never said {line}: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_and_its_block_are_heard_over_p2p_with_polls_ten_minutes_apart() {
    let (node, daemon, metrics) =
        p2p_world(|node| format!("127.0.0.1:{}", node.p2p_port()), 600_000).await;
    let intent = daemon.order("p2p-1", "100").await;
    node.send(&intent.address, "1").await.expect("wallet pays");
    daemon
        .wait_for(intent.id, "seen from the mempool", |i| {
            i.status == Status::Confirming
        })
        .await;
    node.mine(1).await.expect("mines");
    daemon
        .wait_for(intent.id, "paid", |i| i.status == Status::Paid)
        .await;
    daemon.assert_money_rules().await;
    wait_push_fallback(&metrics, 0).await;
}

/// With the P2P port closed, polling stands in: payments arrive all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_p2p_port_closed_polling_still_sees_every_payment() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let (node, daemon, metrics) = p2p_world(move |_| format!("127.0.0.1:{closed}"), 100).await;
    wait_push_fallback(&metrics, 1).await;
    let intent = daemon.order("p2p-closed", "100").await;
    node.send(&intent.address, "1").await.expect("wallet pays");
    node.mine(1).await.expect("mines");
    daemon
        .wait_for(intent.id, "paid", |i| i.status == Status::Paid)
        .await;
    daemon.assert_money_rules().await;
}

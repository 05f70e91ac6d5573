//! The Solana watcher end to end, through the daemon's own intents, against
//! the testkit Solana node: agave's JSON-RPC over HTTP, real signed
//! transactions executed by litesvm.

mod common;

use std::time::Duration;

use common::solana::{address, solana_world, SolanaOptions, SOL_FOR_100_USD};
use common::Backend;
use paywatch::reconcile::{Exception, Status};
use paywatch_core::Amount;
use paywatch_testkit::solana::SolanaFault;
use paywatch_testkit::SolanaNodeOptions;
use solana_signer::Signer;

const SOL_100: Amount = Amount(SOL_FOR_100_USD as u128);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exact_sol_payment_confirms_then_pays_once_finalized() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.order("gpu-sol", "100").await;
    assert_eq!(i.amount_due, SOL_100);
    paywatch_solana::parse_address(&i.address)
        .unwrap_or_else(|e| panic!("a valid Solana address {}: {e}", i.address));

    let sig = w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.confirm();
    let seen = w
        .daemon
        .wait_for(i.id, "confirming before finalized", |r| {
            r.status == Status::Confirming && r.amount_pending == r.amount_due
        })
        .await;
    assert_eq!(seen.amount_final, Amount(0));
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);

    w.finalize();
    let paid = w
        .daemon
        .wait_for(i.id, "paid once finalized", |r| r.status == Status::Paid)
        .await;
    assert_eq!(paid.exception, None, "{:?}", paid.reason);
    assert_eq!(paid.amount_final, SOL_100);
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE txid = '{sig}' AND asset = 'SOL' \
                 AND amount = {SOL_FOR_100_USD} AND from_address = '{}'",
                w.payer_address()
            ))
            .await,
        1,
        "recorded once, by its signature and fee payer\n{}",
        w.daemon.transfers_table().await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_payment_pays_and_a_topup_credits_the_balance_once() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.create("topup", "split", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD / 4);
    w.confirm();
    w.pay_sol(&i.address, SOL_FOR_100_USD - SOL_FOR_100_USD / 4);
    w.settle();
    let paid = w
        .daemon
        .wait_for(i.id, "paid by two transfers", |r| r.status == Status::Paid)
        .await;
    assert_eq!(paid.exception, None, "{:?}", paid.reason);
    assert_eq!(paid.amount_final, SOL_100);
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_over_late_and_duplicate_payments_are_flagged() {
    let mut w = solana_world(SolanaOptions {
        expiry_secs: 8,
        ..SolanaOptions::default()
    })
    .await;
    let short = w.daemon.order("short", "100").await;
    let topup = w.daemon.create("topup", "topup-1", "100").await;
    let late = w.daemon.order("late", "100").await;

    w.pay_sol(&short.address, SOL_FOR_100_USD / 2);
    w.pay_sol(&topup.address, SOL_FOR_100_USD * 3 / 2);
    w.settle();
    let over = w
        .daemon
        .wait_for(topup.id, "paid for its price, its excess to review", |i| {
            i.exception == Some(Exception::Overpaid) && i.paid_at_ms.is_some()
        })
        .await;
    assert_eq!(over.status, Status::NeedsReview);
    assert_eq!(over.amount_excess, Amount(u128::from(SOL_FOR_100_USD / 2)));

    w.pay_sol(&topup.address, SOL_FOR_100_USD);
    w.settle();
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
    // Block times are whole seconds: pay clearly after the expiry's second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    w.pay_sol(&late.address, SOL_FOR_100_USD);
    w.settle();
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
async fn a_token_at_a_watched_owner_is_recorded_as_spam_and_a_failed_transfer_does_not_count() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let usdc_to = w.daemon.order("got-usdc", "100").await;
    let failed = w.daemon.order("reverted", "100").await;
    let payer = w.payer();
    let mint = w.node.create_usdc_mint(&payer).unwrap();
    w.node
        .mint_tokens(&mint, &payer, &payer.pubkey(), 500_000_000)
        .unwrap();
    w.confirm();
    // The customer's wallet sends a token to the SOL address: it lands in
    // the owner's associated token account, which the wallet creates. No
    // method on Solana is a token, so this mint is none of the methods'
    // assets: recorded by its mint, at the owner, and moving nothing.
    w.node
        .send_token(&payer, &mint, &address(&usdc_to.address), 100_000_000)
        .unwrap();
    w.node
        .send_sol_failing(&payer, &address(&failed.address))
        .unwrap();
    w.settle();

    let recorded = format!(
        "SELECT COUNT(*) FROM transfers WHERE asset = 'token:{mint}' \
         AND amount = 100000000 AND to_address = '{}'",
        usdc_to.address
    );
    for _ in 0..600 {
        if w.daemon.count(&recorded).await == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        w.daemon.count(&recorded).await,
        1,
        "the token is recorded by its mint, at the owner\n{}",
        w.daemon.transfers_table().await
    );
    let r = w.daemon.intent(usdc_to.id).await;
    assert_eq!(
        r.status,
        Status::AwaitingPayment,
        "spam moves nothing: {:?}",
        r.reason
    );
    assert_eq!(r.amount_final, Amount(0), "no SOL arrived");

    let f = w.daemon.intent(failed.id).await;
    assert_eq!(f.status, Status::AwaitingPayment, "{:?}", f.reason);
    assert_eq!(f.amount_pending, Amount(0));
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE to_address = '{}'",
                failed.address
            ))
            .await,
        0,
        "a failed transaction moved nothing\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lamports_moved_by_a_program_and_through_a_lookup_table_count() {
    let mut w = solana_world(SolanaOptions {
        pool: 0,
        ..SolanaOptions::default()
    })
    .await;
    let payer = w.payer();
    let mint = w.node.create_usdc_mint(&payer).unwrap();
    w.confirm();
    // An imported address that a program funds: the associated token
    // program creates the account, moving its rent by a CPI that no
    // top-level instruction names.
    let ata = w.import_token_account(&mint).await;
    let by_program = w.daemon.order("cpi", "0.20").await;
    assert_eq!(by_program.address, ata);
    let rent = w.node.rent_exempt_minimum(165);
    assert!(rent > by_program.amount_due.0 as u64, "rent {rent}");

    // A v0 transaction whose recipient is loaded from a lookup table.
    let fresh = w.import_fresh(1).await;
    let v0 = w.daemon.order("v0", "100").await;
    assert_eq!(v0.address, fresh[0]);
    let table = w
        .node
        .create_lookup_table(&payer, vec![address(&v0.address)])
        .unwrap();
    w.confirm();
    w.confirm();

    let owner = w.token_account_owners[&ata];
    w.node.create_token_account(&payer, &owner, &mint).unwrap();
    w.node
        .send_sol_v0(&payer, &address(&v0.address), SOL_FOR_100_USD, &table)
        .unwrap();
    w.settle();

    let cpi = w
        .daemon
        .wait_for(by_program.id, "paid by the program", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(cpi.amount_final, Amount(u128::from(rent)));
    assert_eq!(cpi.exception, Some(Exception::Overpaid), "{:?}", cpi.reason);
    let paid = w
        .daemon
        .wait_for(v0.id, "paid through the lookup table", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(paid.exception, None, "{:?}", paid.reason);
    assert_eq!(paid.amount_final, SOL_100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_slots_and_a_rate_limited_node_lose_nothing() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let a = w.daemon.order("after-skip", "100").await;
    let b = w.daemon.order("rate-limited", "100").await;
    w.pay_sol(&a.address, SOL_FOR_100_USD);
    let slot = w.node.skip_slot();
    w.node.skip_slot();
    w.settle();
    w.daemon
        .wait_for(a.id, "paid across skipped slots", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(
        w.daemon
            .count(&format!(
                "SELECT COUNT(*) FROM transfers WHERE to_address = '{}' AND block_height = {slot}",
                a.address
            ))
            .await,
        1,
        "recorded at its slot\n{}",
        w.daemon.transfers_table().await
    );

    let before = w.node.requests();
    w.node.set_fault(SolanaFault::RateLimited {
        requests: 3,
        retry_after_secs: 1,
    });
    w.pay_sol(&b.address, SOL_FOR_100_USD);
    w.settle();
    w.daemon
        .wait_for(b.id, "paid through the rate limit", |r| {
            r.status == Status::Paid
        })
        .await;
    assert!(w.node.requests() > before + 3);
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM transfers").await, 2);
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_before_finality_drops_the_payment_and_nothing_is_credited_twice() {
    let mut w = solana_world(SolanaOptions {
        node: SolanaNodeOptions {
            finalized_lag: 6,
            ..SolanaNodeOptions::default()
        },
        ..SolanaOptions::default()
    })
    .await;
    let i = w.daemon.create("topup", "forked", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.confirm();
    let tip = w.confirm();
    w.daemon
        .wait_for(i.id, "confirming", |r| r.status == Status::Confirming)
        .await;
    w.daemon.wait_cursor(tip).await;

    // Another branch replaces both blocks; the payment is not in it.
    let dropped = w.node.fork(2).unwrap();
    assert_eq!(dropped.len(), 1);
    w.confirm();
    w.confirm();
    let tip = w.confirm();
    w.daemon.wait_cursor(tip).await;
    let back = w
        .daemon
        .wait_for(i.id, "awaiting again", |r| {
            r.status == Status::AwaitingPayment
        })
        .await;
    assert_eq!(back.amount_pending, Amount(0));
    assert_eq!(
        w.daemon
            .count("SELECT COUNT(*) FROM transfers WHERE orphaned_at IS NOT NULL")
            .await,
        1,
        "the dropped sighting is orphaned, not deleted\n{}",
        w.daemon.transfers_table().await
    );

    // The wallet sends again; it credits once, when finalized.
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.settle();
    w.daemon
        .wait_for(i.id, "paid after the fork", |r| r.status == Status::Paid)
        .await;
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_catching_up_loses_nothing_and_credits_once() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let mut intents = Vec::new();
    for n in 0..8 {
        intents.push(
            w.daemon
                .create("topup", &format!("catchup-{n}"), "100")
                .await,
        );
    }
    let start = w.node.slots().1;
    w.daemon.wait_cursor(start).await;
    w.daemon.stop().await;
    for intent in &intents {
        w.pay_sol(&intent.address, SOL_FOR_100_USD);
        for n in 0..60 {
            if n % 7 == 3 {
                w.node.skip_slot();
            } else {
                w.confirm();
            }
        }
    }
    w.finalize();
    let end = w.node.slots().1;

    w.daemon.start_again().await;
    w.daemon.wait_cursor(start + 200).await;
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
        8,
        "every payment recorded exactly once\n{}",
        w.daemon.transfers_table().await
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM settlements").await, 8);
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        8 * 10_000
    );
    w.daemon.assert_money_rules().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_node_degrades_the_watcher_then_it_resumes_on_postgres() {
    let mut w = solana_world(SolanaOptions {
        backend: Backend::Postgres,
        ..SolanaOptions::default()
    })
    .await;
    let i = w.daemon.create("topup", "pg-sol", "100").await;
    w.node.set_fault(SolanaFault::Unavailable);
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.settle();
    let s = w.daemon.wait_chain_state("degraded").await;
    assert!(
        s.last_error.as_deref().is_some_and(|e| e.contains("503")),
        "{s:?}"
    );
    assert_eq!(w.daemon.count("SELECT COUNT(*) FROM transfers").await, 0);

    w.node.set_fault(SolanaFault::None);
    w.daemon.wait_chain_state("running").await;
    w.daemon
        .wait_for(i.id, "paid once the node is back", |r| {
            r.status == Status::Paid
        })
        .await;
    assert_eq!(
        w.daemon.ctx.store.balance_cents("acct-1").await.unwrap(),
        10_000
    );
}

/// agave answers `getBlock` for the slot `getSlot(confirmed)` just named
/// with `-32014 Block status not yet available` while that block is being
/// written (providers with `-32004` or `null`): "not yet", not a failing
/// node. The watcher waits for it without going degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tip_block_not_yet_available_is_waited_for_without_degrading() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.order("not-yet", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.node
        .set_fault(SolanaFault::TipNotYetAvailable { requests: 25 });
    w.confirm();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut states = Vec::new();
    while !matches!(w.node.fault(), SolanaFault::None) {
        assert!(
            std::time::Instant::now() < deadline,
            "the fault was never used up"
        );
        if let Some(s) = w
            .daemon
            .ctx
            .store
            .chain_status(paywatch_core::Network::Solana)
            .await
            .unwrap()
        {
            let degraded = s.watcher_state == "degraded";
            states.push(s.watcher_state);
            if degraded {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        states.iter().all(|s| s != "degraded"),
        "not yet available is no failure: {states:?}"
    );
    w.finalize();
    w.daemon
        .wait_for(i.id, "paid once the block is there", |r| {
            r.status == Status::Paid
        })
        .await;
}

/// A node without long-term storage keeps about two days of slots; a
/// watcher down longer asks for slots it cleaned up. agave then lists
/// produced slots only from its first available block and answers
/// `getBlock` below it with `-32001 … cleaned up`. Payments in the gap
/// would be lost silently if the watcher skipped ahead, so it halts and
/// names the gap instead of retrying forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_behind_the_nodes_retention_halts_naming_the_gap() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.order("retention", "100").await;
    let start = w.node.slots().1;
    w.daemon.wait_cursor(start).await;
    w.daemon.stop().await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    for _ in 0..40 {
        w.confirm();
    }
    w.finalize();
    let first = w.node.slots().1 - 10;
    w.node.forget_below(first);

    w.daemon.start_again().await;
    let s = w.daemon.wait_chain_state("halted").await;
    let e = s.last_error.unwrap_or_default();
    assert!(
        e.contains(&format!("first available block is {first}")) && e.contains("history"),
        "the halt names the gap and the remedy: {e}"
    );
    assert_eq!(
        w.daemon.count("SELECT COUNT(*) FROM settlements").await,
        0,
        "nothing past the gap was taken as complete"
    );
}

/// After that halt an operator with no node holding the history may accept
/// the gap: the watcher resumes at the node's first available slot, a
/// payment after it is paid, the one inside it is never seen, and the gap
/// stays on record with who accepted it and why. Only a halted watcher's
/// gap is accepted, and only one that skips something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_gap_resumes_at_the_nodes_first_slot_and_stays_on_record() {
    use paywatch::store::GapRefusal;
    use paywatch_core::Network;

    // On PostgreSQL: the retention halt above runs on SQLite.
    let mut w = solana_world(SolanaOptions {
        backend: Backend::Postgres,
        ..SolanaOptions::default()
    })
    .await;
    let in_gap = w.daemon.order("in-the-gap", "100").await;
    let start = w.node.slots().1;
    w.daemon.wait_cursor(start).await;
    let now = w.daemon.ctx.clock.now_ms();
    let refused = w
        .daemon
        .ctx
        .store
        .accept_gap(Network::Solana, start + 100, "ops-alice", "retention", now)
        .await
        .unwrap();
    assert!(
        matches!(refused, Err(GapRefusal::NotHalted { .. })),
        "a watcher that did not halt never skips: {refused:?}"
    );
    w.daemon.stop().await;
    w.pay_sol(&in_gap.address, SOL_FOR_100_USD);
    for _ in 0..40 {
        w.confirm();
    }
    w.finalize();
    let first = w.node.slots().1 - 10;
    w.node.forget_below(first);

    w.daemon.start_again().await;
    let halted = w.daemon.wait_chain_state("halted").await;
    let cursor = halted.cursor_height.expect("a cursor before the gap");
    let e = halted.last_error.unwrap_or_default();
    assert!(
        e.contains(&format!(
            "paywatch chain accept-gap --network solana --resume-at {first}"
        )),
        "the halt names the way to accept the gap: {e}"
    );
    let store = w.daemon.ctx.store.clone();
    for (resume_at, by, reason) in [(cursor + 1, "ops-alice", "x"), (first, "ops-alice", " ")] {
        let refused = store
            .accept_gap(Network::Solana, resume_at, by, reason, now)
            .await
            .unwrap();
        assert!(
            matches!(
                refused,
                Err(GapRefusal::NothingSkipped { .. } | GapRefusal::Unexplained)
            ),
            "{refused:?}"
        );
    }
    let gap = store
        .accept_gap(
            Network::Solana,
            first,
            "ops-alice",
            "node retention passed; no archive provider",
            now,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((gap.from_height, gap.to_height), (cursor + 1, first - 1));

    w.daemon.stop().await;
    w.daemon.start_again().await;
    // Until the watcher runs again no address is issued on its network.
    w.daemon.wait_chain_state("running").await;
    let after = w.daemon.order("after-the-gap", "100").await;
    w.pay_sol(&after.address, SOL_FOR_100_USD);
    w.settle();
    w.daemon
        .wait_for(after.id, "paid past the gap", |r| r.status == Status::Paid)
        .await;
    let store = w.daemon.ctx.store.clone();
    let status = store.chain_status(Network::Solana).await.unwrap().unwrap();
    assert_eq!(status.watcher_state, "running");
    assert!(status.cursor_height.is_some_and(|c| c >= first));
    assert_eq!(
        w.daemon.intent(in_gap.id).await.amount_pending,
        Amount(0),
        "the payment inside the gap was never seen"
    );
    assert_eq!(
        store.chain_gaps(Network::Solana).await.unwrap(),
        vec![gap],
        "the gap stays on record"
    );
}

/// Public endpoints allow about 100 MB per 30 s, and a mainnet block read
/// with `transactionDetails: "full"` is several MB of instructions and
/// logs paywatch never reads. Blocks are asked as account lists (keys,
/// balances, token balances: all a payment is read from), gzip-compressed,
/// and a payment is still found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_are_read_as_compressed_account_lists() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.order("lists", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.settle();
    w.daemon
        .wait_for(i.id, "paid from an account list", |r| {
            r.status == Status::Paid
        })
        .await;
    let asked = w.node.block_details_asked();
    assert!(asked.iter().any(|d| d == "accounts"), "{asked:?}");
    assert!(
        asked.iter().all(|d| d == "accounts" || d == "none"),
        "no block read whole: {asked:?}"
    );
    // The double compresses what is above 256 bytes for a client that asks,
    // as a provider's front end does; a block with a transaction is above it.
    eprintln!(
        "{} requests, {} bytes sent, {} responses compressed",
        w.node.requests(),
        w.node.bytes_sent(),
        w.node.gzipped_responses()
    );
    assert!(
        w.node.gzipped_responses() > 0,
        "paywatch asks for gzip and takes it"
    );
}

/// Public endpoints budget calls per method (40 per 10 s each on
/// api.mainnet-beta) and a new slot comes every 400 ms, so a watcher that
/// follows the tip must read each new block once and spend few calls
/// besides. One watcher step (a batch towards the tip, then the final
/// height check) at a time, one new block per step: each body is read
/// once, with at most two `getBlock` and seven calls in all per block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_the_tip_reads_each_new_block_once_and_few_calls_besides() {
    use paywatch_core::{CanonicalStream, WatchSet};
    use paywatch_solana::{watch_key, SolanaConfig, SolanaSource};

    use paywatch_testkit::SolanaNode;

    let mut node = SolanaNode::start(SolanaNodeOptions::default())
        .await
        .unwrap();
    for _ in 0..3 {
        node.produce_block();
    }
    let watch =
        std::sync::Arc::new(WatchSet::new(paywatch_core::Network::Solana).keyed(watch_key()));
    let source = SolanaSource::new(
        SolanaConfig {
            url: node.url(),
            max_requests_per_second: 0,
            ..SolanaConfig::default()
        },
        watch,
    )
    .unwrap();
    let mut stream = CanonicalStream::new(source, Vec::new(), 0, 32);
    // Catch up, and one idle step so nothing of catching up is counted.
    step(&mut stream).await;
    step(&mut stream).await;
    assert_eq!(
        stream.cursor_tip().map(|t| t.height),
        Some(node.slots().1),
        "caught up"
    );

    let before = node.calls();
    let details_before = node.block_details_asked().len();
    const BLOCKS: u64 = 10;
    let mut connected = 0;
    for _ in 0..BLOCKS {
        node.produce_block();
        connected += step(&mut stream).await;
    }
    assert_eq!(connected, BLOCKS as usize, "one connect per new block");
    assert_eq!(stream.cursor_tip().map(|t| t.height), Some(node.slots().1));

    let after = node.calls();
    let spent: std::collections::BTreeMap<&str, u64> = after
        .iter()
        .map(|(m, n)| (m.as_str(), n - before.get(m).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let bodies = node.block_details_asked()[details_before..]
        .iter()
        .filter(|d| *d == "accounts")
        .count();
    assert_eq!(bodies, BLOCKS as usize, "each body read once: {spent:?}");
    let get_block = spent.get("getBlock").copied().unwrap_or(0);
    assert!(
        get_block <= 2 * BLOCKS,
        "{get_block} getBlock calls for {BLOCKS} blocks: {spent:?}"
    );
    let total: u64 = spent.values().sum();
    assert!(
        total <= 7 * BLOCKS,
        "{total} calls for {BLOCKS} blocks: {spent:?}"
    );
    eprintln!("calls for {BLOCKS} new blocks, one per step: {spent:?}");
}

/// One watcher step: a batch towards the tip, then the final-height check.
async fn step(stream: &mut paywatch_core::CanonicalStream<paywatch_solana::SolanaSource>) -> usize {
    let events = stream.next_batch(100).await.unwrap();
    stream.confirmed_final_height().await.unwrap();
    events.len()
}

/// The watcher's states (with the error of any but "running"), sampled
/// until intent `id` is paid (or a minute and a half has passed), with
/// whether it was paid.
async fn states_until_paid(w: &common::solana::SolanaWorld, id: i64) -> (Vec<String>, bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut states: Vec<String> = Vec::new();
    while std::time::Instant::now() < deadline {
        if let Some(s) = w
            .daemon
            .ctx
            .store
            .chain_status(paywatch_core::Network::Solana)
            .await
            .unwrap()
        {
            let state = match s.watcher_state.as_str() {
                "running" => s.watcher_state.clone(),
                other => format!("{other}: {}", s.last_error.unwrap_or_default()),
            };
            let halted = state.starts_with("halted");
            if states.last() != Some(&state) {
                states.push(state);
            }
            if halted {
                return (states, false);
            }
        }
        if w.daemon.intent(id).await.status == Status::Paid {
            return (states, true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (states, false)
}

/// Issue 37 item 1: a node of a newer agave commits into every block a
/// failed transaction whose error variant paywatch's Solana types do not
/// know. Such a block was unreadable, the watcher retried it forever, and
/// a SOL payment beside it was never seen. The failure reads as failed,
/// and the payment is paid, on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sol_payment_is_paid_while_every_block_holds_a_failure_of_an_unknown_variant() {
    let mut w = solana_world(SolanaOptions {
        backend: Backend::Postgres,
        ..SolanaOptions::default()
    })
    .await;
    w.node.set_unknown_failures(true);
    let i = w.daemon.order("unknown-failure", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    // A failing transfer to the intent's own address: only the fee moves.
    let failing = paywatch_testkit::SolanaNode::dev(2);
    w.node
        .send_sol_failing(&failing, &address(&i.address))
        .unwrap();
    w.settle();
    let (states, paid) = states_until_paid(&w, i.id).await;
    assert!(paid, "the payment is seen: {states:?}");
    assert!(
        states.iter().all(|s| !s.starts_with("degraded")),
        "an unknown failure makes no block unreadable: {states:?}"
    );
    assert_eq!(w.daemon.intent(i.id).await.amount_final, SOL_100);
    w.daemon.assert_money_rules().await;
}

/// Issue 37 item 11: a provider whose `getBlock` backend trails its
/// `getSlot` backend by a block answers "not yet" (-32014) for the newest
/// slot, always. The watcher called that degraded and backed off, and by
/// its next try the newest slot had moved: it never started, and a SOL
/// payment stayed awaiting. The newest block served is the tip: the
/// watcher starts, is never degraded, and the payment is paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_backend_trailing_the_slot_backend_lets_the_watcher_start_and_pay() {
    let mut w = solana_world(SolanaOptions {
        fault: SolanaFault::BlockBackendTrails,
        ..SolanaOptions::default()
    })
    .await;
    let i = w.daemon.order("trailing", "100").await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    w.settle();
    let (states, paid) = states_until_paid(&w, i.id).await;
    assert!(paid, "the payment is seen: {states:?}");
    assert!(
        states.iter().all(|s| s == "running" || s == "starting: "),
        "never degraded: {states:?}"
    );
    assert!(matches!(w.node.fault(), SolanaFault::BlockBackendTrails));
    w.daemon.assert_money_rules().await;
}

/// Issue 37 item 2: behind a load balancer, a backend just restored from a
/// snapshot answers slots older than it "cleaned up" (-32001), lists
/// produced slots from its first one, and says so by
/// `getFirstAvailableBlock`, while the other backends still hold them. One
/// such answer halted the watcher and advised `accept-gap`, and an operator
/// following it would give up the payment in those slots. The watcher
/// reads on from the backends that have them, never halts, and the payment
/// made while it was down is paid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_restored_backend_saying_slots_are_gone_does_not_halt_the_watcher() {
    let mut w = solana_world(SolanaOptions::default()).await;
    let i = w.daemon.order("restored-backend", "100").await;
    let start = w.node.slots().1;
    w.daemon.wait_cursor(start).await;
    w.daemon.stop().await;
    w.pay_sol(&i.address, SOL_FOR_100_USD);
    for _ in 0..40 {
        w.confirm();
    }
    w.finalize();
    w.node.set_fault(SolanaFault::RestoredBackend {
        first_available: w.node.slots().1 - 10,
        backends: 3,
    });

    w.daemon.start_again().await;
    let (states, paid) = states_until_paid(&w, i.id).await;
    assert!(
        states.iter().all(|s| !s.starts_with("halted")),
        "one backend's word is no gap: {states:?}"
    );
    assert!(
        states.iter().all(|s| !s.contains("accept-gap")),
        "accept-gap is offered only for a confirmed gap: {states:?}"
    );
    assert!(
        paid,
        "the payment in the slots it lacks is seen: {states:?}"
    );
    w.daemon.assert_money_rules().await;
}

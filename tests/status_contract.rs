//! The intent status contract, scenario by scenario, on the scripted chain,
//! against SQLite and PostgreSQL both.

mod common;

use common::{Backend, Harness};
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Amount, Asset, Network};

macro_rules! on_both_databases {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Backend::Sqlite).await })+
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Backend::Postgres).await })+
        }
    };
}

on_both_databases!(
    exact_payment_is_confirming_then_paid_once_final,
    topup_is_credited_once_final_and_not_before,
);

/// BTC with 3 confirmations: 100 USD at 50,000 USD/BTC is 200,000 sat.
async fn exact_payment_is_confirming_then_paid_once_final(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 3).await;
    h.import_pool(3).await;
    let intent = h.create("order", "order-1", "BTC", "100").await;
    assert_eq!(intent.amount_due, Amount(200_000));
    assert_eq!(intent.status, Status::AwaitingPayment);

    h.pay(&intent.address, Asset::Btc, intent.amount_due);
    h.mine(1);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.status, Status::Confirming);
    assert_eq!(i.amount_pending, Amount(200_000));
    assert_eq!(i.paid_at_ms, None);

    h.mine(2);
    h.sync().await;
    let i = h.intent(intent.id).await;
    assert_eq!(i.status, Status::Paid);
    assert_eq!(i.exception, None);
    assert_eq!(i.amount_final, Amount(200_000));
    assert!(i.paid_at_ms.is_some());
    assert_eq!(
        h.store
            .settled_intent(paywatch::IntentKind::Order, "order-1")
            .await
            .unwrap(),
        Some(intent.id)
    );

    // Nothing more happens on later blocks: paid once.
    h.mine(5);
    h.sync().await;
    assert_eq!(h.count("SELECT COUNT(*) FROM settlements").await, 1);
    assert_eq!(
        h.count("SELECT COUNT(*) FROM outbox WHERE intent_id IS NOT NULL")
            .await,
        2
    );
}

async fn topup_is_credited_once_final_and_not_before(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(2).await;
    let intent = h.create("topup", "topup-1", "USDT", "500").await;
    assert_eq!(intent.amount_due, Amount(500_000_000));
    h.pay(&intent.address, Asset::Usdt, intent.amount_due);
    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Confirming);
    assert_eq!(h.balance("acct-1").await, 0, "pending top-ups do not count");

    h.mine(1);
    h.sync().await;
    assert_eq!(h.intent(intent.id).await.status, Status::Paid);
    assert_eq!(h.balance("acct-1").await, 50_000);
    h.mine(3);
    h.sync().await;
    assert_eq!(h.balance("acct-1").await, 50_000, "credited exactly once");
    let _ = Exception::Overpaid;
}

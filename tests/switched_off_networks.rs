//! A network switched off while its intents are still open leaves their
//! payments unseen, with every alert on that network gone quiet with its
//! metrics (issue 21, found 8): start-up refuses it, naming the network,
//! unless the operator says so for that network; the open intents stay in
//! the scrape either way.

#[macro_use]
mod common;

use std::time::Duration;

use common::{Backend, TestDb};
use paywatch::app::{self, AppError, Context};
use paywatch::settings::Settings;

/// Litecoin on its dev chain; bitcoin off, as `leave` says.
async fn context(db: &TestDb, leave: bool) -> Context {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db.url.clone();
    s.devchain.enabled = true;
    let ltc = s.networks.get_mut("litecoin").expect("litecoin settings");
    ltc.enabled = true;
    ltc.source = "devchain".into();
    let btc = s.networks.get_mut("bitcoin").expect("bitcoin settings");
    btc.enabled = false;
    btc.leave_open_intents_unwatched = leave;
    Context::build(s).await.expect("context builds")
}

async fn a_network_switched_off_with_open_intents_is_refused_at_start_unless_the_operator_says_so(
    b: Backend,
) {
    let db = TestDb::new(b).await;
    // A bitcoin order a customer may still pay, made while bitcoin was on.
    db.store
        .execute_raw(
            "INSERT INTO intents (kind, reference, account, asset, network, address, decimals, \
             amount_due, usd_cents, rate_usd, rate_source, rate_at, created_at, expires_at, \
             status, updated_at) VALUES ('order', 'o-1', 'acct', 'BTC', 'bitcoin', \
             'bc1qopen', 8, 100000, 5000, '50000', 'fixed', 1, 1, 9999999999999, \
             'awaiting_payment', 1)",
        )
        .await
        .unwrap();

    let refused = tokio::time::timeout(
        Duration::from_secs(20),
        app::run_until(context(&db, false).await, std::future::pending()),
    )
    .await
    .expect("refused at once");
    match refused {
        Err(e @ AppError::OpenIntentsUnwatched { .. }) => {
            let shown = e.to_string();
            assert!(
                shown.contains("networks.bitcoin is not enabled")
                    && shown.contains("1 intents")
                    && shown.contains("networks.bitcoin.leave_open_intents_unwatched = true"),
                "{shown}"
            );
        }
        other => panic!("a switched-off network with an open intent must be refused: {other:?}"),
    }

    // Said so: it runs, and the open intent stays in the scrape.
    let ctx = context(&db, true).await;
    let open = ctx.store.open_intents_by_network().await.unwrap();
    assert_eq!(open, [("bitcoin".to_owned(), 1)]);
    tokio::time::timeout(
        Duration::from_secs(20),
        app::run_until(ctx, tokio::time::sleep(Duration::from_millis(500))),
    )
    .await
    .expect("stops")
    .expect("runs when the operator says so");
}

on_both_databases!(
    a_network_switched_off_with_open_intents_is_refused_at_start_unless_the_operator_says_so
);

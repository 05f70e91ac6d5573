//! Configuration agreement (issue 21, found 8): the money settings are
//! pinned per network; an instance configured otherwise is refused, naming
//! the difference; `paywatch config apply` puts new ones in force, fences
//! the lease so the old holder writes nothing more, and makes raised
//! confirmations apply to money counted final but not yet settled, while
//! what settled stays settled.

#[macro_use]
mod common;

use std::path::Path;

use common::{Backend, Harness};
use paywatch::money_settings::{agree_at_start, apply, AgreementError};
use paywatch::reconcile::Status;
use paywatch::settings::Settings;
use paywatch_core::{Asset, Network};

on_both_databases!(
    an_instance_with_other_money_settings_is_refused_naming_the_difference,
    raised_confirmations_hold_back_unsettled_money_and_leave_settled_money_settled,
);

fn settings(dir: &Path, db_url: &str, confirmations: u64) -> Settings {
    let file = dir.join(format!("paywatch-{confirmations}.toml"));
    std::fs::write(
        &file,
        format!(
            r#"
[database]
url = "{db_url}"

[rates.fixed]
BTC = "50000"

[networks.bitcoin]
enabled = true
source = "devchain"
confirmations = {confirmations}

[devchain]
enabled = true
"#
        ),
    )
    .unwrap();
    Settings::load(Some(file.to_str().unwrap())).expect("settings load")
}

async fn an_instance_with_other_money_settings_is_refused_naming_the_difference(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::new(backend, Network::Bitcoin, 2).await;
    let two = settings(dir.path(), &h.db.url, 2);
    let six = settings(dir.path(), &h.db.url, 6);
    assert_ne!(two.config_hash, six.config_hash);

    agree_at_start(&h.store, &two, "first", 1_000)
        .await
        .unwrap();
    agree_at_start(&h.store, &two, "second", 2_000)
        .await
        .expect("the same settings agree");
    let refused = agree_at_start(&h.store, &six, "stale", 3_000)
        .await
        .unwrap_err();
    assert!(matches!(refused, AgreementError::Differs { .. }));
    let said = refused.to_string();
    assert!(
        said.contains("networks.bitcoin")
            && said.contains("confirmations: 2 → 6")
            && said.contains("applied by first (first start)")
            && said.contains("paywatch config apply"),
        "{said}"
    );
    let instances = h.store.instances().await.unwrap();
    let names: Vec<&str> = instances.iter().map(|i| i.0.as_str()).collect();
    assert_eq!(names, ["first", "second", "stale"]);
    assert!(instances.iter().all(|i| i.1 == env!("CARGO_PKG_VERSION")));
    assert_eq!(instances[2].2, six.config_hash);
}

async fn raised_confirmations_hold_back_unsettled_money_and_leave_settled_money_settled(
    backend: Backend,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(backend, Network::Bitcoin, 2).await;
    h.import_pool(10).await;
    let two = settings(dir.path(), &h.db.url, 2);
    agree_at_start(&h.store, &two, "old", 1_000).await.unwrap();

    // Settled under two confirmations.
    let settled = h.create("order", "settled", "BTC", "100").await;
    h.pay(&settled.address, Asset::Btc, settled.amount_due);
    h.mine(2);
    h.sync().await;
    assert_eq!(h.intent(settled.id).await.status, Status::Paid);

    // Counted final under two confirmations, not yet reconciled: the
    // watcher recorded it, reconcile has not run.
    let pending = h.create("order", "pending", "BTC", "100").await;
    h.pay(&pending.address, Asset::Btc, pending.amount_due);
    h.mine(2);
    h.follow_chain().await;
    let lease = h
        .store
        .try_acquire_lease(Network::Bitcoin, "old", 60_000)
        .await
        .unwrap()
        .expect("lease");

    // The operator raises confirmations to six.
    let six = settings(dir.path(), &h.db.url, 6);
    let applied = apply(&h.store, &six, "ops", 2_000).await.unwrap();
    assert_eq!(applied[0].differences, ["confirmations: 2 → 6"]);
    assert_eq!(applied[0].final_height_lowered_by, Some(4));
    assert!(
        !h.store.renew_lease(&lease, 60_000).await.unwrap(),
        "the old holder is fenced out"
    );
    assert!(matches!(
        agree_at_start(&h.store, &two, "old", 3_000).await,
        Err(AgreementError::Differs { .. })
    ));
    agree_at_start(&h.store, &six, "new", 3_000).await.unwrap();

    // The new holder watches with six confirmations.
    h.chain.set_confirmations(6);
    h.sync().await;
    assert_eq!(
        h.intent(pending.id).await.status,
        Status::Confirming,
        "two confirmations no longer settle"
    );
    assert_eq!(h.intent(settled.id).await.status, Status::Paid);
    h.mine(4);
    h.sync().await;
    assert_eq!(h.intent(pending.id).await.status, Status::Paid);
    let settled_history = h.status_history(settled.id).await;
    assert_eq!(
        settled_history.last().map(String::as_str),
        Some("paid"),
        "{settled_history:?}"
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM settlements WHERE reversed_at IS NOT NULL")
            .await,
        0,
        "nothing settled was reversed"
    );
}

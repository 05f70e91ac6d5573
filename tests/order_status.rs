//! One answer per order or top-up (issue 20, found 3): two tabs may give
//! two intents, and the storefront still reads one row that says whether
//! the order is paid, how, for how much, and what is still open; and a
//! reference belongs to one account.

#[macro_use]
mod common;

use common::{Backend, Harness};
use paywatch::intents::IntentError;
use paywatch_core::{Asset, Network};

on_both_databases!(
    an_order_has_one_answer_however_many_intents_it_had,
    a_reference_another_account_used_is_refused_and_issues_nothing
);

async fn an_order_has_one_answer_however_many_intents_it_had(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(2).await;
    let first_tab = h.create("order", "two-tabs", "BTC", "100").await;
    let second_tab = h.create("order", "two-tabs", "BTC", "100").await;
    assert_ne!(first_tab.address, second_tab.address);
    let row = h
        .row(
            "SELECT CAST(paid AS BIGINT) AS paid, CAST(open_intent_count AS BIGINT) AS open, \
             usd_due_cents, latest_reason_code, paid_asset, updated_at_ms FROM paywatch_payment_status \
             WHERE kind = 'order' AND reference = 'two-tabs'",
        )
        .await;
    assert_eq!(
        (row.int("paid"), row.int("open"), row.int("usd_due_cents")),
        (0, 2, 10_000)
    );
    assert_eq!(row.get("latest_reason_code"), Some("awaiting_payment"));
    assert_eq!(row.get("paid_asset"), None);
    let before = row.int("updated_at_ms");

    h.pay(&first_tab.address, Asset::Btc, first_tab.amount_due);
    h.mine(1);
    h.sync().await;
    let row = h
        .row(
            "SELECT CAST(paid AS BIGINT) AS paid, paid_intent_id, paid_asset, paid_network, \
             paid_via, payment_status, updated_at_ms FROM paywatch_payment_status \
             WHERE account = 'acct-1'",
        )
        .await;
    assert_eq!(row.int("paid"), 1, "{row:?}");
    assert_eq!(row.int("paid_intent_id"), first_tab.id);
    assert_eq!(
        (
            row.get("paid_asset"),
            row.get("paid_network"),
            row.get("paid_via"),
            row.get("payment_status")
        ),
        (Some("BTC"), Some("bitcoin"), Some("chain"), Some("paid"))
    );
    assert!(
        row.int("updated_at_ms") > before,
        "a reader polling by updated_at_ms sees the change: {row:?}"
    );
}

async fn a_reference_another_account_used_is_refused_and_issues_nothing(b: Backend) {
    let h = Harness::new(b, Network::Bitcoin, 1).await;
    let mut h = h;
    h.import_pool(2).await;
    h.create("order", "mine", "BTC", "100").await;
    let mut theirs = h.request("order", "mine", "BTC", "100");
    theirs.account = "acct-2".into();
    let refused = h.intents.create(&theirs).await.unwrap_err();
    assert!(
        matches!(refused, IntentError::ReferenceOfAnotherAccount { .. }),
        "{refused}"
    );
    assert_eq!(refused.code(), "conflict");
    assert!(refused.to_string().contains("another account"), "{refused}");
    assert_eq!(
        h.count("SELECT COUNT(*) FROM intents WHERE reference = 'mine'")
            .await,
        1
    );
    assert_eq!(
        h.count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL")
            .await,
        1,
        "no address was taken for the refused intent"
    );
}

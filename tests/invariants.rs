//! The money-rule checker (`paywatch check`, `Store::check_invariants`)
//! against real ledgers: it passes what reconcile writes, credits and
//! reversals alike, and names every row of a ledger that breaks a rule.

#[macro_use]
mod common;

use common::{Backend, Harness};
use paywatch::reconcile::Status;
use paywatch_core::{Asset, Network};

on_both_databases!(
    the_checker_passes_credits_and_reversals_and_names_a_double_credit,
    the_checker_names_a_settled_top_up_without_its_credit,
    the_checker_names_a_settlement_short_of_its_own_terms_and_one_standing_on_money_owed_back,
);

async fn the_checker_passes_credits_and_reversals_and_names_a_double_credit(b: Backend) {
    let mut h = Harness::new(b, Network::Ethereum, 2).await;
    h.import_pool(2).await;
    h.mine(3);
    h.sync().await;
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(check.ledger_topup_cents, 0);

    let topup = h.create("topup", "inv-1", "USDT", "500").await;
    h.pay(&topup.address, Asset::Usdt, topup.amount_due);
    h.mine(2);
    h.sync().await;
    assert_eq!(h.intent(topup.id).await.status, Status::Paid);
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(
        (check.ledger_topup_cents, check.settled_topup_cents),
        (50_000, 50_000)
    );

    // A reorg after finality takes the credit back: still consistent.
    h.mine(1);
    h.sync().await;
    h.chain.reorg(3);
    h.mine(3);
    assert_eq!(h.sync().await.reversed, 1);
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    assert_eq!(
        (check.ledger_topup_cents, check.settled_topup_cents),
        (0, 0)
    );

    // A second credit for the same intent, as a double-crediting bug would
    // post it under another key.
    h.store
        .execute_raw(&format!(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, intent_id, \
             created_at) VALUES ('acct-1', 50000, 'topup_credit', 'bug:{0}', {0}, 0)",
            topup.id
        ))
        .await
        .unwrap();
    let check = h.store.check_invariants().await.unwrap();
    let rules: Vec<&str> = check.violations.iter().map(|v| v.rule).collect();
    assert_eq!(
        rules,
        [
            "a top-up credited at most once net, and only while it stands",
            "the ledger's top-up sum equals the settled top-ups'"
        ],
        "{:?}",
        check.violations
    );
    assert_eq!(
        check.violations[0].detail,
        format!(
            "intent {}: credits less reversals come to 50000 cents of 50000, reversed",
            topup.id
        )
    );
    assert_eq!(
        check.violations[1].detail,
        "ledger 50000 cents, settled top-ups 0 cents"
    );
}

async fn the_checker_names_a_settled_top_up_without_its_credit(b: Backend) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let topup = h.create("topup", "inv-2", "BTC", "100").await;
    // A settlement written without its credit, as a crash between two
    // transactions would leave it if the two were not one.
    h.store
        .execute_raw(&format!(
            "INSERT INTO settlements (kind, reference, intent_id, account, usd_cents, settled_at) \
             VALUES ('topup', 'inv-2', {}, 'acct-1', 10000, 0)",
            topup.id
        ))
        .await
        .unwrap();
    let check = h.store.check_invariants().await.unwrap();
    let named: Vec<(&str, &str)> = check
        .violations
        .iter()
        .map(|v| (v.rule, v.detail.as_str()))
        .collect();
    let expected = format!("intent {} settled inv-2 with no credit", topup.id);
    assert_eq!(
        named,
        [
            ("every standing settled top-up credited", expected.as_str()),
            (
                "the ledger's top-up sum equals the settled top-ups'",
                "ledger 0 cents, settled top-ups 10000 cents"
            )
        ]
    );
}

/// What a settlement stands on is named (issue 36): the checker reads the
/// names against the settlement's own terms, and against what support owes
/// back.
async fn the_checker_names_a_settlement_short_of_its_own_terms_and_one_standing_on_money_owed_back(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let topup = h.create("topup", "inv-3", "BTC", "100").await;
    let txid = h.pay(&topup.address, Asset::Btc, topup.amount_due);
    h.mine(2);
    h.sync().await;
    assert_eq!(h.intent(topup.id).await.status, Status::Paid);
    let check = h.store.check_invariants().await.unwrap();
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    let named = h
        .rows(&format!(
            "SELECT txid, CAST(amount AS TEXT) AS amount FROM settlement_payments \
             WHERE intent_id = {}",
            topup.id
        ))
        .await;
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named[0].get("txid"), Some(txid.as_str()));
    assert_eq!(
        named[0].get("amount"),
        Some(topup.amount_due.0.to_string().as_str())
    );

    // Named short of what the settlement's own tolerance (none) asks.
    h.store
        .execute_raw("UPDATE settlement_payments SET amount = 1")
        .await
        .unwrap();
    let check = h.store.check_invariants().await.unwrap();
    let expected = format!(
        "intent {} stands settled on 1 base units named, under the {} its own tolerance asks",
        topup.id, topup.amount_due.0
    );
    assert_eq!(
        check
            .violations
            .iter()
            .map(|v| (v.rule, v.detail.as_str()))
            .collect::<Vec<_>>(),
        [(
            "a settlement by the chain stands on named payments reaching its own terms",
            expected.as_str()
        )]
    );

    // A refund claims the payment the settlement is named as standing on,
    // as a writer that did not name it again would leave it.
    h.store
        .execute_raw(&format!(
            "UPDATE settlement_payments SET amount = '{}'",
            topup.amount_due.0
        ))
        .await
        .unwrap();
    for sql in [
        format!(
            "INSERT INTO audit_log (at, role, actor, action, intent_id, note, action_key) \
             VALUES (1, 'support', 'ana', 'refund_required', {}, 'tampered', 'k-owed')",
            topup.id
        ),
        format!(
            "INSERT INTO decisions (intent_id, action, audit_id, at, amount) \
             SELECT {}, 'refund_required', id, 1, '0' FROM audit_log WHERE action_key = 'k-owed'",
            topup.id
        ),
        "INSERT INTO decision_payments (decision_id, network, txid, idx, asset, amount, claims) \
         SELECT d.id, sp.network, sp.txid, sp.idx, sp.asset, sp.amount, 1 \
         FROM settlement_payments sp, decisions d"
            .to_owned(),
    ] {
        h.store.execute_raw(&sql).await.unwrap();
    }
    let check = h.store.check_invariants().await.unwrap();
    let rules: Vec<&str> = check.violations.iter().map(|v| v.rule).collect();
    assert!(
        rules.contains(&"no payment owed back stands under a settlement"),
        "{:?}",
        check.violations
    );
    let owed = check
        .violations
        .iter()
        .find(|v| v.rule == "no payment owed back stands under a settlement")
        .unwrap();
    assert!(
        owed.detail
            .starts_with(&format!("intent {} stands settled on {txid}:", topup.id))
            && owed.detail.ends_with("(refund_required) gave away"),
        "{}",
        owed.detail
    );
}

//! Issue 18, case 12: the API against its own contract. Schemathesis runs
//! from `openapi/v1.json` against a live API once per role's token, on
//! realistic data: no 5xx, no answer outside the document, no request the
//! document forbids accepted.
//!
//! Bounded here (a few examples per operation); the long run is
//! `PAYWATCH_CONTRACT_EXAMPLES=500 cargo test --all-features -p paywatch
//! --test api_contract -- --nocapture` (README, "Tests").

#[macro_use]
mod common;

use common::api::{OPERATOR, STOREFRONT, SUPPORT};
use common::contract::World;
use common::schemathesis::Run;
use common::Backend;

/// Examples per operation and role in the bounded run.
const BOUNDED_EXAMPLES: u32 = 50;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

on_both_databases!(every_role_gets_only_what_the_document_says);

async fn every_role_gets_only_what_the_document_says(b: Backend) {
    let world = World::new(b).await;
    let base = world.client.base.clone();
    let max_examples = env_or("PAYWATCH_CONTRACT_EXAMPLES", BOUNDED_EXAMPLES);
    let seed = env_or("PAYWATCH_CONTRACT_SEED", 18_12u64);
    let mut failed = Vec::new();
    for (role, token) in [
        ("storefront", STOREFRONT),
        ("operator", OPERATOR),
        ("support", SUPPORT),
    ] {
        let base = base.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            Run {
                base: &base,
                token,
                max_examples,
                seed,
                extra: &[],
            }
            .run()
        })
        .await
        .unwrap();
        println!(
            "==== schemathesis as {role} ({b:?}, {max_examples} examples, {:.0?}) ====\n{}",
            outcome.took, outcome.output
        );
        if !outcome.passed {
            failed.push(role);
        }
    }
    drop(world);
    assert!(
        failed.is_empty(),
        "schemathesis found failures as {failed:?} (output above)"
    );
}

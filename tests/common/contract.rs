//! A live API with every role's token over realistic data, for the
//! contract run (tests/api_contract.rs): every dev network enabled with a
//! pool of its own, intents awaiting payment on each, a paid order, a paid
//! top-up partly spent, and a late payment waiting in the review queue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use paywatch::clock::Clock;
use paywatch::intents::{FixedRates, IntentPolicy, IntentService, RateBook};
use paywatch_core::{Asset, Network, WatchSet};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::api::{context_with_role_tokens, ApiClient, STOREFRONT};
use super::{fake_address, rates, Backend, Harness};

/// Addresses per network: enough that the fuzzer's creates rarely drain a
/// pool, few enough that it may (pool_exhausted is part of the contract).
const POOL: u64 = 300;

pub struct World {
    /// The scripted Litecoin chain and the database behind the API.
    pub h: Harness,
    pub client: ApiClient,
}

impl World {
    pub async fn new(b: Backend) -> World {
        let mut h = Harness::new(b, Network::Litecoin, 1).await;
        h.import_pool(POOL as usize).await;
        let mut ctx = context_with_role_tokens(&h);
        let now = h.clock.now_ms();
        let mut watch = HashMap::from([(Network::Litecoin, h.watch.clone())]);
        for n in Network::ALL {
            let ns = ctx
                .settings
                .networks
                .get_mut(n.as_str())
                .expect("every network has settings");
            ns.enabled = true;
            ns.source = "devchain".into();
            if n == Network::Litecoin {
                continue;
            }
            // Far from the harness's own fake addresses, so none repeats.
            let pool: Vec<String> = (0..POOL).map(|i| fake_address(n, 1_000_000 + i)).collect();
            h.store.import_addresses(n, &pool, now).await.unwrap();
            h.store.ensure_chain_state(n, now).await.unwrap();
            watch.insert(n, Arc::new(WatchSet::new(n)));
        }
        let clock: Arc<dyn Clock> = h.clock.clone();
        let policy = IntentPolicy {
            enabled: Network::ALL.into_iter().collect::<HashSet<_>>(),
            expiry_secs: 1800,
            topup_amounts_cents: vec![10_000, 50_000, 200_000, 1_000_000],
            quote_decimals: HashMap::new(),
            confirm_window_secs: HashMap::new(),
            max_open_per_reference: paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE,
        };
        let book = RateBook::new(
            Arc::new(FixedRates::new(rates(), clock.clone())),
            true,
            clock.clone(),
        );
        ctx.intents = IntentService::new(
            h.store.clone(),
            book,
            policy,
            HashMap::new(),
            watch.clone(),
            clock,
        );
        ctx.watch = watch;
        // Schemathesis sends thousands of requests without a token or with
        // a wrong one from this one address; the failed-token throttle
        // would lock it out (its own test is in tests/hostile_callers.rs).
        ctx.settings.api.auth_failures_per_minute = u32::MAX;
        // Schemathesis reads a live status stream to its end: a short one.
        ctx.settings.api.event_stream_secs = 1;
        let client = ApiClient::serve(ctx).await;
        let mut w = World { h, client };
        w.fill().await;
        w
    }

    async fn fill(&mut self) {
        let h = &mut self.h;
        // Settled on Litecoin: an order and a top-up, the top-up partly spent.
        let order = h.create("order", "A-1001", "LTC", "100").await;
        let topup = h.create("topup", "T-2001", "LTC", "500").await;
        for i in [&order, &topup] {
            h.pay(&i.address, Asset::Ltc, i.amount_due);
        }
        h.mine(1);
        h.sync().await;
        // Paid only after it expired: waits in the review queue.
        let late = h.create("order", "A-1002", "LTC", "100").await;
        h.pass_expiry(&late);
        h.sync().await;
        h.pay(&late.address, Asset::Ltc, late.amount_due);
        h.mine(1);
        h.sync().await;
        let (st, v) = self
            .client
            .call(
                Method::POST,
                "/v1/accounts/acct-1/debits",
                Some(STOREFRONT),
                Some("debit-1"),
                Some(json!({"usd_amount": "120", "memo": "order A-1003"}).to_string()),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        // Awaiting payment on every other network, created as a storefront does.
        for (n, (asset, network)) in [
            ("BTC", "bitcoin"),
            ("ETH", "ethereum"),
            ("USDT", "ethereum"),
            ("TRX", "tron"),
            ("USDT", "tron"),
            ("SOL", "solana"),
        ]
        .into_iter()
        .enumerate()
        {
            let body = json!({"kind": "order", "reference": format!("B-{n}"), "account": "acct-2",
                              "asset": asset, "network": network, "usd_amount": "25"});
            let (st, v) = self
                .client
                .call(
                    Method::POST,
                    "/v1/intents",
                    Some(STOREFRONT),
                    Some(&format!("create-{n}")),
                    Some(body.to_string()),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{asset} on {network}: {v}");
        }
    }
}

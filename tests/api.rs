//! The HTTP API's contract, over real HTTP, on SQLite and PostgreSQL: roles
//! on every endpoint, idempotent creates and debits under concurrency, and
//! a clear error code for malformed and hostile input.

#[macro_use]
mod common;

use std::collections::HashSet;

use bitcoin::hashes::{sha256, Hash};
use bitcoin::{Address, ScriptBuf, WPubkeyHash};
use common::api::ApiClient;
use common::{Backend, TestDb};
use paywatch::api::{self, TokenTable};
use paywatch::app::Context;
use paywatch::intents::parse_pool;
use paywatch::settings::Settings;
use paywatch_core::Network;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const STOREFRONT: &str = "shop-token-3f9a";
const OPERATOR: &str = "ops-token-81c2";
const SUPPORT: &str = "help-token-77d0";

struct Api {
    client: ApiClient,
    ctx: Context,
    _db: TestDb,
}

/// `n` distinct mainnet P2WPKH addresses nobody holds a key for.
fn pool(n: u32) -> Vec<String> {
    (0..n)
        .map(|i| {
            let h = sha256::Hash::hash(&i.to_le_bytes());
            let pkh = WPubkeyHash::from_slice(&h[..20]).unwrap();
            Address::from_script(&ScriptBuf::new_p2wpkh(&pkh), bitcoin::Network::Bitcoin)
                .unwrap()
                .to_string()
        })
        .collect()
}

impl Api {
    async fn start(backend: Backend) -> Api {
        let db = TestDb::new(backend).await;
        let mut s = Settings::load(None).expect("defaults load");
        s.database.url = db.url.clone();
        s.rates.fixed.insert("BTC".into(), "50000".into());
        s.api.max_body_bytes = 4096;
        // These tests probe every route with missing and wrong tokens from
        // one address, far more often than a real client fails.
        s.api.auth_failures_per_minute = 10_000;
        for (role, token) in [
            ("storefront", STOREFRONT),
            ("operator", OPERATOR),
            ("support", SUPPORT),
        ] {
            s.api
                .tokens
                .insert(role.into(), vec![TokenTable::hash_token(token)]);
        }
        let n = s.networks.get_mut("bitcoin").expect("bitcoin settings");
        n.enabled = true;
        n.source = "devchain".into();
        s.devchain.enabled = true;
        let ctx = Context::build(s).await.expect("context builds");
        let text = pool(40).join("\n");
        let parsed = parse_pool("pool.txt", &text, Network::Bitcoin).expect("pool parses");
        ctx.store
            .import_addresses(Network::Bitcoin, &parsed, ctx.clock.now_ms())
            .await
            .expect("imported");
        Api {
            client: ApiClient::serve(ctx.clone()).await,
            ctx,
            _db: db,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<String>,
    ) -> (StatusCode, Value) {
        self.client.call(method, path, token, key, body).await
    }

    async fn create(&self, key: Option<&str>, body: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            "/v1/intents",
            Some(STOREFRONT),
            key,
            Some(body.to_string()),
        )
        .await
    }

    async fn count(&self, sql: &str) -> i64 {
        self.ctx.store.count_raw(sql).await.unwrap()
    }
}

fn order(reference: &str) -> Value {
    json!({"kind": "order", "reference": reference, "account": "acct-9",
           "asset": "BTC", "network": "bitcoin", "usd_amount": "50"})
}

fn code(v: &Value) -> &str {
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {v}"))
}

on_both_databases!(
    every_endpoint_checks_its_callers_role,
    a_retried_create_returns_the_same_intent_and_never_a_second_address,
    concurrent_debits_never_spend_the_same_balance_twice,
    malformed_and_hostile_input_gets_a_clear_code_and_writes_nothing,
    a_declared_payment_is_recorded_and_is_no_proof,
);

async fn every_endpoint_checks_its_callers_role(b: Backend) {
    let api = Api::start(b).await;
    let (st, made) = api.create(None, order("roles-1")).await;
    assert_eq!(st, StatusCode::CREATED, "{made}");
    let id = made["id"].as_i64().unwrap();
    // The wallet's URI: BIP21 with the exact coin amount.
    assert_eq!(
        made["payment"]["uri"],
        json!(format!(
            "bitcoin:{}?amount=0.001",
            made["address"].as_str().unwrap()
        ))
    );
    assert_eq!(
        made["payment"]["qr_svg"],
        json!(format!("/v1/intents/{id}/qr.svg"))
    );
    let (st, svg) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{id}/qr.svg"),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, &svg["image"]),
        (StatusCode::OK, &json!("image/svg+xml"))
    );
    let (st, png) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{id}/qr.png"),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!((st, &png["image"]), (StatusCode::OK, &json!("image/png")));
    assert!(png["head"].as_str().unwrap().contains("PNG"), "{png}");

    let debit = json!({"usd_amount": "1"}).to_string();
    // (method, path, body, roles allowed)
    let routes: Vec<(Method, String, Option<String>, Vec<&str>)> = vec![
        (
            Method::POST,
            "/v1/intents".into(),
            Some(order("roles-2").to_string()),
            vec![STOREFRONT],
        ),
        (
            Method::GET,
            format!("/v1/intents/{id}"),
            None,
            vec![STOREFRONT, OPERATOR, SUPPORT],
        ),
        (
            Method::GET,
            format!("/v1/intents/{id}/qr.svg"),
            None,
            vec![STOREFRONT, OPERATOR, SUPPORT],
        ),
        (
            Method::GET,
            format!("/v1/intents/{id}/qr.png"),
            None,
            vec![STOREFRONT, OPERATOR, SUPPORT],
        ),
        (
            Method::GET,
            "/v1/intents?kind=order&reference=roles-1".into(),
            None,
            vec![STOREFRONT, OPERATOR, SUPPORT],
        ),
        (
            Method::POST,
            format!("/v1/intents/{id}/declared-paid"),
            None,
            vec![STOREFRONT],
        ),
        (
            Method::GET,
            "/v1/events?after=0".into(),
            None,
            vec![STOREFRONT, OPERATOR, SUPPORT],
        ),
        (
            Method::GET,
            "/v1/accounts/acct-9/balance".into(),
            None,
            vec![STOREFRONT, SUPPORT],
        ),
        (
            Method::GET,
            "/v1/accounts/acct-9/ledger?after=0".into(),
            None,
            vec![STOREFRONT, SUPPORT],
        ),
        (
            Method::POST,
            "/v1/accounts/acct-9/debits".into(),
            Some(debit),
            vec![STOREFRONT],
        ),
        (
            Method::POST,
            "/v1/networks/bitcoin/rescan".into(),
            Some(json!({"from_height": "0"}).to_string()),
            vec![OPERATOR],
        ),
        (
            Method::GET,
            "/v1/networks/bitcoin/rescans".into(),
            None,
            vec![OPERATOR],
        ),
    ];
    for (method, path, body, allowed) in &routes {
        for token in [STOREFRONT, OPERATOR, SUPPORT] {
            let key = format!("k-{token}-{path}").replace(['/', '?', '&', '='], "_");
            let (st, v) = api
                .call(method.clone(), path, Some(token), Some(&key), body.clone())
                .await;
            if allowed.contains(&token) {
                assert!(
                    st != StatusCode::UNAUTHORIZED && st != StatusCode::FORBIDDEN,
                    "{method} {path} must let {token} in: {st} {v}"
                );
            } else {
                assert_eq!(st, StatusCode::FORBIDDEN, "{method} {path} as {token}: {v}");
                assert_eq!(code(&v), "forbidden");
            }
        }
        for token in [None, Some("not-a-configured-token")] {
            let (st, v) = api
                .call(method.clone(), path, token, Some("k"), body.clone())
                .await;
            assert_eq!(st, StatusCode::UNAUTHORIZED, "{method} {path}: {v}");
            assert_eq!(code(&v), "unauthorized");
        }
    }
    // Refused callers changed nothing: one intent from the first create, one
    // from the storefront's own call in the table.
    assert_eq!(api.count("SELECT COUNT(*) FROM intents").await, 2);

    let (st, v) = api.call(Method::GET, "/healthz", None, None, None).await;
    assert_eq!((st, v["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (st, _) = api.call(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = api
        .call(Method::GET, "/v1/nothing", Some(STOREFRONT), None, None)
        .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));

    // The committed OpenAPI document is what is served, and it documents
    // every route above.
    let (st, served) = api
        .call(Method::GET, "/v1/openapi.json", None, None, None)
        .await;
    assert_eq!(st, StatusCode::OK);
    let committed: Value = serde_json::from_str(api::OPENAPI).unwrap();
    assert_eq!(served, committed);
    for (method, path, _, _) in &routes {
        let templated = path
            .split('?')
            .next()
            .unwrap()
            .replace(&format!("/{id}/"), "/{id}/")
            .replace(&format!("/intents/{id}"), "/intents/{id}")
            .replace("/acct-9/", "/{account}/")
            .replace("/networks/bitcoin/", "/networks/{network}/")
            .replace(&format!("/cases/{id}"), "/cases/{id}");
        let op = &committed["paths"][&templated][method.as_str().to_lowercase()];
        assert!(
            op.is_object(),
            "{method} {templated} is not in openapi/v1.json"
        );
    }
    // Every operation that takes a token can answer 429 once its client
    // address has had too many refused (issue 38: Schemathesis found it
    // undocumented); those that take none never do.
    for (path, ops) in committed["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let takes_token = op["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
            assert_eq!(
                op["responses"].get("429").is_some(),
                takes_token,
                "{method} {path}: 429 documented exactly where a token is taken"
            );
        }
    }
}

async fn a_retried_create_returns_the_same_intent_and_never_a_second_address(b: Backend) {
    let api = Api::start(b).await;
    let mut calls = Vec::new();
    for _ in 0..8 {
        let api = &api;
        calls.push(async move { api.create(Some("order-77-try"), order("order-77")).await });
    }
    let answers = futures_join_all(calls).await;
    let ids: HashSet<i64> = answers
        .iter()
        .map(|(_, v)| v["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "one intent for one key: {answers:?}");
    let created = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(answers
        .iter()
        .all(|(s, _)| *s == StatusCode::CREATED || *s == StatusCode::OK));
    assert_eq!(api.count("SELECT COUNT(*) FROM intents").await, 1);
    assert_eq!(
        api.count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL")
            .await,
        1,
        "a lost race gives its address back"
    );

    // The same key for another request is a conflict, and makes nothing.
    let mut other = order("order-77");
    other["usd_amount"] = json!("51");
    let (st, v) = api.create(Some("order-77-try"), other).await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("new key"),
        "{v}"
    );
    // Without a key, a second create is a second intent at another address.
    let (st, second) = api.create(None, order("order-77")).await;
    assert_eq!(st, StatusCode::CREATED);
    assert_ne!(second["address"], answers[0].1["address"]);
    assert_eq!(
        second["amount_due"],
        json!("100000"),
        "50 USD at 50,000 USD/BTC in sat"
    );
    assert_eq!(second["amount_due_coin"], json!("0.001"));
}

async fn concurrent_debits_never_spend_the_same_balance_twice(b: Backend) {
    let api = Api::start(b).await;
    api.ctx
        .store
        .execute_raw(
            "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, created_at) \
             VALUES ('acct-9', 10000, 'adjustment', 'seed', 0)",
        )
        .await
        .unwrap();
    let mut calls = Vec::new();
    for n in 0..10 {
        let api = &api;
        calls.push(async move {
            api.call(
                Method::POST,
                "/v1/accounts/acct-9/debits",
                Some(STOREFRONT),
                Some(&format!("gpu-{n}")),
                Some(json!({"usd_amount": "30.00", "memo": "gpu rental"}).to_string()),
            )
            .await
        });
    }
    let answers = futures_join_all(calls).await;
    let posted = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CONFLICT)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(posted, 3, "100 USD covers three 30 USD debits: {answers:?}");
    assert_eq!(refused.len(), 7);
    assert!(refused.iter().all(|v| code(v) == "insufficient_balance"));
    assert_eq!(api.ctx.store.balance_cents("acct-9").await.unwrap(), 1000);

    // A retry of a posted debit takes nothing again.
    let winner = answers
        .iter()
        .position(|(s, _)| *s == StatusCode::CREATED)
        .unwrap();
    let (st, v) = api
        .call(
            Method::POST,
            "/v1/accounts/acct-9/debits",
            Some(STOREFRONT),
            Some(&format!("gpu-{winner}")),
            Some(json!({"usd_amount": "30.00"}).to_string()),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["available_usd"], json!("10.00"));
    let (_, bal) = api
        .call(
            Method::GET,
            "/v1/accounts/acct-9/balance",
            Some(SUPPORT),
            None,
            None,
        )
        .await;
    assert_eq!(bal["available_usd_cents"], json!(1000));
    // The same key for another amount is a conflict.
    let (st, v) = api
        .call(
            Method::POST,
            "/v1/accounts/acct-9/debits",
            Some(STOREFRONT),
            Some(&format!("gpu-{winner}")),
            Some(json!({"usd_amount": "5"}).to_string()),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"));
    assert_eq!(
        api.count("SELECT COUNT(*) FROM ledger_entries WHERE entry_kind = 'debit'")
            .await,
        3
    );
}

async fn malformed_and_hostile_input_gets_a_clear_code_and_writes_nothing(b: Backend) {
    let api = Api::start(b).await;
    let with = |field: &str, value: Value| {
        let mut o = order("hostile");
        o[field] = value;
        o.to_string()
    };
    let cases: Vec<(String, StatusCode, &str, &str)> = vec![
        (
            "{not json".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "not JSON",
        ),
        (
            "[1, 2]".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "JSON object",
        ),
        (
            with("usd_amount", json!(50)),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "usd_amount",
        ),
        (
            with("kind", json!(["order"])),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "kind",
        ),
        (
            json!({"kind": "order"}).to_string(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "reference: missing field",
        ),
        (
            with("surprise", json!(1)),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "unknown field 'surprise'",
        ),
        (
            with("usd_amount", json!("-5")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount_invalid",
            "usd_amount",
        ),
        (
            with("usd_amount", json!("10.001")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount_invalid",
            "usd_amount",
        ),
        (
            with(
                "usd_amount",
                json!("99999999999999999999999999999999999999999999"),
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount_invalid",
            "usd_amount",
        ),
        (
            with("usd_amount", json!("1e3")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount_invalid",
            "usd_amount",
        ),
        (
            with("asset", json!("DOGE")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "method_unknown",
            "DOGE",
        ),
        (
            with("network", json!("tron")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "method_unknown",
            "BTC",
        ),
        (
            with("kind", json!("gift")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "kind",
        ),
        (
            with("reference", json!("")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "reference",
        ),
        (
            with("reference", json!("x".repeat(201))),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "reference",
        ),
        (
            with("reference", json!("x".repeat(5000))),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            "max_body_bytes",
        ),
    ];
    for (body, status, want, mentions) in &cases {
        let (st, v) = api
            .call(
                Method::POST,
                "/v1/intents",
                Some(STOREFRONT),
                None,
                Some(body.clone()),
            )
            .await;
        assert_eq!((st, code(&v)), (*status, *want), "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(mentions), "{body}: {message}");
    }
    assert_eq!(api.count("SELECT COUNT(*) FROM intents").await, 0);
    assert_eq!(
        api.count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL")
            .await,
        0,
        "no failed call took an address"
    );

    // SQL metacharacters are data: stored as given, harming nothing.
    let sneaky = "A-1'; DROP TABLE intents; --";
    let (st, v) = api.create(None, order(sneaky)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["reference"], json!(sneaky));
    let path = format!(
        "/v1/intents?kind=order&reference={}",
        sneaky
            .replace(' ', "%20")
            .replace(';', "%3B")
            .replace('\'', "%27")
    );
    let (st, listed) = api
        .call(Method::GET, &path, Some(STOREFRONT), None, None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(listed["intents"].as_array().unwrap().len(), 1, "{listed}");

    for (path, want) in [
        ("/v1/intents/abc", StatusCode::BAD_REQUEST),
        ("/v1/intents/-1", StatusCode::BAD_REQUEST),
        ("/v1/intents/99999999999999999999", StatusCode::BAD_REQUEST),
        ("/v1/intents/4242", StatusCode::NOT_FOUND),
        ("/v1/intents?kind=order", StatusCode::BAD_REQUEST),
    ] {
        let (st, v) = api
            .call(Method::GET, path, Some(STOREFRONT), None, None)
            .await;
        assert_eq!(st, want, "{path}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    for (key, body, want) in [
        (None, json!({"usd_amount": "1"}), "invalid_request"),
        (Some("k1"), json!({"usd_amount": "0"}), "amount_invalid"),
        (Some("k2"), json!({"usd_amount": "-1"}), "amount_invalid"),
        (Some("k3"), json!({"usd_amount": 1}), "invalid_request"),
    ] {
        let (_, v) = api
            .call(
                Method::POST,
                "/v1/accounts/acct-9/debits",
                Some(STOREFRONT),
                key,
                Some(body.to_string()),
            )
            .await;
        assert_eq!(code(&v), want, "{body}: {v}");
    }
    assert_eq!(api.count("SELECT COUNT(*) FROM ledger_entries").await, 0);
}

async fn a_declared_payment_is_recorded_and_is_no_proof(b: Backend) {
    let api = Api::start(b).await;
    let (_, made) = api.create(None, order("declared")).await;
    let id = made["id"].as_i64().unwrap();
    let queued = format!(
        "SELECT COUNT(*) FROM reconcile_queue WHERE address = '{}'",
        made["address"].as_str().unwrap()
    );
    let queued_before = api.count(&queued).await;
    let (st, v) = api
        .call(
            Method::POST,
            &format!("/v1/intents/{id}/declared-paid"),
            Some(STOREFRONT),
            None,
            Some(json!({"note": "sent from my exchange"}).to_string()),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let (_, shown) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{id}"),
            Some(SUPPORT),
            None,
            None,
        )
        .await;
    assert!(shown["declared_paid_at_ms"].is_i64(), "{shown}");
    assert_eq!(
        shown["status"],
        json!("awaiting_payment"),
        "never taken as proof"
    );
    assert_eq!(
        api.count(&format!(
            "SELECT COUNT(*) FROM intent_events WHERE intent_id = {id} AND kind = 'declared_paid' \
             AND detail = 'sent from my exchange'"
        ))
        .await,
        1,
        "it shows in the intent's history"
    );
    assert_eq!(
        api.count(&queued).await,
        queued_before + 1,
        "the address is queued for a re-check"
    );
    let (st, v) = api
        .call(
            Method::POST,
            "/v1/intents/4242/declared-paid",
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::NOT_FOUND, "not_found"));
}

/// Runs the futures concurrently on this task, as a storefront's parallel
/// requests would arrive.
async fn futures_join_all<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in pinned.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}

/// Another client, on a connection of its own from `from`: `/healthz` and
/// the storefront's creation of order `reference` each answer within
/// `limit`.
async fn health_and_create_within(
    base: &str,
    from: Option<std::net::IpAddr>,
    reference: &str,
    limit: std::time::Duration,
) {
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .local_address(from)
        .build()
        .unwrap();
    let health = tokio::time::timeout(limit, fresh.get(format!("{base}/healthz")).send())
        .await
        .unwrap_or_else(|_| panic!("/healthz ({reference}) was not answered within {limit:?}"))
        .unwrap();
    assert!(health.status().is_success(), "{}", health.status());
    let created = tokio::time::timeout(
        limit,
        fresh
            .post(format!("{base}/v1/intents"))
            .bearer_auth(STOREFRONT)
            .header("content-type", "application/json")
            .body(order(reference).to_string())
            .send(),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("the storefront's create of {reference} was not answered within {limit:?}")
    })
    .unwrap();
    assert_eq!(
        created.status(),
        StatusCode::CREATED,
        "{:?}",
        created.text().await
    );
}

/// A slowloris from one address: 1,100 connections that send nothing and
/// 50 that send a byte a second, more than the listener's 1,024 slots.
/// `/healthz` and an intent creation from another client still answer
/// within a second, and the idle connections are closed by the server
/// once their header-read time is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_byte_a_second_connections_do_not_stop_the_api() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let api = Api::start(Backend::Sqlite).await;
    let addr: std::net::SocketAddr = api
        .client
        .base
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    // Every 127/8 address is this machine: the attacker is another client.
    let from = |ip: &str| -> std::net::SocketAddr { format!("{ip}:0").parse().unwrap() };
    let mut idle = Vec::new();
    for _ in 0..1_100 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(from("127.0.0.2")).unwrap();
        idle.push(socket.connect(addr).await.unwrap());
    }
    let mut trickle = Vec::new();
    for _ in 0..50 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(from("127.0.0.3")).unwrap();
        let mut conn = socket.connect(addr).await.unwrap();
        trickle.push(tokio::spawn(async move {
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
                .iter()
                .cycle()
                .take(30)
            {
                if conn.write_all(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    health_and_create_within(&api.client.base, None, "slow-1", Duration::from_secs(1)).await;
    eprintln!("both answered in {:?}", started.elapsed());

    // The idle connections are closed by the server, none left hanging.
    let mut closed = 0;
    for conn in &mut idle {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(8), conn.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => closed += 1,
            Ok(Ok(_)) => {}
            Err(_) => panic!("an idle connection was still open after 8 s"),
        }
    }
    assert_eq!(closed, idle.len());
    for t in trickle {
        t.abort();
    }
}

/// Issue 38, found 8: the per-client cap stops one address, not twenty.
/// 1,100 idle connections from 20 addresses (55 each, under the cap of 64)
/// hold more than the listener's 1,024 slots, and each one the server
/// closes is opened again at once. Health checks and the storefront from
/// another client are still answered within 2 s, again and again, over
/// more than one header-read timeout: when every slot is taken, the
/// connection idle the longest makes room for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_many_addresses_held_and_reopened_never_stop_health_checks_or_the_storefront(
) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    let api = Api::start(Backend::Sqlite).await;
    let addr: std::net::SocketAddr = api
        .client
        .base
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let held = Arc::new(AtomicU64::new(0));
    let mut holders = Vec::new();
    for host in 0..20u8 {
        for _ in 0..55 {
            let (stop, opened, held) = (Arc::clone(&stop), Arc::clone(&opened), Arc::clone(&held));
            let from: std::net::SocketAddr = format!("127.0.1.{}:0", host + 10).parse().unwrap();
            holders.push(tokio::spawn(async move {
                // Holds a connection that sends nothing; opens another as
                // soon as the server closes it.
                while !stop.load(Ordering::Relaxed) {
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.bind(from).unwrap();
                    let Ok(mut conn) = socket.connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    held.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 1];
                    let _ = conn.read(&mut buf).await;
                    held.fetch_sub(1, Ordering::Relaxed);
                }
            }));
        }
    }
    while held.load(Ordering::Relaxed) < 1_100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Another client, asking again and again for longer than the 5 s
    // header-read timeout, so the held connections are closed and reopened
    // around it.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(12) {
        n += 1;
        let asked = Instant::now();
        health_and_create_within(
            &api.client.base,
            Some("127.0.2.1".parse().unwrap()),
            &format!("many-idle-{n}"),
            Duration::from_secs(2),
        )
        .await;
        slowest = slowest.max(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    let reopened = opened.load(Ordering::Relaxed);
    eprintln!("{n} rounds, slowest {slowest:?}; {reopened} idle connections opened in all");
    assert!(
        reopened > 1_100,
        "the held connections were never closed and reopened ({reopened})"
    );
    stop.store(true, Ordering::Relaxed);
    for h in holders {
        h.abort();
    }
}

/// Health checks are anyone's to call, and on SQLite the database has one
/// connection. While a long query holds it, a flood of `/readyz` answers at
/// once from the last look (before, each queued for the connection), and
/// the database is looked at again at most about once a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_readiness_checks_does_not_queue_for_the_database() {
    use std::time::{Duration, Instant};

    let api = Api::start(Backend::Sqlite).await;
    let (st, _) = api.call(Method::GET, "/readyz", None, None, None).await;
    assert_eq!(st, StatusCode::OK);

    // Holds SQLite's one connection for a few seconds.
    let store = api.ctx.store.clone();
    let busy = tokio::spawn(async move {
        store
            .count_raw(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c \
                 WHERE x < 40000000) SELECT COUNT(*) FROM c",
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    // Fewer than the 64 connections one client may hold.
    let checks: Vec<_> = (0..50)
        .map(|_| {
            let base = api.client.base.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let status = reqwest::get(format!("{base}/readyz"))
                    .await
                    .unwrap()
                    .status();
                (status, t.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for c in checks {
        let (status, took) = c.await.unwrap();
        assert!(
            status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
            "{status}"
        );
        slowest = slowest.max(took);
    }
    eprintln!(
        "50 readiness checks in {:?}, the slowest {slowest:?}",
        started.elapsed()
    );
    assert!(
        !busy.is_finished(),
        "the query held the connection throughout the checks"
    );
    assert!(
        slowest < Duration::from_millis(1_500),
        "a readiness check waited {slowest:?} for the database"
    );
    busy.await.unwrap().unwrap();
}

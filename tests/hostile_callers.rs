//! Callers who send what the API never meant to take: text with invisible
//! characters, refund destinations of another network, a support action
//! replayed with other content, "I have paid" a hundred times, two dozen
//! tabs for one order, dust that inflates a case. Each is refused, or
//! bounded, and nothing is lost (issue 18, cases 4, 9, 10 and 11).

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, STOREFRONT, SUPPORT};
use common::{Backend, Harness};
use paywatch::api::TokenTable;
use paywatch::reconcile::Exception;
use paywatch_core::{Amount, Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// A real Litecoin mainnet address (bech32, checksum valid).
const LTC_DESTINATION: &str = "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s";
/// A real Litecoin mainnet legacy address.
const LTC_LEGACY_DESTINATION: &str = "LQ5X1r32bU3v2TgVxE9osb2YnCZNFY6ikm";

struct World {
    h: Harness,
    client: ApiClient,
}

impl World {
    async fn new(b: Backend, network: Network) -> World {
        let mut h = Harness::new(b, network, 1).await;
        h.import_pool(40).await;
        let client = ApiClient::serve(context_with_role_tokens(&h)).await;
        World { h, client }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| b.to_string());
        self.client.call(method, path, Some(token), key, body).await
    }

    async fn act(&self, id: i64, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            &format!("/v1/cases/{id}/actions"),
            SUPPORT,
            Some(key),
            Some(body),
        )
        .await
    }

    async fn create(&self, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            "/v1/intents",
            STOREFRONT,
            Some(key),
            Some(body),
        )
        .await
    }

    /// An order paid half, expired: in review as underpaid, with final money.
    async fn underpaid(&mut self, reference: &str) -> i64 {
        let i = self.h.create("order", reference, "LTC", "100").await;
        self.h
            .pay(&i.address, Asset::Ltc, Amount(i.amount_due.0 / 2));
        self.h.mine(1);
        self.h.pass_expiry(&i);
        self.h.sync().await;
        assert_eq!(
            self.h.intent(i.id).await.exception,
            Some(Exception::Underpaid)
        );
        i.id
    }

    async fn count(&self, sql: &str) -> i64 {
        self.h.count(sql).await
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or("")
}

fn order(reference: &str) -> Value {
    json!({"kind": "order", "reference": reference, "account": "acct-1",
           "asset": "LTC", "network": "litecoin", "usd_amount": "100"})
}

on_both_databases!(
    a_support_action_replayed_with_other_content_is_a_conflict,
    a_refund_destination_must_be_an_address_of_the_intents_network,
    a_refund_txid_must_have_the_networks_shape,
    text_with_invisible_or_reordering_characters_is_refused_by_name,
    a_debit_account_is_checked_as_creation_checks_it,
    a_pasted_uppercase_bech32_address_or_txid_finds_its_case,
    a_pasted_eip55_address_finds_its_case,
    repeated_i_have_paid_writes_nothing_new,
    open_intents_per_reference_are_capped,
    dust_sent_to_a_case_is_paged_not_listed_whole,
    bad_query_strings_get_the_apis_error_naming_what_was_wrong,
);

async fn a_support_action_replayed_with_other_content_is_a_conflict(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let id = w.underpaid("corrected").await;
    let first = json!({"action": "refund_required", "note": "customer cancelled", "actor": "bo",
                       "destination": LTC_DESTINATION});
    let (st, case) = w.act(id, "k1", first.clone()).await;
    assert_eq!(st, StatusCode::CREATED, "{case}");

    // The same key with a corrected destination, another note or another
    // actor is another request: refused, never answered as done.
    for changed in [
        json!({"action": "refund_required", "note": "customer cancelled", "actor": "bo",
               "destination": LTC_LEGACY_DESTINATION}),
        json!({"action": "refund_required", "note": "customer cancelled, per ticket 7",
               "actor": "bo", "destination": LTC_DESTINATION}),
        json!({"action": "refund_required", "note": "customer cancelled", "actor": "cy",
               "destination": LTC_DESTINATION}),
    ] {
        let (st, v) = w.act(id, "k1", changed.clone()).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::CONFLICT, "conflict"),
            "{changed}: {v}"
        );
        assert!(message(&v).contains("Idempotency-Key"), "{v}");
    }
    // The same request again is a replay.
    let (st, again) = w.act(id, "k1", first).await;
    assert_eq!(st, StatusCode::OK, "{again}");
    assert_eq!(again["audit_id"], case["audit_id"]);
    assert_eq!(again["refund"]["destination"], json!(LTC_DESTINATION));
    assert_eq!(w.count("SELECT COUNT(*) FROM audit_log").await, 1);
}

async fn a_refund_destination_must_be_an_address_of_the_intents_network(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let id = w.underpaid("refund-dest").await;
    for (n, (destination, why)) in [
        (
            "0x52908400098527886E0F7030069857D2E4169EE7",
            "an Ethereum address",
        ),
        (
            "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
            "a Bitcoin address",
        ),
        (
            "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92t",
            "a broken checksum",
        ),
        ("see ticket 7", "no address at all"),
    ]
    .into_iter()
    .enumerate()
    {
        let (st, v) = w
            .act(
                id,
                &format!("bad-{n}"),
                json!({"action": "refund_required", "note": "refund", "actor": "bo",
                       "destination": destination}),
            )
            .await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{why}: {v}"
        );
        assert!(message(&v).contains("destination"), "{why}: {v}");
        assert!(message(&v).contains("litecoin"), "{why}: {v}");
    }
    assert_eq!(w.count("SELECT COUNT(*) FROM refunds").await, 0);
    // Stored in the one spelling the chain has: lower-case bech32.
    let (st, case) = w
        .act(
            id,
            "good",
            json!({"action": "refund_required", "note": "refund", "actor": "bo",
                   "destination": format!("  {}  ", LTC_DESTINATION.to_uppercase())}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["refund"]["destination"], json!(LTC_DESTINATION));
}

async fn a_refund_txid_must_have_the_networks_shape(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let id = w.underpaid("refund-txid").await;
    let (st, _) = w
        .act(
            id,
            "req",
            json!({"action": "refund_required", "note": "refund", "actor": "bo",
                   "destination": LTC_DESTINATION}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let long = "ab".repeat(20_000);
    for (txid, why) in [
        ("ab12cd", "too short"),
        (long.as_str(), "forty thousand characters"),
        (
            "zz00000000000000000000000000000000000000000000000000000000000000",
            "not hex",
        ),
    ] {
        let (st, v) = w
            .act(
                id,
                &format!("sent-{}", &txid[..6]),
                json!({"action": "refund_sent", "note": "sent", "actor": "bo", "txid": txid}),
            )
            .await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{why}: {v}"
        );
        assert!(message(&v).contains("txid"), "{why}: {v}");
        assert!(message(&v).len() < 400, "the answer does not echo it all");
    }
    let txid = "AB".repeat(32);
    let (st, case) = w
        .act(
            id,
            "sent",
            json!({"action": "refund_sent", "note": "sent", "actor": "bo", "txid": txid}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    assert_eq!(case["refund"]["txid"], json!("ab".repeat(32)));
}

async fn text_with_invisible_or_reordering_characters_is_refused_by_name(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    // Zero-width space, right-to-left override, a bidi isolate, a BOM.
    for (n, (field, value)) in [
        ("reference", "A-1\u{200B}"),
        ("reference", "A-\u{202E}1"),
        ("account", "acct\u{2066}-1"),
        ("account", "\u{FEFF}acct-1"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = order("A-1");
        body[field] = json!(value);
        let (st, v) = w.create(&format!("k-{n}"), body).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
            "{field} {value:?}: {v}"
        );
        assert!(message(&v).contains(field), "{v}");
    }
    assert_eq!(w.count("SELECT COUNT(*) FROM intents").await, 0);

    let id = w.underpaid("texts").await;
    for (field, value) in [("note", "refund \u{202E}ti dnes"), ("actor", "bo\u{200D}")] {
        let mut body = json!({"action": "dismiss", "note": "a note", "actor": "bo"});
        body[field] = json!(value);
        let (st, v) = w.act(id, &format!("k-{field}"), body).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{field}: {v}"
        );
        assert!(message(&v).contains(field), "{v}");
    }
    // A note may span lines: a support note is prose.
    let (st, v) = w
        .act(
            id,
            "lines",
            json!({"action": "dismiss", "note": "line one\r\nline two\ttabbed", "actor": "bo"}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");

    let i = w.h.create("order", "declared", "LTC", "100").await;
    let (st, v) = w
        .call(
            Method::POST,
            &format!("/v1/intents/{}/declared-paid", i.id),
            STOREFRONT,
            None,
            Some(json!({"note": "paid \u{2067}from binance"})),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));
    assert!(message(&v).contains("note"), "{v}");
}

async fn a_debit_account_is_checked_as_creation_checks_it(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let t = w.h.create("topup", "T-1", "LTC", "100").await;
    w.h.pay(&t.address, Asset::Ltc, t.amount_due);
    w.h.mine(1);
    w.h.sync().await;
    assert_eq!(w.h.balance("acct-1").await, 10_000);

    for (path, why) in [
        ("acct-1%E2%80%8B", "a zero-width space"),
        ("acct%E2%80%AE-1", "a right-to-left override"),
        ("acct%0A-1", "a line feed"),
        ("%20%20", "only spaces"),
    ] {
        let (st, v) = w
            .call(
                Method::POST,
                &format!("/v1/accounts/{path}/debits"),
                STOREFRONT,
                Some(&format!("d-{path}")),
                Some(json!({"usd_amount": "10"})),
            )
            .await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{why}: {v}"
        );
        assert!(message(&v).contains("account"), "{why}: {v}");
    }
    // Creation trims surrounding spaces from an account, so a debit does:
    // " acct-1" is the account the top-up credited.
    let (st, v) = w
        .call(
            Method::POST,
            "/v1/accounts/%20acct-1/debits",
            STOREFRONT,
            Some("d-trim"),
            Some(json!({"usd_amount": "10", "memo": "gpu hour"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(w.h.balance("acct-1").await, 9_000);
    let (st, v) = w
        .call(
            Method::POST,
            "/v1/accounts/acct-1/debits",
            STOREFRONT,
            Some("d-memo"),
            Some(json!({"usd_amount": "10", "memo": "gpu\u{200B} hour"})),
        )
        .await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_request"));
    assert!(message(&v).contains("memo"), "{v}");
    assert_eq!(w.h.balance("acct-1").await, 9_000);
}

async fn found(w: &World, query: &str) -> Vec<i64> {
    let (st, v) = w
        .call(
            Method::GET,
            &format!("/v1/cases?{query}"),
            SUPPORT,
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["intents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect()
}

async fn a_pasted_uppercase_bech32_address_or_txid_finds_its_case(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let id = w.underpaid("pasted").await;
    let intent = w.h.intent(id).await;
    let txid = w.h.intent_transfers(id).await[0]
        .get("txid")
        .unwrap()
        .to_owned();
    assert_eq!(
        found(&w, &format!("address={}", intent.address)).await,
        [id]
    );
    // Wallets and QR codes show bech32 in upper case; explorers show txids
    // in either case.
    assert_eq!(
        found(&w, &format!("address={}", intent.address.to_uppercase())).await,
        [id]
    );
    assert_eq!(
        found(&w, &format!("address=%20{}%20", intent.address)).await,
        [id]
    );
    assert_eq!(
        found(&w, &format!("txid={}", txid.to_uppercase())).await,
        [id]
    );
}

async fn a_pasted_eip55_address_finds_its_case(b: Backend) {
    let w = World::new(b, Network::Ethereum).await;
    let i = w.h.create("order", "eth-order", "ETH", "100").await;
    let parsed = paywatch_evm::parse_address(&i.address).unwrap();
    let eip55 = paywatch_evm::checksummed(&parsed);
    assert_ne!(eip55, i.address, "stored lower-case, shown checksummed");
    assert_eq!(found(&w, &format!("address={eip55}")).await, [i.id]);
    assert_eq!(
        found(
            &w,
            &format!("address={}", i.address.to_uppercase().replace("0X", "0x"))
        )
        .await,
        [i.id]
    );
}

async fn repeated_i_have_paid_writes_nothing_new(b: Backend) {
    let w = World::new(b, Network::Litecoin).await;
    let i = w.h.create("order", "impatient", "LTC", "100").await;
    let declare = |note: Option<String>| {
        let path = format!("/v1/intents/{}/declared-paid", i.id);
        let body = note.map(|n| json!({ "note": n }));
        let w = &w;
        async move { w.call(Method::POST, &path, STOREFRONT, None, body).await }
    };
    let (st, first) = declare(Some("sent from my wallet".into())).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["recorded"], json!(true));
    for _ in 0..50 {
        let (st, v) = declare(Some("sent from my wallet".into())).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["recorded"], json!(false), "{v}");
        assert_eq!(
            v["declared_at_ms"], first["declared_at_ms"],
            "the first one stands"
        );
        let (st, v) = declare(None).await;
        assert_eq!((st, v["recorded"].clone()), (StatusCode::OK, json!(false)));
    }
    // Notes that differ are kept, up to a few: each may tell support
    // something, but a script cannot grow the table without bound.
    for n in 0..30 {
        declare(Some(format!("wallet said {n}"))).await;
    }
    let declarations = w
        .count(&format!(
            "SELECT COUNT(*) FROM payment_declarations WHERE intent_id = {}",
            i.id
        ))
        .await;
    assert_eq!(declarations, 5, "the first and four more notes");
    assert_eq!(
        w.count(&format!(
            "SELECT COUNT(*) FROM intent_events WHERE intent_id = {} AND kind = 'declared_paid'",
            i.id
        ))
        .await,
        declarations
    );
}

async fn open_intents_per_reference_are_capped(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let cap = paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE;
    let mut first = None;
    for n in 0..cap {
        let (st, v) = w.create(&format!("tab-{n}"), order("many-tabs")).await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        first.get_or_insert(v["id"].as_i64().unwrap());
    }
    let pool_left = w
        .count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NULL")
        .await;
    let (st, v) = w.create("tab-over", order("many-tabs")).await;
    assert_eq!(
        (st, code(&v)),
        (StatusCode::CONFLICT, "too_many_open_intents"),
        "{v}"
    );
    assert!(message(&v).contains("many-tabs"), "{v}");
    assert!(message(&v).contains(&cap.to_string()), "{v}");
    assert_eq!(
        w.count("SELECT COUNT(*) FROM addresses WHERE issued_at IS NULL")
            .await,
        pool_left,
        "no address was taken"
    );
    // A retry of an intent already made still answers with it.
    let (st, v) = w.create("tab-0", order("many-tabs")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["id"].as_i64(), first);
    // Other references are not affected.
    let (st, v) = w.create("other", order("another-order")).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    // Once the open ones expire, the order may ask again.
    let one = w.h.intent(first.unwrap()).await;
    w.h.pass_expiry(&one);
    w.h.sync().await;
    let (st, v) = w.create("tab-later", order("many-tabs")).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

async fn dust_sent_to_a_case_is_paged_not_listed_whole(b: Backend) {
    let mut w = World::new(b, Network::Litecoin).await;
    let id = w.underpaid("dusted").await;
    let address = w.h.intent(id).await.address;
    for _ in 0..120 {
        w.h.pay(&address, Asset::Ltc, Amount(1));
    }
    w.h.mine(1);
    w.h.sync().await;
    let total = 121;

    let mut seen = Vec::new();
    let mut path = format!("/v1/cases/{id}");
    loop {
        let (st, case) = w.call(Method::GET, &path, SUPPORT, None, None).await;
        assert_eq!(st, StatusCode::OK, "{case}");
        assert_eq!(case["transfers_total"], json!(total), "{path}");
        let page = case["transfers"].as_array().unwrap();
        assert!(page.len() <= 50, "{path}: {} transfers", page.len());
        seen.extend(page.iter().map(|t| t["transfer_id"].as_i64().unwrap()));
        match case["transfers_next"].as_str() {
            Some(next) => path = next.to_owned(),
            None => break,
        }
    }
    let mut unique = seen.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(seen.len(), total as usize, "every transfer once");
    assert_eq!(unique.len(), seen.len());

    let (st, queue) = w
        .call(Method::GET, "/v1/review-queue", OPERATOR, None, None)
        .await;
    assert_eq!(st, StatusCode::OK, "{queue}");
    let item = &queue["items"][0];
    assert_eq!(item["intent"]["id"], json!(id));
    assert_eq!(item["transfers_total"], json!(total));
    assert!(item["transfers"].as_array().unwrap().len() <= 5, "{item}");
    // The payment that counts is among those shown.
    assert!(item["transfers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["counts_toward_intent"] == json!(true)));
}

// ---------------------------------------------------------------------------
// Identity: console sessions, token names, failed attempts (issue 18, cases 6 and 7)

/// A browser without a cookie jar: each cookie is read and sent by hand, so
/// the test sees exactly what the server set.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs in at `base` with `token`; the `Set-Cookie` header it answered.
async fn sign_in(base: &str, token: &str) -> String {
    let resp = browser()
        .post(format!("{base}/console/login"))
        .header("origin", base)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER, "signed in");
    resp.headers()["set-cookie"].to_str().unwrap().to_owned()
}

/// What the console answers `path` with the cookie `pair` ("name=value").
async fn console_get(base: &str, path: &str, pair: &str) -> (StatusCode, String) {
    let resp = browser()
        .get(format!("{base}{path}"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let location = resp
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location)
}

fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_cookie_is_a_server_side_session_not_the_token() {
    let w = World::new(Backend::Sqlite, Network::Litecoin).await;
    let base = w.client.base.clone();
    let set = sign_in(&base, SUPPORT).await;
    let pair = cookie_pair(&set);
    let value = pair.split_once('=').unwrap().1;
    assert!(
        !value.contains(SUPPORT) && !value.contains(&hex::encode(SUPPORT)),
        "the cookie must not carry the token: {set}"
    );
    assert!(value.len() >= 43, "a 256-bit random id: {set}");
    for flag in ["HttpOnly", "SameSite=Strict", "Max-Age=28800"] {
        assert!(set.contains(flag), "{flag}: {set}");
    }
    assert!(
        !set.contains("Secure"),
        "plain HTTP unless api.behind_tls: {set}"
    );
    assert_eq!(
        console_get(&base, "/console/queue", &pair).await.0,
        StatusCode::OK
    );

    // Logout ends the session on the server, not only in this browser: a
    // copy of the cookie taken before is worth nothing after.
    let resp = browser()
        .post(format!("{base}/console/logout"))
        .header("origin", &base)
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    let (st, location) = console_get(&base, "/console/queue", &pair).await;
    assert_eq!(
        (st, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login")
    );

    // A session ends after its 8 hours, whatever the cookie's own age says.
    let pair = cookie_pair(&sign_in(&base, SUPPORT).await);
    assert_eq!(
        console_get(&base, "/console/queue", &pair).await.0,
        StatusCode::OK
    );
    w.h.clock.advance_secs(8 * 3600 + 1);
    let (st, location) = console_get(&base, "/console/queue", &pair).await;
    assert_eq!(
        (st, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login")
    );
    // A made-up session id is refused the same way.
    let (st, _) = console_get(&base, "/console/queue", "paywatch_session=AAAA").await;
    assert_eq!(st, StatusCode::SEE_OTHER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_tls_the_console_cookie_is_secure_and_host_only() {
    let h = Harness::new(Backend::Sqlite, Network::Litecoin, 1).await;
    let mut ctx = context_with_role_tokens(&h);
    ctx.settings.api.behind_tls = true;
    let client = ApiClient::serve(ctx).await;
    let set = sign_in(&client.base, OPERATOR).await;
    assert!(set.starts_with("__Host-paywatch_session="), "{set}");
    for flag in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/;"] {
        assert!(set.contains(flag), "{flag}: {set}");
    }
    let pair = cookie_pair(&set);
    assert_eq!(
        console_get(&client.base, "/console/queue", &pair).await.0,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_removed_from_the_configuration_ends_its_sessions() {
    let h = Harness::new(Backend::Postgres, Network::Litecoin, 1).await;
    let first = ApiClient::serve(context_with_role_tokens(&h)).await;
    let pair = cookie_pair(&sign_in(&first.base, SUPPORT).await);
    // Another instance on the same database knows the session...
    let second = ApiClient::serve(context_with_role_tokens(&h)).await;
    assert_eq!(
        console_get(&second.base, "/console/queue", &pair).await.0,
        StatusCode::OK
    );
    // ...and one whose configuration no longer has the token refuses it.
    let mut ctx = context_with_role_tokens(&h);
    ctx.settings.api.tokens.remove("support");
    let rotated = ApiClient::serve(ctx).await;
    let (st, location) = console_get(&rotated.base, "/console/queue", &pair).await;
    assert_eq!(
        (st, location.as_str()),
        (StatusCode::SEE_OTHER, "/console/login")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_names_the_token_as_well_as_the_actor() {
    let mut w = World::new(Backend::Sqlite, Network::Litecoin).await;
    let mut ctx = context_with_role_tokens(&w.h);
    ctx.settings.api.tokens.insert(
        "support".into(),
        vec![format!("help-desk-ana:{}", TokenTable::hash_token(SUPPORT))],
    );
    let named = ApiClient::serve(ctx).await;
    let id = w.underpaid("named").await;
    let (st, case) = named
        .call(
            Method::POST,
            &format!("/v1/cases/{id}/actions"),
            Some(SUPPORT),
            Some("named-1"),
            Some(
                json!({"action": "dismiss", "note": "test order", "actor": "someone else"})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{case}");
    let entry = &case["audit"][0];
    assert_eq!(entry["actor"], json!("someone else"), "{entry}");
    assert_eq!(entry["token_name"], json!("help-desk-ana"), "{entry}");
    assert_eq!(
        w.h.row("SELECT token_name FROM audit_log")
            .await
            .get("token_name"),
        Some("help-desk-ana")
    );
    // An unnamed token is named after its role and place in the list.
    let id = w.underpaid("unnamed").await;
    let (_, case) = w
        .act(
            id,
            "unnamed-1",
            json!({"action": "dismiss", "note": "test", "actor": "bo"}),
        )
        .await;
    assert_eq!(case["audit"][0]["token_name"], json!("support-1"), "{case}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_token_attempts_are_throttled_per_client_address() {
    let w = World::new(Backend::Sqlite, Network::Litecoin).await;
    let base = w.client.base.clone();
    let from = |ip: [u8; 4]| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(ip))
            .build()
            .unwrap()
    };
    let attacker = from([127, 0, 0, 5]);
    let limit = paywatch::api::AUTH_FAILURES_PER_MINUTE;
    for n in 0..limit {
        let st = attacker
            .get(format!("{base}/v1/review-queue"))
            .bearer_auth(format!("guess-{n}"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(st, StatusCode::UNAUTHORIZED, "guess {n}");
    }
    // Past the limit every token is refused from that address, the right
    // one too: a guess that happens to be right must not be told so.
    for token in ["guess-next", OPERATOR] {
        let resp = attacker
            .get(format!("{base}/v1/review-queue"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{token}");
        assert!(resp.headers().contains_key("retry-after"));
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], json!("too_many_failures"), "{v}");
    }
    // The console's sign-in counts the same failures.
    let resp = attacker
        .post(format!("{base}/console/login"))
        .header("origin", &base)
        .form(&[("token", OPERATOR)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    // Health checks and other addresses are not affected.
    let st = attacker
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st, StatusCode::OK);
    // Nor the payer's routes, which take no credential, nor a probe that
    // sends a bearer header: behind one proxy address a guesser must not
    // take every checkout's status down with it (issue 38, found 1).
    let st = attacker
        .get(format!("{base}/v1/view/{}", "0f".repeat(32)))
        .header("cookie", "theme=dark")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st, StatusCode::NOT_FOUND, "an unknown link, not a refusal");
    for probe in ["/healthz", "/readyz"] {
        let st = attacker
            .get(format!("{base}{probe}"))
            .bearer_auth("probe-token")
            .send()
            .await
            .unwrap()
            .status();
        assert_ne!(st, StatusCode::TOO_MANY_REQUESTS, "{probe}");
    }
    let st = from([127, 0, 0, 6])
        .get(format!("{base}/v1/review-queue"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(st, StatusCode::OK);
}

/// Issue 38, found 1: behind a proxy every client is the proxy's address,
/// so one guesser locked out every payer and the storefront. With the
/// proxy in `api.trusted_proxies` the client it names is throttled alone,
/// and a client that is not a trusted proxy cannot name another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_one_guesser_is_throttled_alone() {
    let mut h = Harness::new(Backend::Sqlite, Network::Litecoin, 1).await;
    h.import_pool(4).await;
    let mut ctx = context_with_role_tokens(&h);
    ctx.settings.api.trusted_proxies = vec!["127.0.0.2/32".into()];
    let base = ApiClient::serve(ctx).await.base;
    let from = |ip: [u8; 4]| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(ip))
            .build()
            .unwrap()
    };
    let proxy = from([127, 0, 0, 2]);
    let get = |client: &reqwest::Client, forwarded_for: &str, token: &str| {
        client
            .get(format!("{base}/v1/review-queue"))
            .header("x-forwarded-for", forwarded_for)
            .bearer_auth(token)
            .send()
    };
    for n in 0..paywatch::api::AUTH_FAILURES_PER_MINUTE {
        let st = get(&proxy, "203.0.113.5", &format!("guess-{n}"))
            .await
            .unwrap()
            .status();
        assert_eq!(st, StatusCode::UNAUTHORIZED, "guess {n}");
    }
    let st = get(&proxy, "203.0.113.5", OPERATOR).await.unwrap().status();
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS, "the guesser is refused");
    let st = get(&proxy, "203.0.113.6", OPERATOR).await.unwrap().status();
    assert_eq!(
        st,
        StatusCode::OK,
        "another client through the same proxy is served"
    );
    // A client that is not a trusted proxy is itself, whatever it claims.
    let direct = from([127, 0, 0, 3]);
    for n in 0..paywatch::api::AUTH_FAILURES_PER_MINUTE {
        let claimed = format!("198.51.100.{n}");
        let st = get(&direct, &claimed, "wrong").await.unwrap().status();
        assert_eq!(st, StatusCode::UNAUTHORIZED);
    }
    let st = get(&direct, "198.51.100.200", OPERATOR)
        .await
        .unwrap()
        .status();
    assert_eq!(
        st,
        StatusCode::TOO_MANY_REQUESTS,
        "a spoofed header changes nothing"
    );
}

#[test]
fn new_token_prints_a_256_bit_token_and_the_line_that_configures_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_paywatch"))
        .args(["new-token", "support", "help-desk-ana"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .expect("a token line")
        .trim();
    let digits = token.strip_prefix("pw_").expect("pw_ prefix");
    assert_eq!(hex::decode(digits).unwrap().len(), 32, "{token}");
    let line = format!(
        "api.tokens.support = [\"help-desk-ana:{}\"]",
        TokenTable::hash_token(token)
    );
    assert!(text.contains(&line), "{text}");
    // Two runs never give the same token.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_paywatch"))
        .args(["new-token", "support", "help-desk-ana"])
        .output()
        .unwrap();
    assert!(!String::from_utf8(again.stdout).unwrap().contains(token));

    // A token a person made up must be long enough to resist guessing.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_paywatch"))
        .arg("hash-token")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hunter2").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("new-token"), "{err}");
    for bad in [
        &["new-token", "admin", "x"][..],
        &["new-token", "support", "a b"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_paywatch"))
            .args(bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?}");
    }
}

async fn bad_query_strings_get_the_apis_error_naming_what_was_wrong(b: Backend) {
    let w = World::new(b, Network::Litecoin).await;
    for (path, token, field) in [
        ("/v1/review-queue?limit=abc", OPERATOR, "limit"),
        ("/v1/review-queue?limit=1001", OPERATOR, "limit"),
        ("/v1/review-queue?limit=0", OPERATOR, "limit"),
        ("/v1/networks/litecoin/rescans?limit=-1", OPERATOR, "limit"),
        (
            "/v1/webhooks/deliveries?state=failing&limit=5000",
            OPERATOR,
            "limit",
        ),
        ("/v1/cases/1?transfers_after=-1", SUPPORT, "transfers_after"),
        (
            "/v1/intents?kind=order&reference=a%00b",
            STOREFRONT,
            "reference",
        ),
        ("/v1/cases?reference=a%00b", SUPPORT, "reference"),
        ("/v1/cases?address=%E2%80%8Bltc1q", SUPPORT, "address"),
    ] {
        let (st, v) = w.call(Method::GET, path, token, None, None).await;
        assert_eq!(
            (st, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{path}: {v}"
        );
        assert!(message(&v).contains(field), "{path}: {v}");
    }
}

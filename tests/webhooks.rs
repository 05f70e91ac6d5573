//! Webhook delivery of the outbox against a real HTTP receiver, on both
//! databases: intents change status through the harness (create, pay, mine,
//! sync), the reconciler writes outbox rows, and the delivery task POSTs
//! them, signed, retrying a failing receiver until it answers 2xx, in order
//! per intent, from two instances at once, across a restart, and again when
//! an operator asks.

#[macro_use]
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::{Backend, Harness, TestDb};
use hmac::{Hmac, Mac};
use paywatch::api::{self, ApiState, TokenTable};
use paywatch::app::Context;
use paywatch::clock::{Clock, SystemClock};
use paywatch::settings::{Secret, Settings};
use paywatch::store::{DeliveryState, Store, WebhookDelivery};
use paywatch::webhooks::WebhookError;
use paywatch_core::{Asset, Network};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const SECRET: &str = "whsec-3b1f0c9e77a24d15";
const STOREFRONT: &str = "shop-token-5e21";
const OPERATOR: &str = "ops-token-90ab";

on_both_databases!(
    webhooks_turned_on_later_send_only_what_happens_after,
    an_upgrade_drops_rows_enrolled_with_no_url_and_keeps_an_endpoint_in_use,
    two_instances_deliver_every_change_once_signed_and_in_order_to_a_failing_receiver,
    delivery_stopped_mid_retry_resumes_after_a_restart_and_loses_nothing,
    an_operator_can_have_a_delivered_row_sent_again,
    a_delivery_replayed_under_another_delivery_id_fails_its_signature,
    an_order_s_events_go_out_in_commit_order_across_its_intents,
);

/// One request the receiver got, and what it answered.
#[derive(Debug, Clone)]
struct Hit {
    delivery: i64,
    timestamp: String,
    signature: String,
    content_type: String,
    body: String,
    answered: u16,
}

/// A storefront's webhook endpoint that answers 500 while `failures_left`
/// lasts, then 200, and writes down every request.
#[derive(Debug, Default)]
struct Receiver {
    hits: Mutex<Vec<Hit>>,
    failures_left: AtomicUsize,
    /// A delivery id refused while `refusals_left` lasts (-1: none).
    refused_delivery: AtomicI64,
    refusals_left: AtomicUsize,
}

impl Receiver {
    async fn start(failures: usize) -> (Arc<Receiver>, String) {
        let r = Arc::new(Receiver {
            hits: Mutex::default(),
            failures_left: AtomicUsize::new(failures),
            refused_delivery: AtomicI64::new(-1),
            refusals_left: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/hooks/paywatch", post(receive))
            .with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/paywatch", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (r, url)
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    fn hits_for(&self, outbox_id: i64) -> Vec<Hit> {
        self.hits()
            .into_iter()
            .filter(|h| h.delivery == outbox_id)
            .collect()
    }
}

async fn receive(
    State(r): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let refused = header("paywatch-delivery").parse::<i64>().ok()
        == Some(r.refused_delivery.load(Ordering::SeqCst))
        && r.refusals_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let fail = refused
        || r.failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let (status, text) = if fail {
        (StatusCode::INTERNAL_SERVER_ERROR, "receiver down")
    } else {
        (StatusCode::OK, "ok")
    };
    r.hits.lock().unwrap().push(Hit {
        delivery: header("paywatch-delivery").parse().unwrap_or(-1),
        timestamp: header("paywatch-timestamp"),
        signature: header("paywatch-signature"),
        content_type: header("content-type"),
        body: String::from_utf8(body.to_vec()).unwrap(),
        answered: status.as_u16(),
    });
    (status, text)
}

/// A delivery task as `paywatch run` spawns it, with a stop of its own.
struct Task {
    stop: watch::Sender<bool>,
    handle: JoinHandle<Result<(), WebhookError>>,
}

impl Task {
    fn start(store: Store, settings: &Settings) -> Task {
        let (stop, stop_rx) = watch::channel(false);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let handle = tokio::spawn(paywatch::webhooks::run(
            store,
            settings.clone(),
            clock,
            stop_rx,
        ));
        Task { stop, handle }
    }

    /// Stops it and waits: a send in flight finishes and is recorded first.
    async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("the delivery task stops promptly")
            .expect("no panic")
            .expect("no error");
    }
}

fn settings(h: &Harness, url: &str) -> Settings {
    let mut s = Settings::load(None).expect("defaults");
    s.database.url = h.db.url.clone();
    s.webhooks.url = url.to_owned();
    // The test receiver speaks plain HTTP on loopback.
    s.webhooks.allow_http_to_loopback = true;
    s.webhooks.secret = Secret(SECRET.into());
    s.webhooks.timeout_secs = 2;
    // Short retries keep the test fast; the schedule's shape is the same.
    s.webhooks.base_backoff_ms = 20;
    s.webhooks.max_backoff_secs = 1;
    s
}

/// Two orders, each paid then confirmed: six outbox rows, three per intent
/// (confirming, paid, and the settlement), all written before the task
/// starts so that each intent's later rows are due while its first is still
/// being retried.
async fn two_paid_orders(h: &mut Harness) -> Vec<(i64, i64)> {
    h.import_pool(2).await;
    let a = h.create("order", "wh-a", "LTC", "100").await;
    let b = h.create("order", "wh-b", "LTC", "100").await;
    h.pay(&a.address, Asset::Ltc, a.amount_due);
    h.pay(&b.address, Asset::Ltc, b.amount_due);
    h.mine(1);
    h.sync().await;
    h.mine(2);
    h.sync().await;
    let rows: Vec<(i64, i64)> = h
        .rows("SELECT id, intent_id FROM outbox ORDER BY id")
        .await
        .iter()
        .map(|r| (r.int("id"), r.int("intent_id")))
        .collect();
    assert_eq!(rows.len(), 6, "{rows:?}");
    for id in [a.id, b.id] {
        assert_eq!(rows.iter().filter(|(_, i)| *i == id).count(), 3);
        assert_eq!(h.status_history(id).await.last().unwrap(), "paid");
    }
    rows
}

// Issue 20, found 9: deliveries waited only for their own intent's, so the
// events of an order's second intent overtook the first's while it was
// retried.
async fn an_order_s_events_go_out_in_commit_order_across_its_intents(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 1).await;
    // Webhooks configured before any of the test's events.
    h.store.register_webhook_endpoint(0).await.unwrap();
    h.import_pool(2).await;
    let first_tab = h.create("order", "tabs", "LTC", "100").await;
    let second_tab = h.create("order", "tabs", "LTC", "100").await;
    h.pay(&first_tab.address, Asset::Ltc, first_tab.amount_due);
    h.mine(1);
    h.sync().await;
    // The second tab's customer pays too: a duplicate, for review.
    h.pay(&second_tab.address, Asset::Ltc, second_tab.amount_due);
    h.mine(1);
    h.sync().await;
    let feed = h.store.events_after(0, 100).await.unwrap();
    let intents: std::collections::BTreeSet<i64> =
        feed.iter().filter_map(|e| e.intent_id).collect();
    assert_eq!(intents.len(), 2, "events about both intents: {feed:?}");

    let (receiver, url) = Receiver::start(0).await;
    // The order's first event is refused three times, then taken.
    let first: i64 = h
        .row("SELECT id FROM outbox ORDER BY seq LIMIT 1")
        .await
        .int("id");
    receiver.refused_delivery.store(first, Ordering::SeqCst);
    receiver.refusals_left.store(3, Ordering::SeqCst);
    let task = Task::start(h.store.clone(), &settings(&h, &url));
    all_delivered(&h.store, feed.len()).await;
    task.stop().await;

    let taken: Vec<i64> = receiver
        .hits()
        .iter()
        .filter(|hit| hit.answered == 200)
        .map(|hit| {
            let body: Value = serde_json::from_str(&hit.body).unwrap();
            body["cursor"].as_i64().unwrap()
        })
        .collect();
    let mut in_order = taken.clone();
    in_order.sort_unstable();
    assert_eq!(
        taken, in_order,
        "the order's events arrived in commit order, across its two intents"
    );
    assert_eq!(taken.len(), feed.len());
    assert_eq!(
        receiver.hits_for(first).len(),
        4,
        "refused three times, then taken"
    );
}

async fn deliveries(store: &Store, state: DeliveryState) -> Vec<WebhookDelivery> {
    store.webhook_deliveries(state, 1000).await.unwrap()
}

/// Waits until `done` holds, or fails after 30 s with `what`.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn all_delivered(store: &Store, n: usize) {
    eventually("every row is delivered", || async {
        deliveries(store, DeliveryState::Delivered).await.len() == n
    })
    .await;
}

/// Every request carries the row's id and payload (with the id as
/// `event_id`), and a signature the receiver recomputes with the shared
/// secret.
fn assert_signed(hit: &Hit, payloads: &HashMap<i64, String>) {
    assert_eq!(hit.content_type, "application/json");
    let mut expected: Value = serde_json::from_str(&payloads[&hit.delivery]).unwrap();
    expected["event_id"] = json!(hit.delivery);
    let body: Value = serde_json::from_str(&hit.body).unwrap();
    assert_eq!(
        body, expected,
        "the body is the outbox row's payload and its id"
    );
    assert!(verifies(hit), "signature of {hit:?}");
}

/// A receiver's check, as the README gives it: the HMAC of
/// "<timestamp>.<delivery>.<body>" matches, the timestamp is within five
/// minutes, and the body's event_id is the delivery id.
fn verifies(hit: &Hit) -> bool {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{}.{}.{}", hit.timestamp, hit.delivery, hit.body).as_bytes());
    let expected = format!("v2={}", hex::encode(mac.finalize().into_bytes()));
    let now = SystemClock.now_ms() / 1000;
    let fresh = hit
        .timestamp
        .parse::<i64>()
        .is_ok_and(|ts| (now - 300..=now + 300).contains(&ts));
    let body: Value = serde_json::from_str(&hit.body).unwrap_or(Value::Null);
    hit.signature == expected && fresh && body["event_id"] == json!(hit.delivery)
}

async fn a_delivery_replayed_under_another_delivery_id_fails_its_signature(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    // Webhooks configured before any of the test's events.
    h.store.register_webhook_endpoint(0).await.unwrap();
    let rows = two_paid_orders(&mut h).await;
    let (receiver, url) = Receiver::start(0).await;
    let task = Task::start(h.store.clone(), &settings(&h, &url));
    all_delivered(&h.store, rows.len()).await;
    task.stop().await;
    let hits = receiver.hits();
    assert!(hits.iter().all(verifies), "{hits:?}");

    // An attacker who captured one request sends it again under a delivery
    // id the receiver has not seen, to get past its de-duplication.
    let captured = hits[0].clone();
    let unseen = hits.iter().map(|h| h.delivery).max().unwrap() + 1;
    let replayed = Hit {
        delivery: unseen,
        ..captured.clone()
    };
    assert!(!verifies(&replayed), "the delivery id is signed");
    // Nor can the body's event_id be changed to match.
    let mut body: Value = serde_json::from_str(&captured.body).unwrap();
    body["event_id"] = json!(unseen);
    let rewritten = Hit {
        delivery: unseen,
        body: body.to_string(),
        ..captured
    };
    assert!(!verifies(&rewritten), "the body is signed");
}

/// No row was sent before every earlier row of its intent had been answered 200.
fn assert_in_order_per_intent(hits: &[Hit], rows: &[(i64, i64)]) {
    let intent_of: HashMap<i64, i64> = rows.iter().copied().collect();
    for (i, hit) in hits.iter().enumerate() {
        let intent = intent_of[&hit.delivery];
        for (earlier, _) in rows
            .iter()
            .filter(|(id, of)| *of == intent && *id < hit.delivery)
        {
            assert!(
                hits[..i]
                    .iter()
                    .any(|h| h.delivery == *earlier && h.answered == 200),
                "row {} was sent before row {earlier} of intent {intent} was delivered: {hits:?}",
                hit.delivery
            );
        }
    }
}

async fn payloads(store: &Store, rows: &[(i64, i64)]) -> HashMap<i64, String> {
    let mut out = HashMap::new();
    for (id, _) in rows {
        let d = store
            .webhook_delivery(*id)
            .await
            .unwrap()
            .expect("enrolled");
        out.insert(*id, d.payload);
    }
    out
}

async fn two_instances_deliver_every_change_once_signed_and_in_order_to_a_failing_receiver(
    b: Backend,
) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    // Webhooks configured before any of the test's events.
    h.store.register_webhook_endpoint(0).await.unwrap();
    let rows = two_paid_orders(&mut h).await;
    let (receiver, url) = Receiver::start(3).await;
    let pending = deliveries(&h.store, DeliveryState::Pending).await;
    assert_eq!(
        pending.len(),
        rows.len(),
        "every outbox row is enrolled when written"
    );
    assert!(pending.iter().all(|d| d.attempts == 0));

    // Two instances on one database: claims never overlap, so no row is
    // sent twice and no intent's rows cross.
    let settings = settings(&h, &url);
    let task = Task::start(h.store.clone(), &settings);
    let other = Task::start(h.another_store().await, &settings);
    all_delivered(&h.store, rows.len()).await;
    task.stop().await;
    other.stop().await;

    let hits = receiver.hits();
    let payloads = payloads(&h.store, &rows).await;
    assert_eq!(
        hits.iter().filter(|h| h.answered == 500).count(),
        3,
        "{hits:?}"
    );
    assert_eq!(
        hits.len(),
        3 + rows.len(),
        "three failures, then each row once: {hits:?}"
    );
    for hit in &hits {
        assert_signed(hit, &payloads);
    }
    assert_in_order_per_intent(&hits, &rows);
    // Each body is its feed event, cursor and time included, so a receiver
    // can tell older news from newer whatever order bodies arrive in.
    let feed = h.store.events_after(0, 1000).await.unwrap();
    for hit in hits.iter().filter(|h| h.answered == 200) {
        let mut body: Value = serde_json::from_str(&hit.body).unwrap();
        assert!(body["created_at_ms"].is_i64(), "{body}");
        body.as_object_mut().unwrap().remove("event_id");
        assert!(
            feed.iter().any(|e| json!(e.cursor) == body["cursor"]
                && serde_json::from_str::<Value>(&e.payload).unwrap() == body),
            "the body is the feed's event with its cursor: {body}"
        );
    }
    for (id, intent) in &rows {
        let sent = receiver.hits_for(*id);
        assert_eq!(
            sent.iter().filter(|h| h.answered == 200).count(),
            1,
            "row {id} delivered once"
        );
        assert!(
            sent.iter().all(|h| h.body == sent[0].body),
            "a retry sends the same row"
        );
        let d = h.store.webhook_delivery(*id).await.unwrap().unwrap();
        assert_eq!(d.intent_id, Some(*intent));
        assert_eq!(d.state(), DeliveryState::Delivered);
        assert_eq!(
            d.attempts,
            sent.len() as i64,
            "every attempt counted: {d:?}"
        );
        assert_eq!((d.failures, d.last_status), (0, Some(200)));
        assert!(d.delivered_at_ms.is_some());
        if sent.len() > 1 {
            let error = d.last_error.as_deref().unwrap_or("");
            assert!(
                error.contains("HTTP 500") && error.contains("receiver down"),
                "the failure is kept with its cause: {error}"
            );
        } else {
            assert_eq!(d.last_error, None);
        }
    }
    assert!(
        rows.iter().any(|(id, _)| receiver.hits_for(*id).len() > 1),
        "some row was retried"
    );
}

async fn delivery_stopped_mid_retry_resumes_after_a_restart_and_loses_nothing(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    // Webhooks configured before any of the test's events.
    h.store.register_webhook_endpoint(0).await.unwrap();
    let rows = two_paid_orders(&mut h).await;
    let (receiver, url) = Receiver::start(usize::MAX).await;
    let settings = settings(&h, &url);

    let task = Task::start(h.store.clone(), &settings);
    eventually("both intents' first rows failed twice", || async {
        let failing = deliveries(&h.store, DeliveryState::Failing).await;
        failing.len() == 2 && failing.iter().all(|d| d.failures >= 2)
    })
    .await;
    task.stop().await;

    // Stopped: nothing more is sent, nothing is delivered, and each attempt
    // is on record with its error.
    let sent = receiver.hits().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.hits().len(), sent, "a stopped task sends nothing");
    assert!(receiver.hits().iter().all(|h| h.answered == 500));
    assert!(deliveries(&h.store, DeliveryState::Delivered)
        .await
        .is_empty());
    let failing = deliveries(&h.store, DeliveryState::Failing).await;
    let heads: Vec<i64> = failing.iter().map(|d| d.outbox_id).collect();
    assert_eq!(heads, [rows[0].0, rows[1].0], "each intent's first row");
    for d in &failing {
        assert_eq!(d.attempts, receiver.hits_for(d.outbox_id).len() as i64);
        assert_eq!(d.failures, d.attempts, "{d:?}");
        assert_eq!(d.last_status, Some(500));
        assert!(d.last_error.as_deref().unwrap().contains("HTTP 500"));
        assert!(d.next_attempt_at_ms > d.last_attempt_at_ms.unwrap());
    }
    let waiting = deliveries(&h.store, DeliveryState::Pending).await;
    assert_eq!(waiting.len(), rows.len() - 2);
    assert!(
        waiting.iter().all(|d| d.attempts == 0),
        "no intent's later row goes before its first"
    );

    // A new process: a fresh connection pool and task, with nothing but
    // the database to go on. The receiver is back.
    receiver.failures_left.store(0, Ordering::SeqCst);
    let store = h.another_store().await;
    let task = Task::start(store.clone(), &settings);
    all_delivered(&store, rows.len()).await;
    task.stop().await;

    let hits = receiver.hits();
    let payloads = payloads(&store, &rows).await;
    for hit in &hits {
        assert_signed(hit, &payloads);
    }
    assert_in_order_per_intent(&hits, &rows);
    for (id, _) in &rows {
        let answered: Vec<u16> = receiver.hits_for(*id).iter().map(|h| h.answered).collect();
        assert_eq!(
            answered.iter().filter(|s| **s == 200).count(),
            1,
            "row {id}: {answered:?}"
        );
    }
}

async fn an_operator_can_have_a_delivered_row_sent_again(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    // Webhooks configured before any of the test's events.
    h.store.register_webhook_endpoint(0).await.unwrap();
    let rows = two_paid_orders(&mut h).await;
    let (receiver, url) = Receiver::start(0).await;
    let settings = settings(&h, &url);
    let task = Task::start(h.store.clone(), &settings);
    all_delivered(&h.store, rows.len()).await;
    let (first, second) = (rows[0].0, rows[1].0);

    // From the store, as a maintenance script would.
    let d = h
        .store
        .redeliver_webhook(first, SystemClock.now_ms())
        .await
        .unwrap()
        .expect("an outbox row");
    assert_eq!(
        (d.state(), d.delivered_at_ms),
        (DeliveryState::Pending, None)
    );
    eventually("the row is sent again", || async {
        receiver.hits_for(first).len() == 2
    })
    .await;
    all_delivered(&h.store, rows.len()).await;
    let again = receiver.hits_for(first);
    assert_eq!(again[0].body, again[1].body);
    assert!(again.iter().all(|h| h.answered == 200));
    assert_eq!(
        h.store.redeliver_webhook(999_999, 0).await.unwrap(),
        None,
        "no such outbox row"
    );

    // Over the API: operators only.
    let base = serve_api(&h, settings.clone()).await;
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: String, token: &'static str| {
        let req = http
            .request(method, format!("{base}{path}"))
            .bearer_auth(token);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status();
            (status, resp.json::<Value>().await.unwrap())
        }
    };
    let redeliver = |id: i64| format!("/v1/webhooks/deliveries/{id}/redeliver");
    let (st, v) = call(reqwest::Method::POST, redeliver(second), STOREFRONT).await;
    assert_eq!(st, reqwest::StatusCode::FORBIDDEN, "{v}");
    assert_eq!(v["error"]["code"], json!("forbidden"));
    let (st, _) = call(
        reqwest::Method::GET,
        "/v1/webhooks/deliveries?state=failing".into(),
        STOREFRONT,
    )
    .await;
    assert_eq!(st, reqwest::StatusCode::FORBIDDEN);
    let (st, v) = call(
        reqwest::Method::GET,
        "/v1/webhooks/deliveries?state=lost".into(),
        OPERATOR,
    )
    .await;
    assert_eq!(st, reqwest::StatusCode::BAD_REQUEST, "{v}");
    let (st, _) = call(reqwest::Method::POST, redeliver(999_999), OPERATOR).await;
    assert_eq!(st, reqwest::StatusCode::NOT_FOUND);
    assert_eq!(
        receiver.hits_for(second).len(),
        1,
        "refused calls change nothing"
    );

    let (st, v) = call(reqwest::Method::POST, redeliver(second), OPERATOR).await;
    assert_eq!(st, reqwest::StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["delivery"]["outbox_id"], json!(second));
    assert_eq!(v["delivery"]["state"], json!("pending"));
    assert_eq!(v["delivery"]["payload"]["status"], json!("confirming"));
    eventually("the row is sent again", || async {
        receiver.hits_for(second).len() == 2
    })
    .await;
    all_delivered(&h.store, rows.len()).await;
    task.stop().await;

    let (st, v) = call(
        reqwest::Method::GET,
        "/v1/webhooks/deliveries?state=delivered".into(),
        OPERATOR,
    )
    .await;
    assert_eq!(st, reqwest::StatusCode::OK, "{v}");
    let listed: Vec<(i64, i64)> = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["outbox_id"].as_i64().unwrap(),
                d["attempts"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut expected: Vec<(i64, i64)> = rows
        .iter()
        .map(|(id, _)| (*id, if *id == first || *id == second { 2 } else { 1 }))
        .collect();
    expected.reverse();
    assert_eq!(
        listed, expected,
        "newest first, redelivered rows sent twice"
    );
    let payloads = payloads(&h.store, &rows).await;
    for hit in receiver.hits() {
        assert_signed(&hit, &payloads);
    }
}

/// The API on a port of its own, over the harness's database.
async fn serve_api(h: &Harness, mut settings: Settings) -> String {
    for (role, token) in [("storefront", STOREFRONT), ("operator", OPERATOR)] {
        settings
            .api
            .tokens
            .insert(role.into(), vec![TokenTable::hash_token(token)]);
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let ctx = Context {
        settings,
        store: h.store.clone(),
        clock,
        watch: HashMap::from([(Network::Litecoin, h.watch.clone())]),
        intents: h.intents.clone(),
        reconciler: h.reconciler.clone(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = ApiState::new(ctx).expect("tokens");
    tokio::spawn(api::serve(listener, state, std::future::pending::<()>()));
    base
}

// Issue 21, found 6: every event was enrolled for delivery while no URL was
// set, so a receiver configured later was sent the whole history.
async fn webhooks_turned_on_later_send_only_what_happens_after(b: Backend) {
    let mut h = Harness::new(b, Network::Litecoin, 3).await;
    let before = two_paid_orders(&mut h).await;
    assert_eq!(
        h.count("SELECT COUNT(*) FROM webhook_deliveries").await,
        0,
        "nothing is enrolled while no endpoint is configured"
    );

    let (receiver, url) = Receiver::start(0).await;
    let task = Task::start(h.store.clone(), &settings(&h, &url));
    eventually("the endpoint is recorded", || async {
        h.count("SELECT COUNT(*) FROM webhook_endpoint").await == 1
    })
    .await;
    let since = h.count("SELECT since_seq FROM webhook_endpoint").await;
    assert_eq!(
        since,
        h.count("SELECT MAX(seq) FROM outbox").await,
        "the feed's cursor when it was configured"
    );

    h.import_pool(1).await;
    let later = h.create("order", "wh-later", "LTC", "100").await;
    h.pay(&later.address, Asset::Ltc, later.amount_due);
    h.mine(3);
    h.sync().await;
    let after: Vec<i64> = h
        .rows(&format!(
            "SELECT id FROM outbox WHERE intent_id = {} ORDER BY id",
            later.id
        ))
        .await
        .iter()
        .map(|r| r.int("id"))
        .collect();
    assert!(!after.is_empty());
    all_delivered(&h.store, after.len()).await;
    task.stop().await;
    let sent: Vec<i64> = receiver.hits().iter().map(|hit| hit.delivery).collect();
    assert_eq!(sent, after, "only what happened after, in order");
    assert!(before.iter().all(|(id, _)| !sent.contains(id)));
}

/// Before migration 23 every event was enrolled: an installation that never
/// sent a webhook holds only rows nobody will send (they would keep their
/// events from retention for ever); one that has sent keeps its endpoint
/// and its backlog.
async fn an_upgrade_drops_rows_enrolled_with_no_url_and_keeps_an_endpoint_in_use(b: Backend) {
    for used in [false, true] {
        let db = TestDb::empty(b).await;
        db.store.migrate_until(22).await.unwrap();
        for seq in 1..=3 {
            db.store
                .execute_raw(&format!(
                    "INSERT INTO outbox (topic, payload, created_at, seq, kind, reference) \
                     VALUES ('intent.status', '{{}}', 1, {seq}, 'order', 'old')"
                ))
                .await
                .unwrap();
        }
        if used {
            db.store
                .execute_raw(
                    "UPDATE webhook_deliveries SET attempts = 1, last_attempt_at = 2 \
                     WHERE seq = 1",
                )
                .await
                .unwrap();
        }
        db.store.migrate().await.unwrap();
        let count = |sql: &'static str| {
            let store = db.store.clone();
            async move { store.count_raw(sql).await.unwrap() }
        };
        let (endpoints, open) = (
            count("SELECT COUNT(*) FROM webhook_endpoint").await,
            count("SELECT COUNT(*) FROM webhook_deliveries WHERE delivered_at IS NULL").await,
        );
        if used {
            assert_eq!(
                (endpoints, open),
                (1, 3),
                "an endpoint in use keeps its backlog"
            );
        } else {
            assert_eq!((endpoints, open), (0, 0), "nobody would ever send these");
        }
    }
}

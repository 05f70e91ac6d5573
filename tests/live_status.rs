//! Issue 19, live status for checkout pages: an intent's status as
//! server-sent events over real HTTP, for the storefront's token and for
//! the customer's view token; resumed with Last-Event-ID after a
//! disconnect without a gap; many listeners at once; a view token opens
//! its own intent's status and payment instructions and nothing else; and
//! the hosted payment page. On SQLite and PostgreSQL.

#[macro_use]
mod common;

use std::time::Duration;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, STOREFRONT};
use common::sse::{EventStream, SseEvent};
use common::{Backend, Harness};
use paywatch::settings::ApiSettings;
use paywatch::store::IntentRecord;
use paywatch_core::{Asset, Network};
use reqwest::{Method, StatusCode};
use serde_json::Value;

on_both_databases!(
    a_checkout_page_follows_its_intent_from_awaiting_to_paid,
    a_listener_that_reconnects_misses_nothing_and_sees_nothing_twice,
    many_listeners_each_see_their_own_intent_change_once,
    a_view_token_opens_its_own_payment_and_nothing_else,
    the_payment_page_shows_everything_a_payer_needs_without_its_script,
    checkout_pages_beyond_the_stream_budget_are_told_to_retry_and_then_served,
    one_checkout_opened_many_times_never_refuses_another_checkout_or_the_storefront,
    one_client_behind_the_proxy_opening_many_pages_never_refuses_another_clients_checkout
);

const WAIT: Duration = Duration::from_secs(20);

/// A Litecoin harness (two confirmations) serving its API.
async fn world(b: Backend) -> (Harness, ApiClient) {
    world_with(b, |_| {}).await
}

/// The same, with the API's settings changed by `tune`.
async fn world_with(b: Backend, tune: impl FnOnce(&mut ApiSettings)) -> (Harness, ApiClient) {
    let mut h = Harness::new(b, Network::Litecoin, 2).await;
    h.import_pool(20).await;
    let mut ctx = context_with_role_tokens(&h);
    tune(&mut ctx.settings.api);
    let client = ApiClient::serve(ctx).await;
    (h, client)
}

fn view_token(i: &IntentRecord) -> String {
    i.view_token.clone().expect("a new intent has a view token")
}

/// Pays `i` in full and mines the block that carries it.
async fn pay_and_see(h: &mut Harness, i: &IntentRecord) {
    h.pay(&i.address, Asset::Ltc, i.amount_due);
    h.mine(1);
    h.sync().await;
}

/// Mines until `i`'s payment is final and settled.
async fn confirm(h: &mut Harness) {
    h.mine(2);
    h.sync().await;
}

fn statuses(events: &[SseEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.event == "status" || e.event == "intent.status")
        .map(|e| {
            let d = if e.event == "status" {
                &e.data
            } else {
                &e.data["data"]
            };
            d["status"].as_str().unwrap_or("?").to_owned()
        })
        .collect()
}

async fn a_checkout_page_follows_its_intent_from_awaiting_to_paid(b: Backend) {
    let (mut h, api) = world(b).await;
    let i = h.create("order", "live-1", "LTC", "50").await;
    let token = view_token(&i);
    let mut customer =
        EventStream::open(&format!("{}/v1/view/{token}/events", api.base), None, None).await;
    let mut shop = EventStream::open(
        &format!("{}/v1/intents/{}/events", api.base, i.id),
        Some(STOREFRONT),
        None,
    )
    .await;

    // Each opens with the intent as it stands now.
    let first = customer.next(WAIT).await.expect("a snapshot");
    assert_eq!(first.event, "snapshot");
    assert_eq!(first.data["status"], "awaiting_payment");
    assert_eq!(first.data["address"], i.address.as_str());
    assert_eq!(first.data["amount_due"], i.amount_due.0.to_string());
    let shop_first = shop.next(WAIT).await.expect("a snapshot");
    assert_eq!(shop_first.event, "snapshot");
    assert_eq!(shop_first.data["id"], i.id);
    assert_eq!(shop_first.data["reference"], "live-1");

    pay_and_see(&mut h, &i).await;
    let seen = customer
        .until(WAIT, |e| {
            e.event == "status" && e.data["status"] == "confirming"
        })
        .await;
    assert_eq!(seen.last().unwrap().data["reason_code"], "seen_in_time");
    confirm(&mut h).await;
    let settled = customer.until(WAIT, |e| e.event == "settlement").await;
    let all: Vec<SseEvent> = seen.iter().chain(&settled).cloned().collect();
    assert_eq!(statuses(&all), ["confirming", "paid"], "{all:#?}");
    assert_eq!(settled.last().unwrap().data["event"], "settlement.settled");
    let paid = all.iter().find(|e| e.data["status"] == "paid").unwrap();
    assert_eq!(paid.data["paid"], true);
    assert_eq!(paid.data["amount_outstanding"], "0");
    // What a customer sees names no reference, account or support reason.
    for e in &all {
        for hidden in ["reference", "account", "reason", "usd_cents", "exception"] {
            assert!(
                e.data.get(hidden).is_none(),
                "{hidden} shown to a customer: {e:?}"
            );
        }
    }
    // Ids are feed cursors, rising.
    let ids: Vec<i64> = all.iter().map(SseEvent::cursor).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // The storefront's stream carries the feed's own events, in the same
    // order and under the same cursors as GET /v1/events.
    let shop_events = shop.until(WAIT, |e| e.event == "settlement").await;
    assert_eq!(statuses(&shop_events), ["confirming", "paid"]);
    let (st, feed) = api
        .call(
            Method::GET,
            "/v1/events?after=0&limit=1000",
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let feed_of_intent: Vec<(i64, String)> = feed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["intent_id"] == i.id && e["cursor"].as_i64() > Some(shop_first.cursor()))
        .map(|e| {
            (
                e["cursor"].as_i64().unwrap(),
                e["topic"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let streamed: Vec<(i64, String)> = shop_events
        .iter()
        .map(|e| (e.cursor(), e.event.clone()))
        .collect();
    assert_eq!(streamed, feed_of_intent);
    h.dispose().await;
}

async fn a_listener_that_reconnects_misses_nothing_and_sees_nothing_twice(b: Backend) {
    let (mut h, api) = world(b).await;
    let i = h.create("order", "live-2", "LTC", "50").await;
    let url = format!("{}/v1/view/{}/events", api.base, view_token(&i));
    let mut stream = EventStream::open(&url, None, None).await;
    let snapshot = stream.next(WAIT).await.unwrap();
    pay_and_see(&mut h, &i).await;
    let seen = stream
        .until(WAIT, |e| e.data["status"] == "confirming")
        .await;
    let last_id = seen.last().unwrap().cursor();
    assert!(last_id > snapshot.cursor());
    // The connection drops (a phone going through a tunnel); the payment
    // becomes final while nobody listens.
    drop(stream);
    confirm(&mut h).await;
    assert_eq!(h.intent(i.id).await.status.as_str(), "paid");

    // Back with the last id it saw: no snapshot, the events it missed, in
    // order, and nothing it had.
    let mut back = EventStream::open(&url, None, Some(last_id)).await;
    let missed = back.until(WAIT, |e| e.event == "settlement").await;
    assert!(missed.iter().all(|e| e.event != "snapshot"), "{missed:#?}");
    assert!(missed.iter().all(|e| e.cursor() > last_id), "{missed:#?}");
    assert_eq!(statuses(&missed), ["paid"]);

    // Resuming from where it had been all along replays the whole story.
    let mut replay = EventStream::open(&url, None, Some(snapshot.cursor())).await;
    let everything = replay.until(WAIT, |e| e.event == "settlement").await;
    assert_eq!(statuses(&everything), ["confirming", "paid"]);

    // An id beyond anything the feed holds (from another database, a
    // restored one) starts again from the intent's state.
    let mut elsewhere = EventStream::open(&url, None, Some(1_000_000_000)).await;
    let first = elsewhere.next(WAIT).await.unwrap();
    assert_eq!(
        (first.event.as_str(), &first.data["status"]),
        ("snapshot", &Value::from("paid"))
    );

    // A Last-Event-ID that no stream sent is refused, named.
    let refused = reqwest::Client::new()
        .get(&url)
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(refused.text().await.unwrap().contains("Last-Event-ID"));
    h.dispose().await;
}

async fn many_listeners_each_see_their_own_intent_change_once(b: Backend) {
    // Forty tabs of one page, past the default of eight a page, and fifty
    // streams from this one address, past the default of 32 a client.
    let (mut h, api) = world_with(b, |a| {
        a.max_streams_per_page = 40;
        a.max_streams_per_client = 50;
    })
    .await;
    let a = h.create("order", "live-a", "LTC", "50").await;
    let other = h.create("order", "live-b", "LTC", "70").await;
    // Forty browsers on one checkout, and ten on another intent's page.
    let mut on_a = Vec::new();
    for _ in 0..40 {
        let url = format!("{}/v1/view/{}/events", api.base, view_token(&a));
        on_a.push(EventStream::open(&url, None, None).await);
    }
    let mut on_other = Vec::new();
    for _ in 0..10 {
        let url = format!("{}/v1/view/{}/events", api.base, view_token(&other));
        on_other.push(EventStream::open(&url, None, None).await);
    }
    for s in on_a.iter_mut().chain(on_other.iter_mut()) {
        assert_eq!(s.next(WAIT).await.unwrap().event, "snapshot");
    }
    pay_and_see(&mut h, &a).await;
    confirm(&mut h).await;
    let mut stories = Vec::new();
    for s in &mut on_a {
        let got = s.until(WAIT, |e| e.event == "settlement").await;
        stories.push(
            got.iter()
                .map(|e| (e.cursor(), e.event.clone(), e.data["status"].clone()))
                .collect::<Vec<_>>(),
        );
    }
    // Every listener got the same events, each once.
    assert!(stories.windows(2).all(|w| w[0] == w[1]), "{stories:#?}");
    let one = &stories[0];
    let statuses_of_one: Vec<&Value> = one
        .iter()
        .filter(|e| e.1 == "status")
        .map(|e| &e.2)
        .collect();
    assert_eq!(
        statuses_of_one,
        [&Value::from("confirming"), &Value::from("paid")]
    );
    // The other intent's listeners heard nothing of it.
    for s in &mut on_other {
        assert!(
            s.next(Duration::from_millis(600)).await.is_none(),
            "a listener of another intent was sent this one's events"
        );
    }
    h.dispose().await;
}

async fn a_view_token_opens_its_own_payment_and_nothing_else(b: Backend) {
    let (h, api) = world(b).await;
    let i = h.create("order", "view-1", "LTC", "50").await;
    let token = view_token(&i);
    assert_eq!(token.len(), 64);

    // The storefront gets the token and the page's path with the intent.
    let (st, shown) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{}", i.id),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(shown["view_token"], token.as_str());
    assert_eq!(shown["pay_page"], format!("/pay/{token}"));

    // Without any bearer token: the status and the payment instructions.
    let (st, view) = api
        .call(Method::GET, &format!("/v1/view/{token}"), None, None, None)
        .await;
    assert_eq!(st, StatusCode::OK, "{view}");
    assert_eq!(view["address"], i.address.as_str());
    assert_eq!(view["amount_due"], i.amount_due.0.to_string());
    assert_eq!(view["status"], "awaiting_payment");
    assert_eq!(view["network"], "litecoin");
    assert!(view["uri"].as_str().unwrap().starts_with("litecoin:"));
    for hidden in ["id", "reference", "account", "rate", "reason", "view_token"] {
        assert!(
            view.get(hidden).is_none(),
            "{hidden} shown to a customer: {view}"
        );
    }
    let (st, qr) = api
        .call(
            Method::GET,
            &format!("/v1/view/{token}/qr.svg"),
            None,
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, qr["image"].as_str()),
        (StatusCode::OK, Some("image/svg+xml"))
    );

    // A token opens nothing but its view: not the storefront's endpoints.
    for (method, path) in [
        (Method::GET, format!("/v1/intents/{}", i.id)),
        (Method::GET, format!("/v1/intents/{}/events", i.id)),
        (Method::POST, format!("/v1/intents/{}/declared-paid", i.id)),
        (Method::GET, "/v1/events".to_owned()),
        (Method::GET, "/v1/review-queue".to_owned()),
    ] {
        let (st, v) = api
            .call(method.clone(), &path, Some(&token), None, None)
            .await;
        assert_eq!(
            st,
            StatusCode::UNAUTHORIZED,
            "{method} {path} with a view token: {v}"
        );
    }
    // Another token, a near miss, or no token at all finds nothing.
    let mut near = token.clone().into_bytes();
    near[0] = if near[0] == b'a' { b'b' } else { b'a' };
    let near = String::from_utf8(near).unwrap();
    for wrong in [near.as_str(), "0", "%2e%2e%2fintents%2f1", &"f".repeat(64)] {
        let (st, v) = api
            .call(Method::GET, &format!("/v1/view/{wrong}"), None, None, None)
            .await;
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{wrong}"
        );
    }
    let (st, _) =
        EventStream::try_open(&format!("{}/v1/view/{near}/events", api.base), None, None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    // The storefront's stream wants a role's token.
    let (st, _) = EventStream::try_open(
        &format!("{}/v1/intents/{}/events", api.base, i.id),
        None,
        None,
    )
    .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    let (st, _) = EventStream::try_open(
        &format!("{}/v1/intents/{}/events", api.base, i.id),
        Some(OPERATOR),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    h.dispose().await;
}

async fn the_payment_page_shows_everything_a_payer_needs_without_its_script(b: Backend) {
    let (h, api) = world(b).await;
    let i = h.create("order", "page-1", "LTC", "50").await;
    let token = view_token(&i);
    let resp = reqwest::get(format!("{}/pay/{token}", api.base))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(resp.headers()["referrer-policy"], "no-referrer");
    let page = resp.text().await.unwrap();
    let coin = i.amount_due.to_decimal_string(8);
    for needed in [
        i.address.as_str(),
        coin.as_str(),
        "Litecoin</strong> network only",
        "Waiting for your payment.",
        "id=\"time-left\"",
        "is not proof of payment",
        "do not send to it again",
        "on another network is a different payment",
        &format!("/v1/view/{token}/qr.svg"),
        "/assets/pay.js",
    ] {
        assert!(page.contains(needed), "the page lacks {needed:?}:\n{page}");
    }
    assert!(
        !page.contains("page-1"),
        "the page shows the order's reference"
    );
    let missing = reqwest::get(format!("{}/pay/{}", api.base, "0".repeat(64)))
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    h.dispose().await;
}

async fn checkout_pages_beyond_the_stream_budget_are_told_to_retry_and_then_served(b: Backend) {
    // Three places: one the storefront's own, two for payers.
    let (h, api) = world_with(b, |a| {
        a.max_event_streams = 3;
        a.event_stream_secs = 2;
    })
    .await;
    let i = h.create("order", "budget-1", "LTC", "50").await;
    let url = format!("{}/v1/view/{}/events", api.base, view_token(&i));
    let mut first = EventStream::open(&url, None, None).await;
    let _second = EventStream::open(&url, None, None).await;
    // The third is refused at once, told when to come back, and the
    // storefront's own calls are still answered.
    let refused = reqwest::Client::new().get(&url).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    let (st, _) = api
        .call(
            Method::GET,
            &format!("/v1/intents/{}", i.id),
            Some(STOREFRONT),
            None,
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    // Streams end after event_stream_secs; their places are free again.
    assert_eq!(first.next(WAIT).await.unwrap().event, "snapshot");
    assert!(
        first.next(Duration::from_secs(10)).await.is_none(),
        "the stream did not end"
    );
    let mut again = None;
    for _ in 0..50 {
        let (st, stream) = EventStream::try_open(&url, None, None).await;
        if st == StatusCode::OK {
            again = stream.ok();
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut again = again.expect("a place came free once the streams ended");
    assert_eq!(again.next(WAIT).await.unwrap().event, "snapshot");
    h.dispose().await;
}

/// Issue 38, found 2: one view token opened again and again held every
/// place, refusing every other checkout's live status and the storefront's.
/// A page now holds a few places at most, payers share most of the budget
/// and the storefront keeps a share of its own.
async fn one_checkout_opened_many_times_never_refuses_another_checkout_or_the_storefront(
    b: Backend,
) {
    // Eight places: two the storefront's, six for payers, three a page.
    let (h, api) = world_with(b, |a| {
        a.max_event_streams = 8;
        a.max_streams_per_page = 3;
    })
    .await;
    let url = |i: &IntentRecord| format!("{}/v1/view/{}/events", api.base, view_token(i));
    let mut intents = Vec::new();
    for n in 0..3 {
        intents.push(h.create("order", &format!("page-{n}"), "LTC", "50").await);
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(EventStream::open(&url(&intents[0]), None, None).await);
    }
    let (st, refused) = EventStream::try_open(&url(&intents[0]), None, None).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
    let body = refused.err().expect("a refusal");
    assert!(
        body.contains("too_many_streams") && body.contains("this payment page"),
        "{body}"
    );

    // Another checkout still gets its live status.
    for _ in 0..3 {
        held.push(EventStream::open(&url(&intents[1]), None, None).await);
    }
    let (st, refused) = EventStream::try_open(&url(&intents[2]), None, None).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "payers' share is full");
    assert!(refused.err().unwrap().contains("payers"));
    // The storefront's share is its own.
    let store_url = format!("{}/v1/intents/{}/events", api.base, intents[2].id);
    for _ in 0..2 {
        let mut s = EventStream::open(&store_url, Some(STOREFRONT), None).await;
        assert_eq!(s.next(WAIT).await.unwrap().event, "snapshot");
        held.push(s);
    }
    drop(held);
    h.dispose().await;
}

/// Issue 38 (stream budgets, a cap per client): one client behind the
/// proxy opens the live status of many checkouts, each under its page's
/// cap. It holds at most `api.max_streams_per_client`; another client of
/// the same proxy still gets its checkout's live status.
async fn one_client_behind_the_proxy_opening_many_pages_never_refuses_another_clients_checkout(
    b: Backend,
) {
    let (h, api) = world_with(b, |a| {
        a.max_event_streams = 64;
        a.max_streams_per_client = 3;
        a.trusted_proxies = vec!["127.0.0.1".into()];
    })
    .await;
    let mut pages = Vec::new();
    for n in 0..5 {
        let i = h.create("order", &format!("many-{n}"), "LTC", "50").await;
        pages.push(format!("{}/v1/view/{}/events", api.base, view_token(&i)));
    }
    let open = |url: String, client: &'static str| async move {
        reqwest::Client::new()
            .get(url)
            .header("x-forwarded-for", client)
            .send()
            .await
            .unwrap()
    };
    let mut held = Vec::new();
    for url in &pages[..3] {
        let r = open(url.clone(), "203.0.113.5").await;
        assert_eq!(r.status(), StatusCode::OK);
        // A proxy in front (nginx) must pass each event on as it comes.
        assert_eq!(r.headers()["x-accel-buffering"], "no");
        held.push(r);
    }
    let refused = open(pages[3].clone(), "203.0.113.5").await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["retry-after"], "5");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("api.max_streams_per_client"),
        "{body}"
    );
    // The proxy's other client: its checkout is live.
    let mut other = EventStream::from_response(open(pages[4].clone(), "203.0.113.6").await);
    assert_eq!(other.next(WAIT).await.unwrap().event, "snapshot");
    drop(held);
    h.dispose().await;
}

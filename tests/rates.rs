//! The HTTP JSON rate source against a real HTTP server on loopback.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use paywatch::clock::{Clock, ManualClock};
use paywatch::intents::{quote, HttpJsonRates, RateBook, RateError, RateSource};
use paywatch_core::{Amount, Asset};
use rust_decimal::Decimal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const NOW_S: i64 = 1_700_000_000;

/// Serves whatever body is current, counting requests; status 0 hangs.
async fn server(body: Arc<Mutex<(u16, String)>>, hits: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (status, body) = body.lock().unwrap().clone();
            hits.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                if status == 0 {
                    // A source that hangs: never a byte back.
                    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                    return;
                }
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/rates")
}

/// A served body: one rate, published now.
fn rates_now(asset: &str, usd: &str) -> Arc<Mutex<(u16, String)>> {
    Arc::new(Mutex::new((
        200,
        format!(r#"{{"timestamp": {NOW_S}, "rates": {{"{asset}": "{usd}"}}}}"#),
    )))
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(NOW_S * 1000))
}

#[tokio::test]
async fn fresh_http_rates_are_read_exactly_from_strings_and_numbers() {
    let body = Arc::new(Mutex::new((
        200,
        format!(
            r#"{{"timestamp": {}, "rates": {{"BTC": "65000.12345678", "ETH": 3000.1, "DOGE": "0.1"}}}}"#,
            NOW_S - 10
        ),
    )));
    let url = server(body, Arc::new(AtomicUsize::new(0))).await;
    let clock = clock();
    let rates = HttpJsonRates::new(url.clone(), 300, 30, clock.clone());
    let btc = rates.usd_rate(Asset::Btc).await.unwrap();
    assert_eq!(btc.usd_per_coin.to_string(), "65000.12345678");
    // Scheme, host and port: a price API's key lives in its path or query.
    assert_eq!(btc.source, url.trim_end_matches("/rates"));
    assert_eq!(
        btc.at_ms,
        (NOW_S - 10) * 1000,
        "the rate is dated by its publisher, not by us"
    );
    // A JSON number is taken from its text: no float in between.
    let eth = rates.usd_rate(Asset::Eth).await.unwrap();
    assert_eq!(eth.usd_per_coin, "3000.1".parse::<Decimal>().unwrap());
    // 100 USD at 3000.1 = 0.0333322222… ETH, rounded up to 8 places.
    assert_eq!(
        quote(10_000, eth.usd_per_coin, 18, 8).unwrap(),
        Amount(33_332_230_000_000_000)
    );
    assert_eq!(
        rates.usd_rate(Asset::Sol).await.unwrap_err(),
        RateError::Missing(Asset::Sol)
    );
}

#[tokio::test]
async fn a_rate_stamped_in_the_future_is_refused_as_rate_unavailable() {
    // A feed running an hour ahead, and one sending milliseconds: either
    // would keep a frozen rate fresh for ever.
    for (stamp, ahead) in [(NOW_S + 3600, 3600), (NOW_S * 1000, NOW_S * 1000 - NOW_S)] {
        let body = Arc::new(Mutex::new((
            200,
            format!(r#"{{"timestamp": {stamp}, "rates": {{"BTC": "65000"}}}}"#),
        )));
        let url = server(body, Arc::new(AtomicUsize::new(0))).await;
        let rates = HttpJsonRates::new(url, 300, 30, clock());
        let err = rates.usd_rate(Asset::Btc).await.unwrap_err();
        assert_eq!(
            err,
            RateError::FromTheFuture {
                asset: Asset::Btc,
                ahead_secs: ahead,
                max_skew_secs: 60
            }
        );
        assert!(err.to_string().contains("in the future"), "{err}");
        let intent_error = paywatch::intents::IntentError::RateUnavailable(err);
        assert_eq!(intent_error.code(), "rate_unavailable");
    }
    // Within the skew clocks may differ by: accepted.
    let body = Arc::new(Mutex::new((
        200,
        format!(
            r#"{{"timestamp": {}, "rates": {{"BTC": "65000"}}}}"#,
            NOW_S + 30
        ),
    )));
    let url = server(body, Arc::new(AtomicUsize::new(0))).await;
    let rates = HttpJsonRates::new(url, 300, 30, clock());
    assert!(rates.usd_rate(Asset::Btc).await.is_ok());
}

#[tokio::test]
async fn a_rate_older_than_the_maximum_age_is_unavailable() {
    let body = Arc::new(Mutex::new((
        200,
        format!(
            r#"{{"timestamp": {}, "rates": {{"BTC": "65000"}}}}"#,
            NOW_S - 301
        ),
    )));
    let url = server(body, Arc::new(AtomicUsize::new(0))).await;
    let rates = HttpJsonRates::new(url, 300, 30, clock());
    let err = rates.usd_rate(Asset::Btc).await.unwrap_err();
    assert_eq!(
        err,
        RateError::Stale {
            asset: Asset::Btc,
            age_secs: 301,
            max_age_secs: 300
        }
    );
    assert!(err.to_string().contains("301 s old"), "{err}");
}

#[tokio::test]
async fn rates_are_cached_and_a_failed_refresh_falls_back_only_while_they_are_fresh() {
    let body = rates_now("LTC", "100");
    let hits = Arc::new(AtomicUsize::new(0));
    let url = server(body.clone(), hits.clone()).await;
    let clock = clock();
    let rates = HttpJsonRates::new(url, 120, 30, clock.clone());
    rates.usd_rate(Asset::Ltc).await.unwrap();
    rates.usd_rate(Asset::Ltc).await.unwrap();
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "a second quote within refresh_secs reuses the answer"
    );

    // The source breaks; the cached rate serves while younger than max age…
    *body.lock().unwrap() = (500, "oops".into());
    clock.advance_secs(60);
    assert_eq!(
        rates.usd_rate(Asset::Ltc).await.unwrap().usd_per_coin,
        Decimal::from(100)
    );
    // The refresh runs in the background.
    wait_for_hits(&hits, 2).await;
    // …and is refused once it is older.
    clock.advance_secs(61);
    assert!(matches!(
        rates.usd_rate(Asset::Ltc).await,
        Err(RateError::Stale { .. })
    ));
}

#[tokio::test]
async fn a_broken_source_is_an_error_that_names_the_source_and_the_problem() {
    let body = Arc::new(Mutex::new((
        200,
        r#"{"timestamp": 1, "rates": {"BTC": "1e5"}}"#.to_owned(),
    )));
    let url = server(body.clone(), Arc::new(AtomicUsize::new(0))).await;
    let err = HttpJsonRates::new(url.clone(), 300, 0, clock())
        .usd_rate(Asset::Btc)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("rates.BTC: '1e5' is not a decimal number"),
        "{err}"
    );
    // Named by its origin, never its path or query (which may hold a key).
    assert!(
        err.to_string().contains(url.trim_end_matches("/rates")),
        "{err}"
    );

    *body.lock().unwrap() = (503, "{}".into());
    let err = HttpJsonRates::new(url, 300, 0, clock())
        .usd_rate(Asset::Btc)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 503"), "{err}");

    let err = HttpJsonRates::new("http://127.0.0.1:9/nothing".into(), 300, 0, clock())
        .usd_rate(Asset::Btc)
        .await;
    assert!(matches!(err, Err(RateError::Source { .. })));
}

#[tokio::test]
async fn stablecoins_are_at_par_unless_configured_otherwise() {
    let body = Arc::new(Mutex::new((
        200,
        format!(r#"{{"timestamp": {NOW_S}, "rates": {{"USDT": "0.9990"}}}}"#),
    )));
    let url = server(body, Arc::new(AtomicUsize::new(0))).await;
    let clock = clock();
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let source = Arc::new(HttpJsonRates::new(url, 300, 30, dyn_clock.clone()));
    let at_par = RateBook::new(source.clone(), true, dyn_clock.clone());
    let usdt = at_par.usd_rate(Asset::Usdt).await.unwrap();
    assert_eq!(
        (usdt.usd_per_coin, usdt.source.as_str()),
        (Decimal::ONE, "par")
    );
    let market = RateBook::new(source, false, dyn_clock);
    assert_eq!(
        market.usd_rate(Asset::Usdt).await.unwrap().usd_per_coin,
        "0.999".parse::<Decimal>().unwrap()
    );
    assert!(
        market.usd_rate(Asset::Usdc).await.is_err(),
        "USDC is not published by this source"
    );
}

async fn wait_for_hits(hits: &AtomicUsize, n: usize) {
    for _ in 0..200 {
        if hits.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "the source was asked {} times, not {n}",
        hits.load(Ordering::SeqCst)
    );
}

/// The rate source hangs once its answer is due a refresh. Quotes keep
/// coming from the cached rate, all at once, while it is within its maximum
/// age: one refresh runs in the background, never one per quote under a
/// lock (before, each quote waited out the 10 s timeout in turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_rate_source_holds_up_no_quote_while_the_cached_rate_is_fresh() {
    let body = rates_now("LTC", "100");
    let hits = Arc::new(AtomicUsize::new(0));
    let url = server(body.clone(), hits.clone()).await;
    let clock = clock();
    let rates = Arc::new(HttpJsonRates::new(url, 120, 30, clock.clone()));
    rates.usd_rate(Asset::Ltc).await.unwrap();

    body.lock().unwrap().0 = 0;
    clock.advance_secs(60);
    let started = std::time::Instant::now();
    let quotes: Vec<_> = (0..20)
        .map(|_| {
            let rates = rates.clone();
            tokio::spawn(async move { rates.usd_rate(Asset::Ltc).await })
        })
        .collect();
    for q in quotes {
        let rate = q.await.unwrap().unwrap();
        assert_eq!(rate.usd_per_coin, Decimal::from(100));
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "20 quotes took {:?} behind a hanging source",
        started.elapsed()
    );
    wait_for_hits(&hits, 2).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "one refresh, not one per quote"
    );
}

/// An answer far larger than any rates list is refused, not read whole.
#[tokio::test]
async fn an_oversized_rates_answer_is_refused_unread() {
    let huge = format!(
        r#"{{"timestamp": {NOW_S}, "rates": {{"LTC": "100"}}, "pad": "{}"}}"#,
        "x".repeat(2 << 20)
    );
    let url = server(
        Arc::new(Mutex::new((200, huge))),
        Arc::new(AtomicUsize::new(0)),
    )
    .await;
    let err = HttpJsonRates::new(url, 300, 30, clock())
        .usd_rate(Asset::Ltc)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}

/// A price API's key in the URL's path and query, and a user:password,
/// never reach an intent's rate source nor an error.
#[tokio::test]
async fn the_rate_sources_key_is_never_shown() {
    let body = rates_now("BTC", "65000");
    let url = server(body.clone(), Arc::new(AtomicUsize::new(0))).await;
    let keyed = url
        .replace("http://", "http://user:PASSW0RD@")
        .replace("/rates", "/v1/KEY123/rates?apikey=QK456");
    let rate = HttpJsonRates::new(keyed.clone(), 300, 30, clock())
        .usd_rate(Asset::Btc)
        .await
        .unwrap();
    *body.lock().unwrap() = (503, "{}".into());
    let err = HttpJsonRates::new(keyed, 300, 30, clock())
        .usd_rate(Asset::Btc)
        .await
        .unwrap_err()
        .to_string();
    for shown in [&rate.source, &err] {
        for secret in ["KEY123", "QK456", "PASSW0RD"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
    assert!(
        rate.source.starts_with("http://127.0.0.1:"),
        "{}",
        rate.source
    );
}

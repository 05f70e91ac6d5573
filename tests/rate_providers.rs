//! The exchanges as rate providers, each served from a real HTTP server on
//! loopback: their recorded real answers (tests/fixtures/rates/), the
//! median of several, quorum and spread, and how each one fails.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Backend, Harness};
use paywatch::clock::{Clock, ManualClock};
use paywatch::intents::{
    ExchangePolicy, ExchangeRates, IntentError, IntentPolicy, IntentService, RateBook, RateError,
    RateSource,
};
use paywatch::settings::Settings;
use paywatch_core::{Asset, Network};
use rust_decimal::Decimal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const NOW_S: i64 = 1_700_000_000;

/// What a server answers: status (0 hangs), content type, body.
#[derive(Clone)]
struct Reply(u16, &'static str, String);

fn json(body: impl Into<String>) -> Reply {
    Reply(200, "application/json", body.into())
}

/// A provider's server: answers every request with the current reply,
/// recording the paths asked.
#[derive(Clone)]
struct Server {
    base: String,
    reply: Arc<Mutex<Reply>>,
    hits: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(reply: Reply) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = Server {
            base,
            reply: Arc::new(Mutex::new(reply)),
            hits: Arc::new(AtomicUsize::new(0)),
            paths: Arc::new(Mutex::new(Vec::new())),
        };
        let s = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let Reply(status, content_type, body) = s.reply.lock().unwrap().clone();
                s.hits.fetch_add(1, Ordering::SeqCst);
                let paths = s.paths.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buf[..n]);
                    if let Some(path) = request.split_whitespace().nth(1) {
                        paths.lock().unwrap().push(path.to_owned());
                    }
                    if status == 0 {
                        // A provider that accepts and never answers.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    }
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        server
    }

    fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/rates/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A provider's real answer shape with BTC at `price` (a JSON token: a
/// string for most, a number for CoinGecko) published at `at_s`.
fn btc_answer(provider: &str, price: &str, at_s: i64) -> String {
    match provider {
        "coinbase" => format!(r#"{{"data":{{"base":"BTC","currency":"USD","amount":{price}}}}}"#),
        "kraken" => format!(r#"{{"error":[],"result":{{"XXBTZUSD":{{"c":[{price},"0.1"]}}}}}}"#),
        "bitstamp" => format!(r#"{{"timestamp":"{at_s}","last":{price}}}"#),
        "binance" => format!(r#"[{{"symbol":"BTCUSDT","price":{price}}}]"#),
        "coingecko" => format!(r#"{{"bitcoin":{{"usd":{price},"last_updated_at":{at_s}}}}}"#),
        other => panic!("no answer for {other}"),
    }
}

/// `"65000.1"` for string-priced providers, `65000.1` for CoinGecko.
fn priced(provider: &str, usd: &str) -> String {
    if provider == "coingecko" {
        usd.to_owned()
    } else {
        format!("\"{usd}\"")
    }
}

fn policy(quorum: usize) -> ExchangePolicy {
    ExchangePolicy {
        quorum,
        max_spread_bps: 200,
        max_age_secs: 300,
        refresh_secs: 30,
        timeout: Duration::from_secs(1),
    }
}

fn rates(
    servers: &[(&str, &Server)],
    policy: ExchangePolicy,
    clock: &Arc<ManualClock>,
) -> ExchangeRates {
    let providers: Vec<(String, Option<String>)> = servers
        .iter()
        .map(|(name, s)| (name.to_string(), Some(s.base.clone())))
        .collect();
    let clock: Arc<dyn Clock> = clock.clone();
    ExchangeRates::new(&providers, policy, clock).unwrap()
}

fn clock_at(s: i64) -> Arc<ManualClock> {
    Arc::new(ManualClock::new(s * 1000))
}

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

#[tokio::test]
async fn every_providers_recorded_answer_parses_to_its_usd_rate() {
    // (provider, recorded answer, asset, USD per coin, published at: the
    // answer's own time, or none and the fetch's).
    let cases = [
        ("kraken", "kraken.json", Asset::Btc, "30303.2", None),
        (
            "coinbase",
            "coinbase_btc_usd_spot.json",
            Asset::Btc,
            "48691.23",
            None,
        ),
        (
            "bitstamp",
            "bitstamp_btcusdt.json",
            Asset::Btc,
            "73285",
            Some(1_710_328_241),
        ),
        ("binance", "binance.json", Asset::Btc, "18229.9", None),
        ("binance", "binance.json", Asset::Eth, "1395.6", None),
        ("binance", "binance.json", Asset::Ltc, "83.79", None),
        (
            "coingecko",
            "coingecko.json",
            Asset::Btc,
            "67187.3358936566",
            Some(1_711_356_300),
        ),
    ];
    for (provider, file, asset, usd, published) in cases {
        let server = Server::start(json(fixture(file))).await;
        let now_s = published.map_or(NOW_S, |p| p + 10);
        let clock = clock_at(now_s);
        let source = rates(&[(provider, &server)], policy(1), &clock);
        let rate = source
            .usd_rate(asset)
            .await
            .unwrap_or_else(|e| panic!("{provider} {file} {asset}: {e}"));
        assert_eq!(rate.usd_per_coin, d(usd), "{provider} {asset}");
        assert_eq!(rate.source, format!("median({provider}={usd})"));
        assert_eq!(rate.at_ms, published.unwrap_or(now_s) * 1000, "{provider}");
    }

    // Each asked its real API's path.
    let expect = [
        ("kraken", "kraken.json", "/0/public/Ticker?pair=XBTUSD,ETHUSD,LTCUSD,SOLUSD,TRXUSD,USDTUSD,USDCUSD"),
        ("coinbase", "coinbase_btc_usd_spot.json", "/v2/prices/BTC-USD/spot"),
        ("bitstamp", "bitstamp_btcusdt.json", "/api/v2/ticker/btcusd/"),
        ("binance", "binance.json", "/api/v3/ticker/price?symbols=%5B%22BTCUSDT%22"),
        ("coingecko", "coingecko.json", "/api/v3/simple/price?ids=bitcoin,ethereum,litecoin,solana,tron,tether,usd-coin&vs_currencies=usd&include_last_updated_at=true"),
    ];
    for (provider, file, path) in expect {
        let server = Server::start(json(fixture(file))).await;
        let source = rates(&[(provider, &server)], policy(1), &clock_at(NOW_S));
        let _ = source.usd_rate(Asset::Btc).await;
        assert!(
            server.paths().iter().any(|p| p.starts_with(path)),
            "{provider} asked {:?}",
            server.paths()
        );
    }

    // Kraken's recorded XBTUSDT answer is a USDT price: no USD rate.
    let server = Server::start(json(fixture("kraken_xbtusdt.json"))).await;
    let err = rates(&[("kraken", &server)], policy(1), &clock_at(NOW_S))
        .usd_rate(Asset::Btc)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kraken: no BTC/USD pair in its answer"),
        "{err}"
    );
}

#[tokio::test]
async fn the_rate_is_the_median_of_three_naming_each_exchange_and_its_price() {
    let coinbase = Server::start(json(btc_answer("coinbase", "\"65000.10\"", NOW_S))).await;
    let kraken = Server::start(json(btc_answer("kraken", "\"65001.20000\"", NOW_S))).await;
    let bitstamp = Server::start(json(btc_answer("bitstamp", "\"64999.90\"", NOW_S - 20))).await;
    let clock = clock_at(NOW_S);
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
        ],
        policy(2),
        &clock,
    );
    let rate = source.usd_rate(Asset::Btc).await.unwrap();
    assert_eq!(rate.usd_per_coin, d("65000.1"));
    assert_eq!(
        rate.source,
        "median(coinbase=65000.1,kraken=65001.2,bitstamp=64999.9)"
    );
    // As old as the oldest answer it rests on.
    assert_eq!(rate.at_ms, (NOW_S - 20) * 1000);

    // Four: the mean of the two middle answers, exactly.
    let gecko = Server::start(json(btc_answer("coingecko", "65000.00", NOW_S))).await;
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
            ("coingecko", &gecko),
        ],
        policy(2),
        &clock,
    );
    let rate = source.usd_rate(Asset::Btc).await.unwrap();
    assert_eq!(rate.usd_per_coin, d("65000.05"));
}

#[tokio::test]
async fn quorum_not_met_names_the_failed_and_stale_sources() {
    let coinbase = Server::start(json(btc_answer("coinbase", "\"65000\"", NOW_S))).await;
    let kraken = Server::start(Reply(
        429,
        "application/json",
        r#"{"error":["EGeneral:Too many requests"]}"#.into(),
    ))
    .await;
    let bitstamp = Server::start(json(btc_answer("bitstamp", "\"65000\"", NOW_S - 400))).await;
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
        ],
        policy(2),
        &clock_at(NOW_S),
    );
    let err = source.usd_rate(Asset::Btc).await.unwrap_err();
    assert!(
        matches!(
            err,
            RateError::NoQuorum {
                fresh: 1,
                quorum: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    for part in [
        "1 fresh exchange answer(s) of the 2 needed (coinbase=65000)",
        "kraken: HTTP 429 Too Many Requests (rate limited)",
        "bitstamp: stale: 400 s old, older than the 300 s allowed",
    ] {
        assert!(text.contains(part), "{part} not in: {text}");
    }
    // The API's existing code for a rate it cannot give.
    assert_eq!(IntentError::RateUnavailable(err).code(), "rate_unavailable");
}

#[tokio::test]
async fn disagreement_beyond_the_spread_names_the_sources_and_the_spread() {
    let coinbase = Server::start(json(btc_answer("coinbase", "\"65000\"", NOW_S))).await;
    let kraken = Server::start(json(btc_answer("kraken", "\"65000\"", NOW_S))).await;
    let bitstamp = Server::start(json(btc_answer("bitstamp", "\"70000\"", NOW_S))).await;
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
        ],
        policy(2),
        &clock_at(NOW_S),
    );
    let err = source.usd_rate(Asset::Btc).await.unwrap_err();
    let text = err.to_string();
    // (70000 - 65000) / 65000 = 769.23 bps.
    assert!(
        text.contains(
            "disagree by 769.23 bps (max-min over the median), more than the 200 bps allowed"
        ),
        "{text}"
    );
    assert!(
        text.contains("coinbase=65000, kraken=65000, bitstamp=70000"),
        "{text}"
    );
    assert_eq!(IntentError::RateUnavailable(err).code(), "rate_unavailable");

    // Within the spread: the median, the outlier named with the others.
    bitstamp.set(json(btc_answer("bitstamp", "\"65500\"", NOW_S)));
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
        ],
        policy(2),
        &clock_at(NOW_S),
    );
    assert_eq!(
        source.usd_rate(Asset::Btc).await.unwrap().source,
        "median(coinbase=65000,kraken=65000,bitstamp=65500)"
    );
}

/// One provider alone (quorum 1) answering `reply`: the error's text.
async fn failure(provider: &str, reply: Reply, asset: Asset) -> String {
    let server = Server::start(reply).await;
    let source = rates(&[(provider, &server)], policy(1), &clock_at(NOW_S));
    match source.usd_rate(asset).await {
        Ok(rate) => panic!("{provider} gave {rate:?}"),
        Err(e) => {
            assert_eq!(
                IntentError::RateUnavailable(e.clone()).code(),
                "rate_unavailable"
            );
            e.to_string()
        }
    }
}

#[tokio::test]
async fn every_provider_refuses_html_pages_rate_limits_and_absurd_values_with_a_reason() {
    const HTML: &str = "<!DOCTYPE html><html><body><h1>Attention Required!</h1></body></html>";
    for provider in ["coinbase", "kraken", "bitstamp", "binance", "coingecko"] {
        let cases = [
            (
                Reply(200, "text/html", HTML.into()),
                "an HTML page, not JSON".to_owned(),
            ),
            (
                Reply(502, "text/html", HTML.into()),
                "HTTP 502 Bad Gateway (an HTML error page)".to_owned(),
            ),
            (
                Reply(503, "text/html; charset=utf-8", HTML.into()),
                "HTTP 503 Service Unavailable (an HTML error page)".to_owned(),
            ),
            (
                Reply(429, "application/json", "{}".into()),
                "HTTP 429 Too Many Requests (rate limited)".to_owned(),
            ),
            (
                json(btc_answer(provider, &priced(provider, "0"), NOW_S)),
                "a price of 0 is not above zero".to_owned(),
            ),
            (
                json(btc_answer(provider, &priced(provider, "-65000"), NOW_S)),
                "a price of -65000 is not above zero".to_owned(),
            ),
            (
                json(btc_answer(provider, "\"NaN\"", NOW_S)),
                "'NaN' is not a decimal number".to_owned(),
            ),
            (
                json(btc_answer(provider, &priced(provider, "1e30"), NOW_S)),
                "'1e30' is not a decimal number".to_owned(),
            ),
            (
                json(btc_answer(provider, &priced(provider, "2000000000"), NOW_S)),
                "a price of 2000000000 USD is absurd".to_owned(),
            ),
        ];
        for (reply, why) in cases {
            let err = failure(provider, reply, Asset::Btc).await;
            assert!(
                err.contains(&format!("{provider}: {why}")),
                "{provider}: expected '{why}' in: {err}"
            );
        }
    }
}

#[tokio::test]
async fn a_missing_pair_or_a_stale_time_is_named_per_provider() {
    // Each provider's answer without the asked asset.
    for (provider, body, asset) in [
        (
            "kraken",
            btc_answer("kraken", "\"65000\"", NOW_S),
            Asset::Ltc,
        ),
        (
            "binance",
            btc_answer("binance", "\"65000\"", NOW_S),
            Asset::Usdt,
        ),
        (
            "coingecko",
            btc_answer("coingecko", "65000", NOW_S),
            Asset::Eth,
        ),
        // Bitstamp lists no TRX/USD market.
        (
            "bitstamp",
            btc_answer("bitstamp", "\"65000\"", NOW_S),
            Asset::Trx,
        ),
    ] {
        let err = failure(provider, json(body), asset).await;
        assert!(
            err.contains(&format!("{provider}: no {asset}/USD pair in its answer")),
            "{err}"
        );
    }
    // Coinbase answering for another pair (the ETH body for every pair).
    let err = failure(
        "coinbase",
        json(r#"{"data":{"base":"ETH","currency":"USD","amount":"2500"}}"#),
        Asset::Btc,
    )
    .await;
    assert!(
        err.contains("coinbase: answered for ETH-USD, not BTC-USD"),
        "{err}"
    );
    // Kraken's error array, with HTTP 200.
    let err = failure(
        "kraken",
        json(r#"{"error":["EQuery:Unknown asset pair"]}"#),
        Asset::Btc,
    )
    .await;
    assert!(
        err.contains("kraken: answered errors: EQuery:Unknown asset pair"),
        "{err}"
    );
    // Stale by the provider's own time.
    for provider in ["bitstamp", "coingecko"] {
        let body = btc_answer(provider, &priced(provider, "65000"), NOW_S - 301);
        let err = failure(provider, json(body), Asset::Btc).await;
        assert!(
            err.contains(&format!(
                "{provider}: stale: 301 s old, older than the 300 s allowed"
            )),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_rate_stamped_in_the_future_is_refused() {
    for provider in ["bitstamp", "coingecko"] {
        let body = btc_answer(provider, &priced(provider, "65000"), NOW_S + 3600);
        let err = failure(provider, json(body), Asset::Btc).await;
        assert!(
            err.contains(&format!(
                "{provider}: stamped 3600 s in the future, more than the 60 s of clock skew allowed: refused"
            )),
            "{err}"
        );
    }
    // Within the skew clocks may differ by: accepted.
    let server = Server::start(json(btc_answer("bitstamp", "\"65000\"", NOW_S + 30))).await;
    let source = rates(&[("bitstamp", &server)], policy(1), &clock_at(NOW_S));
    assert!(source.usd_rate(Asset::Btc).await.is_ok());
}

async fn wait_for_hits(server: &Server, n: usize) {
    for _ in 0..300 {
        if server.hits.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "asked {} times, not {n}",
        server.hits.load(Ordering::SeqCst)
    );
}

/// Once answers are cached, an exchange that accepts and never answers
/// holds up no quote: its refresh runs in the background, and its cached
/// answer counts while fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_provider_does_not_slow_a_quote_once_warm() {
    let coinbase = Server::start(json(btc_answer("coinbase", "\"65000\"", NOW_S))).await;
    let kraken = Server::start(json(btc_answer("kraken", "\"65010\"", NOW_S))).await;
    let binance = Server::start(json(btc_answer("binance", "\"64990\"", NOW_S))).await;
    let clock = clock_at(NOW_S);
    let source = Arc::new(rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("binance", &binance),
        ],
        policy(2),
        &clock,
    ));
    source.usd_rate(Asset::Btc).await.unwrap();

    kraken.set(Reply(0, "", String::new()));
    clock.advance_secs(60);
    let started = Instant::now();
    let quotes: Vec<_> = (0..20)
        .map(|_| {
            let source = source.clone();
            tokio::spawn(async move { source.usd_rate(Asset::Btc).await })
        })
        .collect();
    for q in quotes {
        let rate = q.await.unwrap().unwrap();
        assert_eq!(
            rate.source,
            "median(coinbase=65000,kraken=65010,binance=64990)"
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "20 quotes took {:?} behind a hung exchange",
        started.elapsed()
    );
    wait_for_hits(&kraken, 2).await;
}

/// With nothing cached, a quote waits for one bounded first fetch of every
/// exchange at once: a hung one costs the request timeout, once, and the
/// others make the quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_quote_waits_at_most_one_bounded_fetch_for_a_hung_provider() {
    let coinbase = Server::start(json(btc_answer("coinbase", "\"65000\"", NOW_S))).await;
    let kraken = Server::start(Reply(0, "", String::new())).await;
    let binance = Server::start(json(btc_answer("binance", "\"65002\"", NOW_S))).await;
    let source = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("binance", &binance),
        ],
        policy(2),
        &clock_at(NOW_S),
    );
    let started = Instant::now();
    let rate = source.usd_rate(Asset::Btc).await.unwrap();
    assert_eq!(rate.usd_per_coin, d("65001"));
    assert_eq!(rate.source, "median(coinbase=65000,binance=65002)");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a cold quote took {:?} (timeout 1 s)",
        started.elapsed()
    );
    // Quorum met by those cached: the next quote does not wait for kraken.
    let started = Instant::now();
    source.usd_rate(Asset::Btc).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_intent_created_with_exchange_rates_names_the_exchanges_and_their_prices() {
    let mut h = Harness::new(Backend::Sqlite, Network::Bitcoin, 1).await;
    h.import_pool(1).await;
    let coinbase = Server::start(json(btc_answer("coinbase", "\"50000.10\"", NOW_S))).await;
    let kraken = Server::start(json(btc_answer("kraken", "\"50001.20000\"", NOW_S))).await;
    let bitstamp = Server::start(json(btc_answer("bitstamp", "\"49999.90\"", NOW_S))).await;
    let dyn_clock: Arc<dyn Clock> = h.clock.clone();
    let exchanges = rates(
        &[
            ("coinbase", &coinbase),
            ("kraken", &kraken),
            ("bitstamp", &bitstamp),
        ],
        policy(2),
        &h.clock,
    );
    let service = IntentService::new(
        h.store.clone(),
        RateBook::new(Arc::new(exchanges), true, dyn_clock.clone()),
        IntentPolicy {
            enabled: Network::ALL.into_iter().collect::<HashSet<_>>(),
            expiry_secs: 1800,
            topup_amounts_cents: vec![10_000],
            quote_decimals: HashMap::new(),
            confirm_window_secs: HashMap::new(),
            max_open_per_reference: paywatch::intents::DEFAULT_MAX_OPEN_PER_REFERENCE,
        },
        HashMap::new(),
        [(Network::Bitcoin, h.watch.clone())].into_iter().collect(),
        dyn_clock,
    );
    let intent = service
        .create(&h.request("order", "ord-x1", "BTC", "100"))
        .await
        .unwrap();
    let expected = "median(coinbase=50000.1,kraken=50001.2,bitstamp=49999.9)";
    assert_eq!(intent.rate_source, expected);
    assert_eq!(intent.rate_usd, "50000.1");
    // As stored, and as the storefront's view of intents shows it.
    assert_eq!(h.intent(intent.id).await.rate_source, expected);
    let row = h
        .row(&format!(
            "SELECT rate_source FROM paywatch_intents WHERE intent_id = {}",
            intent.id
        ))
        .await;
    assert_eq!(row.get("rate_source"), Some(expected));
}

#[test]
fn exchange_settings_mistakes_are_reported_by_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paywatch.toml");
    std::fs::write(
        &file,
        r#"
[rates]
source = "exchanges"

[rates.exchanges]
providers = ["coinbase", "krakken", "coinbase"]
quorum = 4
max_spread_bps = 0

[rates.exchanges.urls]
bitstmp = "ftp://x"
"#,
    )
    .unwrap();
    let report = Settings::check(Some(file.to_str().unwrap()));
    let problems = report.problems.join("\n");
    for part in [
        "rates.exchanges.providers: 'krakken' is not a known rate provider (known: coinbase, kraken, bitstamp, binance, coingecko)",
        "rates.exchanges.providers names 'coinbase' twice",
        "rates.exchanges.quorum: 4 must be between 1 and the 3 provider(s) named",
        "rates.exchanges.max_spread_bps: 0 must be between 1 and 10000",
        "rates.exchanges.urls.bitstmp: not a known rate provider",
        "is not an http(s) URL",
    ] {
        assert!(problems.contains(part), "{part} not in:\n{problems}");
    }

    // A provider's URL (a proxy's, with its key) is shown only to its host.
    std::fs::write(
        &file,
        "[rates.exchanges.urls]\nkraken = \"https://user:PASSW0RD@proxy.example:8443/KEY123?apikey=QK456\"\n",
    )
    .unwrap();
    let effective = Settings::check(Some(file.to_str().unwrap()))
        .effective
        .unwrap();
    assert!(
        effective.contains("rates.exchanges.urls.kraken = \"https://proxy.example:8443\""),
        "{effective}"
    );
    for secret in ["PASSW0RD", "KEY123", "QK456"] {
        assert!(!effective.contains(secret), "{secret} in {effective}");
    }

    // The defaults are valid.
    std::fs::write(&file, "[rates]\nsource = \"exchanges\"\n").unwrap();
    let report = Settings::check(Some(file.to_str().unwrap()));
    assert!(
        !report.problems.iter().any(|p| p.contains("rates")),
        "{:?}",
        report.problems
    );
}

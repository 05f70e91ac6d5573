//! Issue 19: the hosted payment page in a real headless Chromium, with a
//! real Litecoin Core regtest node behind the daemon. The customer opens
//! the page from the view token alone, reads what to pay and where, sees
//! the time left count down, pays from the node's wallet while the page is
//! open, and watches the status change by itself: seen, then paid.

mod common;

use std::time::{Duration, Instant};

use common::browser::Browser;
use common::ltc::{settings_for, Daemon, Options};
use common::{Backend, TestDb};
use paywatch_testkit::{LitecoinNode, NodeOptions};

/// How long the page may take to show a change.
const SHOWN_WITHIN: Duration = Duration::from_secs(60);

async fn wait_for_status(b: &Browser, wanted: &str) -> String {
    let deadline = Instant::now() + SHOWN_WITHIN;
    loop {
        let now = b.attribute("#status", "data-status").await;
        if now.as_deref() == Some(wanted) {
            return b.text("#status").await;
        }
        assert!(
            Instant::now() < deadline,
            "the page still shows {now:?}, not {wanted}, after {SHOWN_WITHIN:?}:\n{}",
            b.source().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// "m:ss" as seconds.
fn seconds_left(text: &str) -> u64 {
    let (m, s) = text
        .split_once(':')
        .unwrap_or_else(|| panic!("time left is not m:ss: {text:?}"));
    m.trim().parse::<u64>().expect("minutes") * 60 + s.trim().parse::<u64>().expect("seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_customer_watches_the_payment_page_go_from_waiting_to_paid() {
    let node = LitecoinNode::start(NodeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("Litecoin Core regtest node: {e}"));
    let db = TestDb::new(Backend::Sqlite).await;
    let opts = Options {
        confirmations: 2,
        ..Options::default()
    };
    let mut settings = settings_for(&db.url, &node, None, &opts);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    settings.api.listen = format!("127.0.0.1:{port}");
    let daemon = Daemon::start(db, settings).await;
    daemon
        .wait_cursor(node.block_count().await.expect("block count"))
        .await;
    let intent = daemon.order("checkout-page-1", "100").await;
    let token = intent.view_token.clone().expect("a view token");

    let browser = Browser::start().await;
    browser
        .goto(&format!("http://127.0.0.1:{port}/pay/{token}"))
        .await;
    // What to pay, where, and the warnings, before anything moves.
    assert_eq!(browser.text("#address").await, intent.address);
    assert_eq!(browser.text("#amount").await, "1");
    assert_eq!(browser.text("#asset").await, "LTC");
    assert_eq!(browser.text("#network").await, "Litecoin");
    assert_eq!(
        wait_for_status(&browser, "awaiting_payment").await,
        "Waiting for your payment."
    );
    for warning in ["#warn-network", "#warn-expiry", "#warn-proof"] {
        assert!(!browser.text(warning).await.is_empty(), "{warning}");
    }
    let qr = browser.attribute("#qr", "src").await.unwrap_or_default();
    assert!(qr.ends_with(&format!("/v1/view/{token}/qr.svg")), "{qr}");
    // The script counts the time left down (expiry 600 s).
    let first = seconds_left(&browser.text("#time-left").await);
    assert!((1..=600).contains(&first), "{first}");
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let later = seconds_left(&browser.text("#time-left").await);
    assert!(
        later < first,
        "the time left did not move: {first} then {later}"
    );

    // Paid from the node's wallet while the page is open: the page shows it
    // seen from the mempool, then paid once two blocks confirm it, with no
    // reload.
    node.send(&intent.address, "1")
        .await
        .expect("the wallet pays");
    let seen = wait_for_status(&browser, "confirming").await;
    assert!(seen.starts_with("Payment seen."), "{seen}");
    assert_eq!(browser.text("#time-left").await, "\u{2014}");
    node.mine(2).await.expect("mines");
    assert_eq!(wait_for_status(&browser, "paid").await, "Paid. Thank you!");
    assert_eq!(
        browser.attribute("#status", "data-reason").await.as_deref(),
        Some("paid")
    );
    browser.quit().await;
    daemon.assert_money_rules().await;
}

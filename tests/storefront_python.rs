//! The storefront example (issue 20, found 10) runs, end to end:
//! `examples/storefront-python/storefront.py` against `paywatch run` on
//! PostgreSQL (the roles of `deploy/postgres-roles.sql`, the storefront
//! reading as its own read-only role) and the Bitcoin dev chain, whose
//! simulated customer pays every intent. The script fails on any step that
//! does not end as a shop expects; this test then checks its summary
//! against the database behind it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::private_postgres::PrivatePostgres;
use serde_json::Value;

const PAYWATCH: &str = env!("CARGO_BIN_EXE_paywatch");
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/storefront-python/storefront.py"
);
const SHOP_TOKEN: &str = "storefront-token-of-the-python-example";
const SUPPORT_TOKEN: &str = "support-token-of-the-python-example";
const WEBHOOK_SECRET: &str = "webhook-secret-of-the-python-example";
/// The account key of the README's walkthrough: addresses are derived.
const ACCOUNT_KEY: &str = "tpubDDPRy5xWxJTuVmsh7YRzK8o2EdMWgn4t41fTLxXRgyRN7EKvN2L8BKCFC1gUfPu8Xp6rr667Yc26zrXsiBZsgBc8dQiYnhPNk2Q7CsBrer5";
const REFUND_ADDRESS: &str = "bcrt1qs7lyvhddvpmrz7lrhsl7vz7ukg9c35mhjttq7f";

/// The Python deploy/install-storefront-python.sh prepared, or the one
/// `PAYWATCH_STOREFRONT_PYTHON` names.
fn python() -> PathBuf {
    let path = std::env::var("PAYWATCH_STOREFRONT_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let tools = std::env::var("PAYWATCH_TOOLS")
                .unwrap_or_else(|_| "/var/cache/paywatch-tools".to_owned());
            Path::new(&tools).join("storefront-python/bin/python")
        });
    let ok = Command::new(&path)
        .args(["-c", "import psycopg"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{} cannot import psycopg: run deploy/install-storefront-python.sh (deploy/test.sh \
         does), or set PAYWATCH_STOREFRONT_PYTHON",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn paywatch(config: &Path) -> Command {
    let mut c = Command::new(PAYWATCH);
    for (k, _) in std::env::vars() {
        if k.starts_with("PAYWATCH_") {
            c.env_remove(k);
        }
    }
    c.arg("--config").arg(config);
    c
}

/// `paywatch run`, killed when the test ends however it ends.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(dir: &Path, pg: &PrivatePostgres, api: u16, hooks: u16) -> PathBuf {
    let hash = paywatch::api::TokenTable::hash_token;
    let text = format!(
        r#"
[database]
url = "postgres://paywatch:owner-pw@127.0.0.1:{db}/paywatch"

[api]
listen = "127.0.0.1:{api}"

[api.tokens]
storefront = ["shop:{shop}"]
support = ["desk:{support}"]

[rates.fixed]
BTC = "50000"

[reconcile]
interval_ms = 200

[networks.bitcoin]
enabled = true
source = "devchain"
chain = "regtest"
confirmations = 2
poll_interval_ms = 200
account_key = "{ACCOUNT_KEY}"

[devchain]
enabled = true
block_secs = 1
autopay = true

[webhooks]
url = "http://127.0.0.1:{hooks}/paywatch"
secret = "{WEBHOOK_SECRET}"
allow_http_to_loopback = true
"#,
        db = pg.port,
        shop = hash(SHOP_TOKEN),
        support = hash(SUPPORT_TOKEN),
    );
    let path = dir.join("paywatch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn wait_ready(api: u16, daemon: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = std::net::TcpStream::connect(("127.0.0.1", api)).is_ok_and(|mut s| {
            use std::io::{Read, Write};
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
        });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "paywatch never became ready\nlog:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_python_storefront_example_runs_end_to_end() {
    let python = python();
    let pg = PrivatePostgres::start();
    pg.run_roles_file();
    let dir = tempfile::tempdir().unwrap();
    let (api, hooks) = (free_port(), free_port());
    let config = config(dir.path(), &pg, api, hooks);
    let migrated = paywatch(&config).arg("migrate").output().unwrap();
    assert!(
        migrated.status.success(),
        "paywatch migrate: {}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    // Again after migrate: the storefront's grants on the views.
    pg.run_roles_file();

    let log = dir.path().join("paywatch.log");
    let out = std::fs::File::create(&log).unwrap();
    let daemon = Daemon {
        child: paywatch(&config)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("paywatch run starts"),
        log,
    };
    wait_ready(api, &daemon);

    let ran = Command::new(&python)
        .arg(SCRIPT)
        .env("PAYWATCH_API", format!("http://127.0.0.1:{api}"))
        .env("PAYWATCH_TOKEN", SHOP_TOKEN)
        .env("PAYWATCH_SUPPORT_TOKEN", SUPPORT_TOKEN)
        .env(
            "STOREFRONT_DATABASE_URL",
            format!(
                "postgres://storefront:shop-pw@127.0.0.1:{}/paywatch",
                pg.port
            ),
        )
        .env("WEBHOOK_LISTEN", format!("127.0.0.1:{hooks}"))
        .env("WEBHOOK_SECRET", WEBHOOK_SECRET)
        .env("REFUND_ADDRESS", REFUND_ADDRESS)
        .env("SHOP_DB", dir.path().join("shop.db"))
        .env("RUN", "t1")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    // Shown with --nocapture: what a shop's log would say.
    println!("{stdout}");
    assert!(
        ran.status.success(),
        "the example failed\nstdout:\n{stdout}\nstderr:\n{}\npaywatch log:\n{}",
        String::from_utf8_lossy(&ran.stderr),
        daemon.log()
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}):\n{stdout}"));

    // What the script saw is what the database holds.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let admin = format!("{}/paywatch", pg.admin_url());
    let refund_intent = summary["refund_intent"]
        .as_i64()
        .unwrap_or_else(|| panic!("no refunded intent: {summary}"));
    let (last, balance, refund) = rt.block_on(async {
        let db = paywatch::store::Store::connect(&admin).await.unwrap();
        let count = |sql: String| {
            let db = &db;
            async move { db.count_raw(&sql).await.expect("count") }
        };
        let last = count("SELECT MAX(seq) FROM outbox".to_owned()).await;
        let balance = count(
            "SELECT available_usd_cents FROM paywatch_balances WHERE account = 'cust-7'".to_owned(),
        )
        .await;
        let refund = count(format!(
            "SELECT COUNT(*) FROM paywatch_intents WHERE intent_id = {refund_intent} \
             AND refund_status = 'required'"
        ))
        .await;
        db.close().await;
        (last, balance, refund)
    });
    assert!(
        summary["last_cursor"].as_i64().unwrap() <= last,
        "{summary}"
    );
    assert!(
        summary["reconnects"].as_i64().unwrap() >= 1,
        "resumed after the cut: {summary}"
    );
    let handled = summary["events_handled"].as_i64().unwrap();
    assert!(handled >= 10, "{summary}");
    assert!(
        summary["webhooks_verified"].as_i64().unwrap() >= handled,
        "every event handled also came as a verified webhook: {summary}"
    );
    let orders = &summary["orders"];
    for (key, via) in [
        ("order:order-t1-1", "chain"),
        ("topup:topup-t1", "chain"),
        ("order:order-t1-2", "balance"),
    ] {
        assert_eq!(orders[key]["paid"], 1, "{key}: {summary}");
        assert_eq!(orders[key]["paid_via"], via, "{key}: {summary}");
    }
    assert_eq!(balance, 7_000, "100 USD topped up, 30 paid from it");
    assert_eq!(summary["balance_usd"], "70.00");
    assert_eq!(refund, 1, "support's decision is recorded");
}

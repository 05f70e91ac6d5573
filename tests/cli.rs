//! End to end through the real `paywatch` binary: the commands an operator
//! and a storefront integration run, their output, their stable error codes
//! and exit statuses, config layering, and `paywatch run` on a dev chain
//! paying an intent and stopping cleanly on SIGTERM. On SQLite, and on
//! PostgreSQL (a fresh database; PostgreSQL missing is a failure, not a skip).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use paywatch::store::Store;

const PAYWATCH: &str = env!("CARGO_BIN_EXE_paywatch");

const ETH_POOL: [&str; 3] = [
    "0x52908400098527886e0f7030069857d2e4169ee7",
    "0x8617e340b3d01fa5f11f306f4090fd50e238070d",
    "0xde709f2102306220921060314715629080e2fb77",
];
const TRON_ADDRESS: &str = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
const SOL_GOOD: [&str; 2] = [
    "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
    "4Nd1mBQtrMJVYVfKf2PJy9NZUZdTAsp7D4xWLs4gDB4T",
];
const BTC_POOL: [&str; 3] = [
    "bcrt1qs7lyvhddvpmrz7lrhsl7vz7ukg9c35mhjttq7f",
    "bcrt1q3qqyx6kdrfh6syyx4cs5xuewdpt8jq8dnglk72",
    "bcrt1qslvemew3ru6egyvsc3zrne5qfhn2d694frtsw9",
];

/// A `paywatch` command with `config`, isolated from the caller's PAYWATCH
/// variables so only what a test sets applies.
fn paywatch(config: &Path) -> Command {
    paywatch_at(PAYWATCH, config)
}

/// The same, with another build of paywatch (the previous release's).
fn paywatch_at(binary: &str, config: &Path) -> Command {
    let mut cmd = Command::new(binary);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PAYWATCH") {
            cmd.env_remove(key);
        }
    }
    cmd.env("RUST_LOG", "info,sqlx=warn")
        .env("RUST_BACKTRACE", "0")
        .arg("--config")
        .arg(config);
    cmd
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn from(what: String, out: Output) -> Ran {
        let ran = Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!("$ paywatch {what}\n  -> {:?}", ran.code);
        ran
    }

    /// Exit 0; returns stdout.
    fn ok(self) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// A non-zero exit whose stderr reports `Error: <code>:`; returns stderr.
    fn fails_with(self, code: &str) -> String {
        assert!(
            matches!(self.code, Some(c) if c != 0),
            "expected a failure with {code}, got {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        assert!(
            self.stderr.contains(&format!("Error: {code}:")),
            "stderr does not report {code}:\n{}",
            self.stderr
        );
        self.stderr
    }

    /// A non-zero exit; returns stderr.
    fn fails(self) -> String {
        assert!(
            matches!(self.code, Some(c) if c != 0),
            "expected a failure, got {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code,
            self.stdout,
            self.stderr
        );
        self.stderr
    }
}

fn run(config: &Path, args: &[&str]) -> Ran {
    run_at(PAYWATCH, config, args)
}

fn run_at(binary: &str, config: &Path, args: &[&str]) -> Ran {
    let out = paywatch_at(binary, config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("paywatch runs");
    Ran::from(args.join(" "), out)
}

fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn write(path: &Path, text: &str) -> PathBuf {
    fs::write(path, text).expect("write file");
    path.to_owned()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A fresh, empty PostgreSQL database on the test server.
fn fresh_postgres_database() -> String {
    let admin = std::env::var("PAYWATCH_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!("pwcli_{}_{nanos}", std::process::id());
    runtime().block_on(async {
        let store = Store::connect(&format!("{admin}/postgres"))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL is required for these tests ({admin}): {e}. \
                     Start it or set PAYWATCH_TEST_POSTGRES."
                )
            });
        store
            .execute_raw(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        store.close().await;
    });
    format!("{admin}/{name}")
}

/// One count straight from the database, behind the CLI's back.
fn count(url: &str, sql: &str) -> i64 {
    runtime().block_on(async {
        let store = Store::connect(url).await.expect("connect");
        let n = store.count_raw(sql).await.expect(sql);
        store.close().await;
        n
    })
}

/// The id on the first line of `intent create`/`intent show` output.
fn intent_id(stdout: &str) -> String {
    let first = stdout.lines().next().unwrap_or_default();
    let mut words = first.split_whitespace();
    assert_eq!(words.next(), Some("intent"), "unexpected output: {stdout}");
    let id = words.next().expect("an id").to_owned();
    assert!(id.parse::<i64>().is_ok(), "unexpected output: {stdout}");
    id
}

fn create(
    config: &Path,
    kind: &str,
    reference: &str,
    asset: &str,
    network: &str,
    usd: &str,
) -> Ran {
    run(
        config,
        &[
            "intent",
            "create",
            "--kind",
            kind,
            "--reference",
            reference,
            "--account",
            "acct-1",
            "--asset",
            asset,
            "--network",
            network,
            "--usd",
            usd,
        ],
    )
}

/// The commands and error contract, against the database at `url`.
fn cli_contract(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            r#"
[database]
url = "{url}"

[rates.fixed]
ETH = "2500"
TRX = "0.25"
SOL = "200"
# no BTC rate: creating a BTC intent must fail with rate_unavailable

[devchain]
enabled = true

[networks.bitcoin]
enabled = true
source = "devchain"
[networks.ethereum]
enabled = true
source = "devchain"
[networks.tron]
enabled = true
source = "devchain"
[networks.solana]
enabled = true
source = "devchain"
"#
        ),
    );
    let c = config.as_path();
    let dialect = if url.starts_with("postgres") {
        "postgres"
    } else {
        "sqlite"
    };

    // Migrations: a second run finds nothing to do and succeeds.
    for _ in 0..2 {
        let out = run(c, &["migrate"]).ok();
        assert_eq!(out.trim(), format!("migrations applied ({dialect})"));
    }

    // An empty database lists no transfers.
    assert_eq!(run(c, &["transfers", "list"]).ok(), "");

    // Pool import: counts, then idempotent re-import.
    let eth = write(
        &dir.path().join("eth.txt"),
        &format!(
            "# ethereum pool\n{}\n\n{}\n{}\n",
            ETH_POOL[0], ETH_POOL[1], ETH_POOL[2]
        ),
    );
    let eth = eth.to_str().unwrap();
    let import = |network: &str, file: &str| {
        run(
            c,
            &["addresses", "import", "--network", network, "--file", file],
        )
    };
    assert_eq!(
        import("ethereum", eth).ok().trim(),
        "ethereum: 3 added, 0 already present, 3 free"
    );
    assert_eq!(
        import("ethereum", eth).ok().trim(),
        "ethereum: 0 added, 3 already present, 3 free"
    );

    // One bad line: the file is named with the line, and nothing is imported.
    let bad = write(
        &dir.path().join("sol-bad.txt"),
        &format!(
            "# solana\n{}\nnot-an-address!\n{}\n",
            SOL_GOOD[0], SOL_GOOD[1]
        ),
    );
    let bad = bad.to_str().unwrap();
    let stderr = import("solana", bad).fails();
    assert!(
        stderr.contains(&format!(
            "{bad}:3: 'not-an-address!' is not a solana address"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing imported"), "{stderr}");
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM addresses WHERE network = 'solana'"
        ),
        0
    );
    let good = write(
        &dir.path().join("sol.txt"),
        &format!("{}\n{}\n", SOL_GOOD[0], SOL_GOOD[1]),
    );
    assert_eq!(
        import("solana", good.to_str().unwrap()).ok().trim(),
        "solana: 2 added, 0 already present, 2 free",
        "the bad file must have imported nothing"
    );

    // A tron pool of one address.
    let tron = write(&dir.path().join("tron.txt"), &format!("{TRON_ADDRESS}\n"));
    assert_eq!(
        import("tron", tron.to_str().unwrap()).ok().trim(),
        "tron: 1 added, 0 already present, 1 free"
    );

    // Success: the address to pay and the exact amount.
    let out = create(c, "order", "order-1", "ETH", "ethereum", "25").ok();
    let order_id = intent_id(&out);
    assert!(
        out.contains(&format!("pay 0.01 ETH on ethereum to {}", ETH_POOL[0])),
        "{out}"
    );
    assert!(
        out.contains("due 10000000000000000 base units (25 USD at 2500 USD/ETH, fixed)"),
        "{out}"
    );
    assert!(out.contains("status awaiting_payment"), "{out}");
    let out = create(c, "topup", "topup-1", "USDT", "tron", "100").ok();
    assert!(
        out.contains(&format!("pay 100 USDT on tron to {TRON_ADDRESS}")),
        "{out}"
    );
    let topup_id = intent_id(&out);

    let intents_before = count(url, "SELECT COUNT(*) FROM intents");
    let issued_before = count(
        url,
        "SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL",
    );
    assert_eq!((intents_before, issued_before), (2, 2));

    // Errors: stable codes on stderr, non-zero exit, nothing written.
    let stderr = create(c, "order", "order-2", "USDC", "tron", "10").fails_with("method_unknown");
    assert!(stderr.contains("USDC"), "{stderr}");
    let stderr =
        create(c, "order", "order-3", "ETH", "ethereum", "10.001").fails_with("amount_invalid");
    assert!(stderr.contains("usd_amount"), "{stderr}");
    let stderr =
        create(c, "order", "order-4", "BTC", "bitcoin", "10").fails_with("rate_unavailable");
    assert!(stderr.contains("BTC"), "{stderr}");
    let stderr =
        create(c, "topup", "topup-2", "USDT", "tron", "100").fails_with("no_address_available");
    assert!(stderr.contains("tron"), "{stderr}");
    assert_eq!(count(url, "SELECT COUNT(*) FROM intents"), intents_before);
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM addresses WHERE issued_at IS NOT NULL"
        ),
        issued_before
    );
    run(
        c,
        &[
            "intent",
            "show",
            "--kind",
            "topup",
            "--reference",
            "topup-2",
        ],
    )
    .fails_with("not_found");
    run(c, &["intent", "show", "9999"]).fails_with("not_found");

    // Show by id and by reference.
    let out = run(c, &["intent", "show", &order_id]).ok();
    assert_eq!(intent_id(&out), order_id);
    assert!(out.contains("created awaiting_payment"), "{out}");
    let out = run(
        c,
        &[
            "intent",
            "show",
            "--kind",
            "topup",
            "--reference",
            "topup-1",
        ],
    )
    .ok();
    assert_eq!(intent_id(&out), topup_id);

    // A customer's declaration is recorded but proves nothing.
    let out = run(
        c,
        &[
            "intent",
            "declare-paid",
            &order_id,
            "--note",
            "sent from my wallet",
        ],
    )
    .ok();
    assert!(
        out.contains(&format!("recorded: intent {order_id} declared paid")),
        "{out}"
    );
    let out = run(c, &["intent", "show", &order_id]).ok();
    assert!(out.contains("declared_paid"), "{out}");
    assert!(out.contains("status awaiting_payment"), "{out}");
    assert_eq!(count(url, "SELECT COUNT(*) FROM payment_declarations"), 1);
    run(c, &["intent", "declare-paid", "9999"]).fails_with("not_found");

    // Still no transfers: nothing watched a chain.
    assert_eq!(run(c, &["transfers", "list"]).ok(), "");

    // Paying an order from the balance: the debit and the order's
    // settlement are one transaction, once per key.
    runtime().block_on(async {
        let store = Store::connect(url).await.expect("connect");
        store
            .execute_raw(
                "INSERT INTO ledger_entries (account, usd_cents, entry_kind, entry_key, created_at) \
                 VALUES ('acct-cli', 15000, 'adjustment', 'seed-cli', 0)",
            )
            .await
            .expect("seed the balance");
        store.close().await;
    });
    let out = run(c, &["balance", "show", "--account", "acct-cli"]).ok();
    assert_eq!(out.trim(), "acct-cli: 150.00 USD available");
    let pay = [
        "balance",
        "debit",
        "--account",
        "acct-cli",
        "--usd",
        "100",
        "--key",
        "cli-k1",
        "--order",
        "cli-order",
    ];
    let out = run(c, &pay).ok();
    assert_eq!(
        out.trim(),
        "debited 100.00 USD from acct-cli; order cli-order paid from the balance; 50.00 USD left"
    );
    let out = run(c, &pay).ok();
    assert!(out.starts_with("already debited under key cli-k1"), "{out}");
    run(
        c,
        &[
            "balance",
            "debit",
            "--account",
            "acct-cli",
            "--usd",
            "10",
            "--key",
            "cli-k2",
            "--order",
            "cli-order",
        ],
    )
    .fails_with("conflict");
    run(
        c,
        &[
            "balance",
            "debit",
            "--account",
            "acct-cli",
            "--usd",
            "500",
            "--key",
            "cli-k3",
        ],
    )
    .fails_with("insufficient_balance");
    assert_eq!(
        count(
            url,
            "SELECT COUNT(*) FROM paywatch_payment_status WHERE kind = 'order' \
             AND reference = 'cli-order' AND payment_status = 'paid' AND paid_via = 'balance' \
             AND paid_usd_cents = 10000 AND paid_intent_id IS NULL"
        ),
        1,
        "the storefront's view shows the order paid from the balance"
    );
    run(
        c,
        &[
            "intent",
            "create",
            "--kind",
            "order",
            "--reference",
            "cli-order",
            "--account",
            "acct-cli",
            "--asset",
            "ETH",
            "--network",
            "ethereum",
            "--usd",
            "100",
        ],
    )
    .fails_with("conflict");

    // Skipping past blocks a node no longer has: only for a halted watcher,
    // and then on record.
    let accept = [
        "chain",
        "accept-gap",
        "--network",
        "solana",
        "--resume-at",
        "500",
        "--by",
        "ops-alice",
        "--reason",
        "node retention passed",
    ];
    let refused = run(c, &accept).fails_with("gap_refused");
    assert!(refused.contains("has read no block yet"), "{refused}");
    runtime().block_on(async {
        let store = Store::connect(url).await.expect("connect");
        store
            .execute_raw(
                "INSERT INTO chain_state (network, cursor_height, cursor_hash, watcher_state, \
                 last_error, updated_at) VALUES ('solana', 399, 'h399', 'halted', \
                 'the node no longer has slot 400', 0)",
            )
            .await
            .expect("a halted Solana watcher");
        store
            .execute_raw(
                "INSERT INTO chain_state (network, cursor_height, cursor_hash, watcher_state, \
                 updated_at, unread_from) VALUES ('ethereum', 90, 'h90', 'ok', 0, 77)",
            )
            .await
            .expect("an Ethereum watcher reading blocks again");
        store
            .execute_raw(
                "INSERT INTO balance_gaps (network, address, intent_id, height, node_balance, \
                 counted, unexplained, found_at) \
                 VALUES ('ethereum', '0xabc', NULL, 80, '5', '0', '5', 0)",
            )
            .await
            .expect("a balance gap");
        store.close().await;
    });
    let out = run(c, &accept).ok();
    assert!(
        out.contains("solana: heights 400..=499 skipped") && out.contains("resume at 500"),
        "{out}"
    );
    let again = run(c, &accept).fails_with("gap_refused");
    assert!(
        again.contains("restart paywatch to resume at 500"),
        "{again}"
    );
    let out = run(c, &["status"]).ok();
    assert!(
        out.contains("solana: gap 400..=499 skipped, never read: accepted by ops-alice at")
            && out.contains("node retention passed"),
        "{out}"
    );
    assert!(
        out.contains("ethereum: 1 balance gaps open") && out.contains("ethereum: blocks from 77"),
        "status names what still waits for a person or a second read: {out}"
    );
}

#[test]
fn cli_contract_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    cli_contract(&sqlite_url(&dir.path().join("paywatch.db")));
}

#[test]
fn cli_contract_on_postgres() {
    cli_contract(&fresh_postgres_database());
}

/// A paywatch whose machine clock runs two hours ahead (libfaketime) still
/// stamps an intent, and so its expiry, with the database's time: every
/// instance sharing a database agrees on what is late. (PostgreSQL only:
/// SQLite runs inside the one paywatch process, on that process's clock,
/// and there is no second instance to disagree with.)
#[test]
fn money_time_is_the_databases_clock_on_postgres() {
    let url = fresh_postgres_database();
    let url = url.as_str();
    assert!(
        Path::new("/usr/bin/faketime").exists(),
        "faketime is missing: this test moves paywatch's clock with it. Install it with: \
         apt-get install faketime (deploy/test.sh does this on a fresh machine)"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            "[database]\nurl = \"{url}\"\n[rates.fixed]\nETH = \"2500\"\n[devchain]\nenabled = true\n\
             [networks.ethereum]\nenabled = true\nsource = \"devchain\"\n"
        ),
    );
    run(&config, &["migrate"]).ok();
    let pool = write(&dir.path().join("eth.txt"), &format!("{}\n", ETH_POOL[0]));
    run(
        &config,
        &[
            "addresses",
            "import",
            "--network",
            "ethereum",
            "--file",
            pool.to_str().unwrap(),
        ],
    )
    .ok();
    let mut cmd = Command::new("/usr/bin/faketime");
    cmd.arg("-f").arg("+2h").arg(PAYWATCH);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PAYWATCH") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .args(["--config", config.to_str().unwrap()])
        .args([
            "intent",
            "create",
            "--kind",
            "order",
            "--reference",
            "clock-1",
            "--account",
            "a",
            "--asset",
            "ETH",
            "--network",
            "ethereum",
            "--usd",
            "10",
        ])
        .output()
        .expect("faketime runs paywatch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let skew_ms = runtime().block_on(async {
        let store = Store::connect(url).await.expect("connect");
        let db_now = store.database_now_ms().await.unwrap();
        let created = store
            .count_raw("SELECT created_at FROM intents")
            .await
            .unwrap();
        store.close().await;
        created - db_now
    });
    assert!(
        skew_ms.abs() < 60_000,
        "created_at is {skew_ms} ms from the database's clock (the machine's runs 2 h ahead)"
    );
}

#[test]
fn the_environment_overrides_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let from_file = dir.path().join("from-file.db");
    let from_env = dir.path().join("from-env.db");
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!("[database]\nurl = \"{}\"\n", sqlite_url(&from_file)),
    );
    let out = paywatch(&config)
        .env("PAYWATCH__DATABASE__URL", sqlite_url(&from_env))
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(
        Ran::from("migrate".into(), out).ok().trim(),
        "migrations applied (sqlite)"
    );
    assert!(from_env.exists(), "the variable's database was not used");
    assert!(!from_file.exists(), "the file's database was used");

    // Without the variable, the file applies.
    run(&config, &["migrate"]).ok();
    assert!(from_file.exists());
}

#[test]
fn a_bad_config_value_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("paywatch.db"));
    let cases = [
        ("[intents]\nexpiry_secs = 0\n", "intents.expiry_secs"),
        (
            "[networks.bitcoin]\nconfirmations = 0\n",
            "networks.bitcoin",
        ),
        ("[rates]\nsource = \"magic\"\n", "rates.source"),
        ("[rates.fixed]\nBTC = \"cheap\"\n", "rates.fixed.BTC"),
        ("[networks.dogecoin]\nenabled = true\n", "networks.dogecoin"),
    ];
    for (snippet, key) in cases {
        let config = write(
            &dir.path().join("bad.toml"),
            &format!("[database]\nurl = \"{db}\"\n\n{snippet}"),
        );
        let stderr = run(&config, &["migrate"]).fails();
        assert!(
            stderr.contains("configuration") && stderr.contains(key),
            "{snippet}: stderr does not name {key}:\n{stderr}"
        );
    }
    assert!(
        !dir.path().join("paywatch.db").exists(),
        "a bad config must stop before touching the database"
    );

    // A chain source this build does not have is refused by `run`, by key.
    let config = write(
        &dir.path().join("source.toml"),
        &format!(
            "[database]\nurl = \"{db}\"\n\n[networks.bitcoin]\nenabled = true\nsource = \"bitcoind\"\n"
        ),
    );
    let stderr = run(&config, &["run"]).fails();
    assert!(
        stderr.contains("networks.bitcoin.source = 'bitcoind'"),
        "{stderr}"
    );
}

/// `paywatch run` in the background, logging to a file; killed if a test
/// fails before stopping it.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    fn start(config: &Path, log: PathBuf) -> Daemon {
        Daemon::start_at(PAYWATCH, config, log)
    }

    fn start_at(binary: &str, config: &Path, log: PathBuf) -> Daemon {
        let file = fs::File::create(&log).unwrap();
        let child = paywatch_at(binary, config)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("paywatch run starts");
        Daemon {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status within `within`.
    fn terminate(mut self, within: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "paywatch run did not stop within {within:?} of SIGTERM\nlog:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `intent show id` until its status line reads `status paid`.
fn wait_until_paid(config: &Path, id: &str, daemon: &Daemon, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let out = paywatch(config)
            .args(["intent", "show", id])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if stdout.lines().any(|l| l.trim() == "status paid") {
            return stdout;
        }
        if Instant::now() > deadline {
            panic!(
                "intent {id} not paid within {within:?}\nlast show:\n{stdout}\ndaemon log:\n{}",
                daemon.log()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A SQLite config with Bitcoin on a dev chain that mines every second and
/// a customer that pays every open intent, `extra` appended; the Bitcoin
/// pool is imported.
fn dev_chain_config(dir: &Path, extra: &str) -> PathBuf {
    dev_chain_config_on(dir, &sqlite_url(&dir.join("paywatch.db")), extra)
}

/// [`dev_chain_config`] on the database at `url`.
fn dev_chain_config_on(dir: &Path, url: &str, extra: &str) -> PathBuf {
    let config = write(
        &dir.join("paywatch.toml"),
        &format!(
            r#"
[database]
url = "{}"

[rates.fixed]
BTC = "50000"

[reconcile]
interval_ms = 200

[networks.bitcoin]
enabled = true
source = "devchain"
confirmations = 2
poll_interval_ms = 200

[devchain]
enabled = true
block_secs = 1
autopay = true
{extra}"#,
            url
        ),
    );
    import_btc_pool(&config, dir);
    config
}

/// Imports the Bitcoin test pool (`BTC_POOL`) with `paywatch addresses import`.
fn import_btc_pool(config: &Path, dir: &Path) {
    let pool = write(&dir.join("btc.txt"), &BTC_POOL.join("\n"));
    run(
        config,
        &[
            "addresses",
            "import",
            "--network",
            "bitcoin",
            "--file",
            pool.to_str().unwrap(),
        ],
    )
    .ok();
}

/// Issue 21, found 3: during a rolling upgrade an instance of the previous
/// release restarts on the schema this one migrated, and a rollback puts
/// one back. The previous release's own binary (the commit in
/// deploy/previous-release, built by deploy/build-previous-release.sh)
/// starts on it, issues an intent, watches and settles it; this release
/// reads what it wrote, and the money checks hold. SQLite and PostgreSQL.
#[test]
fn the_previous_release_runs_on_the_schema_this_one_migrated() {
    let previous = std::env::var("PAYWATCH_PREVIOUS_RELEASE").unwrap_or_else(|_| {
        panic!(
            "PAYWATCH_PREVIOUS_RELEASE is not set: deploy/test.sh builds the previous release; \
             alone, run: export PAYWATCH_PREVIOUS_RELEASE=\"$(bash deploy/build-previous-release.sh)\""
        )
    });
    assert!(
        Path::new(&previous).is_file(),
        "PAYWATCH_PREVIOUS_RELEASE={previous} is not a file"
    );
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_url(&dir.path().join("paywatch.db"));
    for url in [sqlite, fresh_postgres_database()] {
        let config = dev_chain_config_on(dir.path(), &url, "");
        let c = config.as_path();
        run(c, &["migrate"]).ok();
        let old = &previous;
        run_at(old, c, &["status"]).ok();
        let created = run_at(
            old,
            c,
            &[
                "intent",
                "create",
                "--kind",
                "order",
                "--reference",
                "rolling",
                "--account",
                "acct-1",
                "--asset",
                "BTC",
                "--network",
                "bitcoin",
                "--usd",
                "50",
            ],
        )
        .ok();
        let id = intent_id(&created);
        let daemon = Daemon::start_at(old, c, dir.path().join("previous.log"));
        let shown = wait_until_paid(c, &id, &daemon, Duration::from_secs(60));
        assert!(shown.contains("received final 0.001 pending 0"), "{shown}");
        let status = daemon.terminate(Duration::from_secs(10));
        assert!(
            status.success(),
            "the previous release's run exited with {status}"
        );
        let out = run(c, &["check"]).ok();
        assert!(out.starts_with("ok: "), "{out}");
        let transfers = run(c, &["transfers", "list"]).ok();
        assert_eq!(transfers.lines().count(), 1, "{transfers}");
    }
}

#[test]
fn run_on_a_dev_chain_pays_intents_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let config = dev_chain_config(dir.path(), "");
    let c = config.as_path();
    let first = intent_id(&create(c, "order", "run-1", "BTC", "bitcoin", "50").ok());

    let daemon = Daemon::start(c, dir.path().join("run-1.log"));
    let shown = wait_until_paid(c, &first, &daemon, Duration::from_secs(40));
    assert!(shown.contains("received final 0.001 pending 0"), "{shown}");
    let status = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "paywatch run exited with {status}");

    let out = run(c, &["status"]).ok();
    assert!(out.starts_with("bitcoin: "), "{out}");
    // SIGTERM handed the watcher lease back rather than leave it to run out.
    assert!(out.contains("no watcher: the lease of "), "{out}");
    let out = run(c, &["check"]).ok();
    assert!(
        out.starts_with("ok: ledger top-ups 0 cents = settled top-ups 0 cents"),
        "{out}"
    );
    let transfers = run(c, &["transfers", "list"]).ok();
    assert_eq!(transfers.lines().count(), 1, "{transfers}");
    assert!(
        transfers.contains(&format!("-> {} 100000 BTC", BTC_POOL[0]))
            && transfers.ends_with("ok\n"),
        "{transfers}"
    );

    // A restart carries on from the stored chain: earlier payments stand, and
    // an intent created by another process while it runs is watched and paid.
    let daemon = Daemon::start(c, dir.path().join("run-2.log"));
    let second = intent_id(&create(c, "order", "run-2", "BTC", "bitcoin", "25").ok());
    wait_until_paid(c, &second, &daemon, Duration::from_secs(40));
    let status = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "paywatch run exited with {status}");

    let shown = run(c, &["intent", "show", &first]).ok();
    assert!(
        shown.lines().any(|l| l.trim() == "status paid") && !shown.contains("needs_review"),
        "the restart disturbed an earlier payment:\n{shown}"
    );
    let transfers = run(c, &["transfers", "list"]).ok();
    assert_eq!(transfers.lines().count(), 2, "{transfers}");
    assert!(transfers.lines().all(|l| l.ends_with(" ok")), "{transfers}");
}

#[test]
fn the_production_example_config_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/production.example.toml");
    let out = paywatch(&example)
        .env(
            "PAYWATCH__DATABASE__URL",
            sqlite_url(&dir.path().join("paywatch.db")),
        )
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(
        Ran::from("migrate".into(), out).ok().trim(),
        "migrations applied (sqlite)"
    );
}

/// A loopback port nobody listens on now (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn run_serves_the_api_and_metrics_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (api_port, metrics_port) = (free_port(), free_port());
    let token = "storefront-token-for-the-run-test";
    let hash = paywatch::api::TokenTable::hash_token(token);
    let config = dev_chain_config(
        dir.path(),
        &format!(
            r#"
[api]
listen = "127.0.0.1:{api_port}"

[api.tokens]
storefront = ["{hash}"]

[metrics]
listen = "127.0.0.1:{metrics_port}"
"#
        ),
    );
    let c = config.as_path();
    let daemon = Daemon::start(c, dir.path().join("run.log"));
    let api = format!("http://127.0.0.1:{api_port}");
    let http = reqwest::Client::new();
    let rt = runtime();
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match http.get(format!("{api}/readyz")).send().await {
                Ok(r) if r.status().is_success() => break,
                _ if Instant::now() > deadline => {
                    panic!("/readyz never answered 200\nlog:\n{}", daemon.log())
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        // The storefront's token creates; without it nothing is made.
        let refused = http
            .post(format!("{api}/v1/intents"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        let body = r#"{"kind":"order","reference":"run-api-1","account":"acct-1",
                       "asset":"BTC","network":"bitcoin","usd_amount":"50"}"#;
        let created = http
            .post(format!("{api}/v1/intents"))
            .bearer_auth(token)
            .header("Idempotency-Key", "run-api-1")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "{:?}", created.text().await);
        let intent: serde_json::Value = created.json().await.unwrap();
        assert_eq!(intent["address"], BTC_POOL[0]);
        let id = intent["id"].as_i64().unwrap();

        // The dev customer pays it; the API shows it paid once final.
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let got: serde_json::Value = http
                .get(format!("{api}/v1/intents/{id}"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if got["status"] == "paid" {
                assert_eq!(got["amount_due"], "100000", "{got}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "intent {id} not paid over the API: {got}\nlog:\n{}",
                daemon.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let metrics = http
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.lines().any(|l| l.starts_with("paywatch_intents{")
                && l.contains("status=\"paid\"")
                && l.ends_with(" 1")),
            "{metrics}"
        );
    });
    let status = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "paywatch run exited with {status}");
}

#[test]
fn a_second_run_on_one_sqlite_file_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("paywatch.db");
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            r#"
[database]
url = "{}"

[rates.fixed]
BTC = "50000"

[devchain]
enabled = true

[networks.bitcoin]
enabled = true
source = "devchain"
"#,
            sqlite_url(&db)
        ),
    );
    let c = config.as_path();
    let first = Daemon::start(c, dir.path().join("first.log"));
    // The first holds the lock once its pid is written beside the database.
    let lock = dir.path().join("paywatch.db.run-lock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while fs::read_to_string(&lock)
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the first run never took its lock\nlog:\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let second = paywatch(c).arg("run").output().unwrap();
    assert!(!second.status.success(), "a second run started");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains("another paywatch run")
            && stderr.contains("single-instance")
            && stderr.contains(&db.display().to_string()),
        "{stderr}"
    );
    // One-shot commands still work beside the running instance.
    run(c, &["status"]).ok();

    let status = first.terminate(Duration::from_secs(10));
    assert!(status.success(), "the first run exited with {status}");
    // Once it has stopped, the next run may start.
    let third = Daemon::start(c, dir.path().join("third.log"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let holder = fs::read_to_string(&lock).unwrap_or_default();
        if holder.trim() == third.child.as_ref().unwrap().id().to_string() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the next run did not take the lock\nlog:\n{}",
            third.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(third.terminate(Duration::from_secs(10)).success());
}

// ---------------------------------------------------------------------------
// Secrets (issue 18, case 5): a secret planted in every configured URL and
// header never leaves the configuration.

/// What every planted secret contains, so one search finds any of them.
const PLANTED: &str = "pLaNtEd7Secret";

/// A rate source that answers once, then fails: the first answer prices
/// intents, every refresh after it goes down an error path.
fn flaky_rate_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let (status, body) = if n == 0 {
                (
                    "200 OK",
                    format!(r#"{{"timestamp": {now}, "rates": {{"BTC": "50000"}}}}"#),
                )
            } else {
                ("500 Internal Server Error", "upstream down".to_owned())
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The configuration of the planted-secret session: every URL and header
/// that can hold a credential holds [`PLANTED`], and every node is dead.
fn planted_config(url: &str, api: u16, metrics: u16, rates: u16) -> String {
    let hash = |role: &str| paywatch::api::TokenTable::hash_token(&planted_token(role));
    format!(
        r#"
[database]
url = "{url}"

[api]
listen = "127.0.0.1:{api}"
[api.tokens]
storefront = ["shop:{shop}"]
operator = ["ops:{ops}"]
support = ["help:{help}"]

[metrics]
listen = "127.0.0.1:{metrics}"

[webhooks]
url = "http://hook:{PLANTED}@127.0.0.1:9/hooks/{PLANTED}?token={PLANTED}"
allow_http_to_loopback = true
secret = "{PLANTED}-webhook-secret"
timeout_secs = 1
base_backoff_ms = 50
max_backoff_secs = 1

[intents]
expiry_secs = 2

[rates]
source = "http"
[rates.http]
url = "http://user:{PLANTED}@127.0.0.1:{rates}/rates/{PLANTED}?apikey={PLANTED}"
max_age_secs = 600
refresh_secs = 1

[networks.bitcoin]
enabled = true
source = "node"
chain = "regtest"
poll_interval_ms = 200
[networks.bitcoin.rpc]
url = "http://127.0.0.1:9/wallet/{PLANTED}"
user = "rpcuser"
password = "{PLANTED}"
timeout_secs = 1

[networks.litecoin]
enabled = true
source = "electrum"
chain = "regtest"
[networks.litecoin.electrum]
url = "tcp://127.0.0.1:9"

[networks.ethereum]
enabled = true
source = "node"
chain_id = 1
[networks.ethereum.rpc]
url = "http://127.0.0.1:9/v3/{PLANTED}"
timeout_secs = 1

[networks.tron]
enabled = true
source = "node"
[networks.tron.rpc]
url = "http://127.0.0.1:9"
solidity_url = "http://127.0.0.1:9"
timeout_secs = 1
[networks.tron.rpc.metadata]
TRON-PRO-API-KEY = "{PLANTED}"

[networks.solana]
enabled = true
source = "node"
[networks.solana.rpc]
url = "http://127.0.0.1:9/?api-key={PLANTED}"
timeout_secs = 1
"#,
        shop = hash("storefront"),
        ops = hash("operator"),
        help = hash("support"),
    )
}

fn planted_token(role: &str) -> String {
    format!("{role}-{PLANTED}-0123456789abcdef0123456789")
}

/// Every answer of the session: the API by each role, refused tokens, the
/// console's pages, readiness and metrics, after the intent has expired (a
/// webhook to a dead receiver), the rate refreshes failed and every watcher
/// failed against its dead node.
async fn planted_session(base: &str, metrics: u16, daemon: &Daemon) -> Vec<(String, String)> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        // The server closes a connection idle for its header-read time (5 s),
        // and this session waits that long once: a pooled connection reused
        // just then was reset under the request.
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the API never answered\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let get = |url: String, bearer: Option<String>| {
        let mut req = http.get(url);
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        async move {
            let r = req.send().await.unwrap();
            let headers = format!("{:?}", r.headers());
            format!("{} {headers} {}", r.status(), r.text().await.unwrap())
        }
    };
    let create = |network: &str, asset: &str, key: &str| {
        http.post(format!("{base}/v1/intents"))
            .bearer_auth(planted_token("storefront"))
            .header("Idempotency-Key", key)
            .json(
                &serde_json::json!({"kind": "order", "reference": key, "account": "a",
                "asset": asset, "network": network, "usd_amount": "100"}),
            )
            .send()
    };
    // An intent priced by the rate source's one good answer...
    let id = loop {
        let r = create("bitcoin", "BTC", "secret-1").await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        out.push(("create".into(), text.clone()));
        if status.is_success() {
            break serde_json::from_str::<serde_json::Value>(&text).unwrap()["id"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no intent: {status} {text}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // ...and one on a network with no addresses (503).
    let r = create("ethereum", "ETH", "secret-2").await.unwrap();
    out.push(("create without addresses".into(), r.text().await.unwrap()));
    let guess = format!("{PLANTED}-guess");
    out.push((
        "wrong token".into(),
        get(format!("{base}/v1/watchers"), Some(guess.clone())).await,
    ));
    let r = http
        .post(format!("{base}/console/login"))
        .header("origin", base)
        .form(&[("token", guess)])
        .send()
        .await
        .unwrap();
    out.push(("console refused".into(), r.text().await.unwrap()));

    tokio::time::sleep(Duration::from_secs(5)).await;
    // Quoting now finds the cached rate due a refresh, which the rate
    // source refuses from here on.
    let r = create("bitcoin", "BTC", "secret-3").await.unwrap();
    out.push((
        "create after the rate source failed".into(),
        r.text().await.unwrap(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for path in [
        "/v1/watchers".to_owned(),
        format!("/v1/intents/{id}"),
        format!("/v1/cases/{id}"),
        "/v1/review-queue".into(),
        "/v1/webhooks/deliveries?state=failing".into(),
        "/v1/webhooks/deliveries?state=pending".into(),
    ] {
        let answer = get(format!("{base}{path}"), Some(planted_token("operator"))).await;
        out.push((path, answer));
    }
    out.push(("readyz".into(), get(format!("{base}/readyz"), None).await));
    out.push((
        "metrics".into(),
        get(format!("http://127.0.0.1:{metrics}/metrics"), None).await,
    ));
    let r = http
        .post(format!("{base}/console/login"))
        .header("origin", base)
        .form(&[("token", planted_token("support"))])
        .send()
        .await
        .unwrap();
    out.push(("console sign-in".into(), format!("{:?}", r.headers())));
    let cookie = r.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    for path in [
        "/console/watchers".to_owned(),
        "/console/queue".into(),
        format!("/console/cases/{id}"),
    ] {
        let r = http
            .get(format!("{base}{path}"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        out.push((path, r.text().await.unwrap()));
    }
    out
}

#[test]
fn a_planted_secret_never_leaves_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    // The database's password, in its URL (the test server trusts
    // loopback, so any password connects).
    let url = fresh_postgres_database().replacen("postgres@", &format!("postgres:{PLANTED}db@"), 1);
    assert!(
        url.contains(PLANTED),
        "the test server's URL is postgres://postgres@…: {url}"
    );
    let (api, metrics) = (free_port(), free_port());
    let config = write(
        &dir.path().join("paywatch.toml"),
        &planted_config(&url, api, metrics, flaky_rate_server()),
    );
    let c = config.as_path();
    let pool = write(&dir.path().join("btc.txt"), &BTC_POOL.join("\n"));
    let mut seen: Vec<(String, String)> = Vec::new();
    let import = run(
        c,
        &[
            "addresses",
            "import",
            "--network",
            "bitcoin",
            "--file",
            pool.to_str().unwrap(),
        ],
    );
    seen.push((
        "addresses import".into(),
        format!("{}{}", import.stdout, import.stderr),
    ));
    let daemon = Daemon::start(c, dir.path().join("daemon.log"));
    let base = format!("http://127.0.0.1:{api}");
    seen.extend(runtime().block_on(planted_session(&base, metrics, &daemon)));
    let status = run(c, &["status"]);
    seen.push((
        "paywatch status".into(),
        format!("{}{}", status.stdout, status.stderr),
    ));
    let dump = Command::new("pg_dump")
        .args([
            "--data-only",
            &url.replacen(&format!(":{PLANTED}db"), "", 1),
        ])
        .output()
        .expect("pg_dump runs (it comes with PostgreSQL)");
    assert!(
        dump.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dump = String::from_utf8_lossy(&dump.stdout).into_owned();
    let exit = daemon.terminate(Duration::from_secs(15));
    assert!(exit.success(), "paywatch run exit: {exit:?}");
    let log = fs::read_to_string(dir.path().join("daemon.log")).unwrap();

    // The session did go down each error path a secret travels with.
    let mut paths = vec![
        ("a failed rate refresh", "rate refresh failed".to_owned()),
        (
            "a failed webhook delivery",
            "webhook not delivered".to_owned(),
        ),
    ];
    for network in ["bitcoin", "litecoin", "ethereum", "tron", "solana"] {
        paths.push((
            network,
            format!("watcher{{network={network}}}: paywatch::watcher: watcher degraded"),
        ));
    }
    for (what, needle) in paths {
        assert!(
            log.contains(&needle),
            "the session never produced {what}\n{log}"
        );
    }
    seen.push(("the daemon's log".into(), log));
    seen.push(("the database".into(), dump));
    let leaks: Vec<String> = seen
        .iter()
        .filter(|(_, text)| text.contains(PLANTED) || text.contains(&hex::encode(PLANTED)))
        .map(|(what, text)| {
            let at = text.find(PLANTED).unwrap_or(0);
            let start = text[..at]
                .char_indices()
                .rev()
                .nth(120)
                .map_or(0, |(i, _)| i);
            let end = text.ceil_char_boundary((at + 80).min(text.len()));
            format!("{what}: …{}…", &text[start..end])
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "the planted secret leaked:\n{}",
        leaks.join("\n\n")
    );
}

/// `sourc = "node"` was read as nothing, so the network ran on the dev
/// chain and a production watcher would never see a real payment. A key no
/// setting reads is refused, naming the key, where it was set and the key
/// it most likely meant; from the environment too.
#[test]
fn a_misspelt_key_is_refused_naming_it_its_file_and_the_key_meant() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("paywatch.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n\n[networks.litecoin]\nsourc = \"node\"\n",
            sqlite_url(&dir.path().join("paywatch.db"))
        ),
    )
    .unwrap();
    let out = paywatch(&config).arg("migrate").output().unwrap();
    let ran = Ran::from("migrate".into(), out);
    let said = ran.fails();
    assert!(
        said.contains("networks.litecoin.sourc")
            && said.contains(&config.display().to_string())
            && said.contains("did you mean `networks.litecoin.source`"),
        "{said}"
    );
    assert!(
        !dir.path().join("paywatch.db").exists(),
        "nothing ran on a configuration with a mistake in it"
    );

    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n",
            sqlite_url(&dir.path().join("paywatch.db"))
        ),
    )
    .unwrap();
    let out = paywatch(&config)
        .env("PAYWATCH__API__LISTN", "127.0.0.1:9")
        .arg("migrate")
        .output()
        .unwrap();
    let said = Ran::from("migrate".into(), out).fails();
    assert!(
        said.contains("api.listn")
            && said.contains("PAYWATCH__API__LISTN")
            && said.contains("`api.listen`"),
        "{said}"
    );
}

/// Issue 19: a network enabled without a `source` used to run the
/// in-process dev chain silently, so a production watcher could watch a
/// simulated chain and never see a real payment.
#[test]
fn a_network_enabled_without_a_source_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            "[database]\nurl = \"{}\"\n\n[networks.litecoin]\nenabled = true\nchain = \"main\"\n",
            sqlite_url(&dir.path().join("paywatch.db"))
        ),
    );
    let said = run(&config, &["migrate"]).fails();
    assert!(
        said.contains("networks.litecoin.source is not set") && said.contains("electrum"),
        "{said}"
    );
    assert!(
        !dir.path().join("paywatch.db").exists(),
        "nothing ran on a configuration with a mistake in it"
    );
}

/// Issue 19: the simulated chain (and its simulated customer) run only in a
/// configuration that says it is a development setup.
#[test]
fn a_dev_chain_outside_a_development_setup_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_url(&dir.path().join("paywatch.db"));
    for (snippet, named) in [
        (
            "[networks.bitcoin]\nenabled = true\nsource = \"devchain\"\n",
            "networks.bitcoin.source = \"devchain\" is a simulated chain",
        ),
        ("[devchain]\nautopay = true\n", "devchain.autopay"),
    ] {
        let config = write(
            &dir.path().join("paywatch.toml"),
            &format!("[database]\nurl = \"{db}\"\n\n{snippet}"),
        );
        let said = run(&config, &["migrate"]).fails();
        assert!(
            said.contains(named) && said.contains("[devchain] enabled = true"),
            "{snippet}: {said}"
        );
    }
    assert!(!dir.path().join("paywatch.db").exists());
    // Said to be a development setup, the same chain runs.
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            "[database]\nurl = \"{db}\"\n\n[devchain]\nenabled = true\n\n\
             [networks.bitcoin]\nenabled = true\nsource = \"devchain\"\n"
        ),
    );
    run(&config, &["migrate"]).ok();
}

/// Issue 19: `paywatch config check` shows the configuration paywatch would
/// run with, secrets redacted, and every problem in it at once.
#[test]
fn config_check_lists_every_problem_and_shows_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!(
            r#"
[database]
url = "postgres://paywatch:{PLANTED}@127.0.0.1:5432/paywatch"

[intents]
expiry_secs = 0

[reconcile]
refund_check_secs = 0

[webhooks]
url = "https://shop.example/hooks?key={PLANTED}"
secret = "{PLANTED}"

[networks.litecoin]
enabled = true
chain = "main"
[networks.litecoin.rpc]
password = "{PLANTED}"

[networks.tron]
enabled = true
source = "node"
[networks.tron.rpc.metadata]
TRON-PRO-API-KEY = "{PLANTED}"

[networks.bitcoin]
sourc = "node"

[networks.ethereum]
enabled = true
source = "node"
[networks.ethereum.rpc]
url = "not a url"
[networks.ethereum.contracts]
USDT = "0x12345"
"#
        ),
    );
    let ran = run(&config, &["config", "check"]);
    let (stdout, stderr) = (ran.stdout.clone(), ran.stderr.clone());
    let said = ran.fails();
    for problem in [
        "networks.litecoin.source is not set",
        "intents.expiry_secs must be above 0",
        "reconcile.refund_check_secs must be above 0",
        "`networks.bitcoin.sourc`",
        // What only building each network's source finds, without
        // connecting to anything: `run` would stop on each of these.
        "networks.tron.rpc.url: required",
        "networks.ethereum.contracts: USDT: \"0x12345\" is not an Ethereum address",
    ] {
        assert!(said.contains(problem), "{problem} not named:\n{said}");
    }
    for line in [
        "networks.litecoin.enabled = true",
        "database.url = \"postgres://127.0.0.1:5432\"",
        "webhooks.secret = \"<redacted>\"",
        "intents.expiry_secs = 0",
    ] {
        assert!(stdout.contains(line), "{line} not shown:\n{stdout}");
    }
    assert!(
        !stdout.contains(PLANTED) && !stderr.contains(PLANTED),
        "a secret was shown:\n{stdout}\n{stderr}"
    );
    assert!(
        !dir.path().join("paywatch.db").exists(),
        "it reads the configuration only"
    );

    let clean = write(
        &dir.path().join("clean.toml"),
        &format!(
            "[database]\nurl = \"{}\"\n",
            sqlite_url(&dir.path().join("paywatch.db"))
        ),
    );
    let shown = run(&clean, &["config", "check"]).ok();
    assert!(shown.contains("# no problems found"), "{shown}");
}

/// Issue 21, found 3: every command migrated first, so running a new
/// binary's `paywatch status` upgraded production behind the operator's back.
#[test]
fn a_command_that_only_reads_never_migrates_and_says_to_run_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir.path().join("paywatch.db"));
    runtime().block_on(async {
        let store = Store::connect(&url).await.unwrap();
        store.migrate_until(22).await.unwrap();
        store.close().await;
    });
    let config = write(
        &dir.path().join("paywatch.toml"),
        &format!("[database]\nurl = \"{url}\"\n"),
    );
    let newest = "SELECT MAX(version) FROM _sqlx_migrations";
    for args in [
        &["status"][..],
        &["check"],
        &["intent", "show", "1"],
        &["transfers", "list"],
        &["balance", "show", "--account", "a"],
    ] {
        let said = run(&config, args).fails();
        assert!(
            said.contains("schema is at migration 22") && said.contains("paywatch migrate"),
            "{args:?}: {said}"
        );
        assert_eq!(count(&url, newest), 22, "{args:?} changed the schema");
    }
    run(&config, &["migrate"]).ok();
    assert!(count(&url, newest) > 22);
    run(&config, &["status"]).ok();
}

/// `paywatch backup` copies a SQLite database while the daemon writes to it,
/// into a new file that is a whole paywatch database; it never overwrites a
/// file, and on PostgreSQL it points to the server's own tools.
#[test]
fn backup_copies_a_live_sqlite_database_and_points_postgres_to_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    let config = dev_chain_config(dir.path(), "");
    let c = config.as_path();
    let id = intent_id(&create(c, "order", "backup-1", "BTC", "bitcoin", "50").ok());
    let daemon = Daemon::start(c, dir.path().join("backup.log"));
    wait_until_paid(c, &id, &daemon, Duration::from_secs(40));

    // Taken while the daemon mines and records blocks.
    let copy = dir.path().join("copy.db");
    let said = run(c, &["backup", "--to", copy.to_str().unwrap()]).ok();
    assert!(
        said.starts_with(&format!("backed up to {}", copy.display())),
        "{said}"
    );
    let again = run(c, &["backup", "--to", copy.to_str().unwrap()]).fails();
    assert!(
        again.contains("exists") && again.contains("never overwrites"),
        "{again}"
    );
    let status = daemon.terminate(Duration::from_secs(10));
    assert!(status.success(), "paywatch run exited with {status}");

    // The copy is a paywatch database: the paid order, and the money rules.
    let restored = write(
        &dir.path().join("restored.toml"),
        &format!("[database]\nurl = \"{}\"\n", sqlite_url(&copy)),
    );
    let shown = run(&restored, &["intent", "show", &id]).ok();
    assert!(
        shown.lines().any(|l| l.trim() == "status paid"),
        "the copy lost the payment:\n{shown}"
    );
    let checked = run(&restored, &["check"]).ok();
    assert!(checked.starts_with("ok:"), "{checked}");

    // Restored in place of the original, the copy is moved past what the
    // original went on to issue before it starts.
    let moved = run(
        &restored,
        &["restore-check", "--lost-since", "2026-12-05T01:00:00Z"],
    )
    .ok();
    assert!(
        moved.starts_with("restore 1: the lost window starts at 1796432400000 ms"),
        "{moved}"
    );
    assert!(
        moved
            .lines()
            .any(|l| l.starts_with("bitcoin: ") && l.contains("marked ")),
        "{moved}"
    );
    assert!(moved.contains("intents: next id 1000000002"), "{moved}");
    let bad = run(&restored, &["restore-check", "--lost-since", "yesterday"]).fails();
    assert!(bad.contains("--lost-since \"yesterday\""), "{bad}");

    let pg = write(
        &dir.path().join("pg.toml"),
        &format!("[database]\nurl = \"{}\"\n", fresh_postgres_database()),
    );
    let refused = run(
        &pg,
        &["backup", "--to", dir.path().join("pg.db").to_str().unwrap()],
    )
    .fails();
    assert!(
        refused.contains("pg_basebackup") && refused.contains("Backups and restores"),
        "{refused}"
    );
}

/// Upgrades are their own step (issue 21, found 3): on PostgreSQL `run` and
/// the commands that write refuse a schema older than theirs, naming
/// `paywatch migrate`, and change nothing; they still create the schema in
/// an empty database. On SQLite `run` upgrades the file only once it holds
/// the run lock, so never under a live daemon.
#[test]
fn only_migrate_upgrades_a_schema_in_use_and_sqlite_upgrades_under_the_run_lock() {
    let dir = tempfile::tempdir().unwrap();
    let newest = "SELECT MAX(version) FROM _sqlx_migrations";

    let pg = fresh_postgres_database();
    runtime().block_on(async {
        let store = Store::connect(&pg).await.unwrap();
        store.migrate_until(22).await.unwrap();
        store.close().await;
    });
    let config = write(
        &dir.path().join("pg.toml"),
        &format!("[database]\nurl = \"{pg}\"\n\n[rates.fixed]\nBTC = \"50000\"\n"),
    );
    for args in [
        &["run"][..],
        &[
            "intent",
            "create",
            "--kind",
            "order",
            "--reference",
            "u-1",
            "--account",
            "a",
            "--asset",
            "BTC",
            "--network",
            "bitcoin",
            "--usd",
            "10",
        ],
        &["restore-check"],
    ] {
        let said = run(&config, args).fails();
        assert!(
            said.contains("schema is at migration 22") && said.contains("paywatch migrate"),
            "{args:?}: {said}"
        );
        assert_eq!(count(&pg, newest), 22, "{args:?} changed the schema");
    }
    run(&config, &["migrate"]).ok();
    assert!(count(&pg, newest) > 22);

    // An empty database gets its schema from the first command that writes.
    let empty = fresh_postgres_database();
    let config = write(
        &dir.path().join("empty.toml"),
        &format!("[database]\nurl = \"{empty}\"\n"),
    );
    import_btc_pool(&config, dir.path());
    assert!(count(&empty, newest) > 22);

    // SQLite: a daemon of the older release holds the file.
    let db = dir.path().join("paywatch.db");
    let url = sqlite_url(&db);
    let held = runtime().block_on(async {
        let store = Store::connect(&url).await.unwrap();
        store.migrate_until(22).await.unwrap();
        store.close().await;
        paywatch::store::RunLock::acquire(&url).await.unwrap()
    });
    let config = write(
        &dir.path().join("sqlite.toml"),
        &format!("[database]\nurl = \"{url}\"\n"),
    );
    let said = run(&config, &["run"]).fails();
    assert!(said.contains("another paywatch run"), "{said}");
    assert_eq!(count(&url, newest), 22, "run migrated under a live daemon");
    drop(held);
}

/// Upgrades (issue 21, found 3): the commands that only read work under a
/// role that cannot write at all, so they can run anywhere, a new binary's
/// included, without touching production.
#[test]
fn commands_that_only_read_work_under_a_read_only_role() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_postgres_database();
    let config_for = |url: &str, name: &str| {
        write(
            &dir.path().join(name),
            &format!(
                "[database]\nurl = \"{url}\"\n\n[rates.fixed]\nBTC = \"50000\"\n\n\
                 [networks.bitcoin]\nenabled = true\nsource = \"devchain\"\n\n\
                 [devchain]\nenabled = true\n"
            ),
        )
    };
    let owner = config_for(&url, "owner.toml");
    run(&owner, &["migrate"]).ok();
    import_btc_pool(&owner, dir.path());
    let id = intent_id(&create(&owner, "order", "ro-1", "BTC", "bitcoin", "50").ok());

    let (server, database) = url.rsplit_once('/').unwrap();
    let reader = format!("pwro_{}", std::process::id());
    runtime().block_on(async {
        let admin = Store::connect(&url).await.unwrap();
        for sql in [
            format!("DROP ROLE IF EXISTS {reader}"),
            format!("CREATE ROLE {reader} LOGIN"),
            format!("ALTER ROLE {reader} SET default_transaction_read_only = on"),
            format!("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}"),
        ] {
            admin.execute_raw(&sql).await.unwrap();
        }
        admin.close().await;
    });
    let user_url = server.replacen("postgres@", &format!("{reader}@"), 1);
    let read_only = config_for(&format!("{user_url}/{database}"), "reader.toml");
    for args in [
        &["status"][..],
        &["check"],
        &["intent", "show", id.as_str()],
        &["transfers", "list"],
        &["transfers", "list", "--lost-window"],
        &["balance", "show", "--account", "a"],
    ] {
        run(&read_only, args).ok();
    }
    let refused = create(&read_only, "order", "ro-2", "BTC", "bitcoin", "50").fails();
    assert!(refused.contains("read-only"), "{refused}");
}

//! `paywatch run` as separate processes sharing one PostgreSQL, so a test
//! can kill, stop and resume them as an operating system would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use paywatch::store::{LeaseHolder, Store};
use paywatch_core::Network;

const PAYWATCH: &str = env!("CARGO_BIN_EXE_paywatch");

/// One instance, named in the lease table by `name`.
pub struct Replica {
    pub name: String,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// Logs of this name's earlier processes, kept for failure messages.
    earlier: String,
}

impl Replica {
    pub fn start(name: &str, config: &Path, dir: &Path) -> Replica {
        let mut r = Replica {
            name: name.to_owned(),
            config: config.to_owned(),
            log: dir.join(format!("{name}.log")),
            child: None,
            earlier: String::new(),
        };
        r.spawn();
        r
    }

    fn spawn(&mut self) {
        self.earlier.push_str(&self.log());
        let file = fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(PAYWATCH);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PAYWATCH") {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .env("RUST_LOG", "info,sqlx=warn")
            .env("PAYWATCH__LEASES__INSTANCE", &self.name)
            .arg("--config")
            .arg(&self.config)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("paywatch run starts");
        self.child = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What this name logged across all its processes.
    pub fn all_logs(&self) -> String {
        format!("{}{}", self.earlier, self.log())
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().to_string();
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success(), "kill {sig} {pid} failed");
    }

    /// SIGKILL: gone wherever it was, nothing flushed, nothing released.
    pub fn kill(&mut self) {
        self.signal("-KILL");
        let mut child = self.child.take().expect("running");
        let _ = child.wait();
    }

    /// SIGSTOP: frozen with its connections open, as a stalled VM.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// A new process under the same name.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} still runs", self.name);
        self.spawn();
    }

    /// SIGTERM, then the exit status within `within`.
    pub fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        self.signal("-TERM");
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not stop within {within:?} of SIGTERM\nlog:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A frozen process does not die of SIGKILL until continued.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The network's lease as the database has it.
pub async fn lease(store: &Store, network: Network) -> Option<LeaseHolder> {
    store
        .lease_holders()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.network == network)
}

/// Waits until someone other than `not` holds the network's lease with a
/// token above `above`, and returns it with how long that took.
pub async fn wait_for_holder(
    store: &Store,
    network: Network,
    not: Option<&str>,
    above: i64,
    within: Duration,
    logs: impl Fn() -> String,
) -> (LeaseHolder, Duration) {
    let started = Instant::now();
    loop {
        if let Some(l) = lease(store, network).await {
            if Some(l.holder.as_str()) != not && l.token > above && !l.expired {
                return (l, started.elapsed());
            }
        }
        if started.elapsed() > within {
            panic!(
                "no other instance took the {network} lease within {within:?}: {:?}\n{}",
                lease(store, network).await,
                logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A config for `paywatch run` on `db_url`, watching Ethereum on `node`
/// from `start`, with leases of `ttl_ms` asked for every `retry_ms`.
pub fn eth_config(
    db_url: &str,
    node: &paywatch_testkit::AnvilNode,
    contracts: &super::eth::Contracts,
    start: u64,
    ttl_ms: u64,
    retry_ms: u64,
) -> String {
    format!(
        r#"
[database]
url = "{db_url}"

[intents]
expiry_secs = 86400

[rates.fixed]
ETH = "2000"

[reconcile]
interval_ms = 100

[leases]
ttl_ms = {ttl_ms}
renew_ms = {renew_ms}
retry_ms = {retry_ms}

[networks.ethereum]
enabled = true
source = "node"
chain_id = {chain_id}
traces = false
poll_interval_ms = 100
blocks_per_poll = 50
start_height = {start}
account_key = "{xpub}"

[networks.ethereum.rpc]
url = "{url}"

[networks.ethereum.contracts]
USDT = "{usdt}"
USDC = "{usdc}"
"#,
        renew_ms = ttl_ms / 6,
        chain_id = paywatch_testkit::anvil::CHAIN_ID,
        xpub = super::eth::account_xpub(),
        url = node.url(),
        usdt = contracts.usdt,
        usdc = contracts.usdc,
    )
}

//! The daemon over the Solana test node from testkit: agave's JSON-RPC over
//! HTTP, blocks of real signed transactions that litesvm executes, and an
//! spl-token mint standing in for USDC (at an address no method accepts).
//! Solana addresses come from imported pools only, as an operator's would.

use std::collections::HashMap;
use std::str::FromStr;

use paywatch::intents::parse_pool;
use paywatch::settings::Settings;
use paywatch_core::Network;
use paywatch_testkit::solana::{associated_token_address, SolanaFault, LAMPORTS_PER_SOL};
use paywatch_testkit::{SolanaNode, SolanaNodeOptions};
use solana_address::Address;
use solana_keypair::Keypair;
use solana_signer::Signer;

#[allow(unused_imports)]
pub use super::daemon::Daemon;
use super::{Backend, TestDb};

/// 100 USD at the fixed test rate of 100 USD per SOL, in lamports.
pub const SOL_FOR_100_USD: u64 = LAMPORTS_PER_SOL;
/// How many fresh addresses [`solana_world`] imports unless told otherwise.
pub const POOL: usize = 12;

#[derive(Debug, Clone)]
pub struct SolanaOptions {
    pub backend: Backend,
    pub expiry_secs: i64,
    pub node: SolanaNodeOptions,
    /// Fresh addresses imported before any intent is made.
    pub pool: usize,
    /// How the node answers from before the daemon starts.
    pub fault: SolanaFault,
}

impl Default for SolanaOptions {
    fn default() -> Self {
        SolanaOptions {
            backend: Backend::Sqlite,
            expiry_secs: 600,
            node: SolanaNodeOptions::default(),
            pool: POOL,
            fault: SolanaFault::None,
        }
    }
}

pub struct SolanaWorld {
    pub node: SolanaNode,
    pub daemon: Daemon,
    /// Owners of the associated token accounts imported as pool addresses.
    pub token_account_owners: HashMap<String, Address>,
    pool_counter: u8,
}

pub fn solana_settings(db_url: &str, node: &SolanaNode, o: &SolanaOptions) -> Settings {
    let mut s = Settings::load(None).expect("defaults load");
    s.database.url = db_url.to_owned();
    s.intents.expiry_secs = o.expiry_secs;
    s.rates.fixed.insert("SOL".into(), "100".into());
    s.reconcile.interval_ms = 100;
    let n = s.networks.get_mut("solana").expect("solana settings");
    n.enabled = true;
    n.source = "node".into();
    n.rpc.url = node.url();
    n.rpc.requests_per_second = Some(0);
    n.rpc.timeout_secs = 5;
    n.poll_interval_ms = 100;
    s
}

/// A fresh key of a fixed seed, none of the node's dev accounts.
fn pool_key(n: u8) -> Keypair {
    let mut seed = [0xA5u8; 32];
    seed[0] = n;
    Keypair::new_from_array(seed)
}

pub fn address(a: &str) -> Address {
    Address::from_str(a).unwrap_or_else(|e| panic!("a Solana address {a}: {e}"))
}

pub async fn solana_world(o: SolanaOptions) -> SolanaWorld {
    let mut node = SolanaNode::start(o.node.clone())
        .await
        .unwrap_or_else(|e| panic!("solana node: {e}"));
    for _ in 0..5 {
        node.produce_block();
    }
    node.set_fault(o.fault.clone());
    let db = TestDb::new(o.backend).await;
    let settings = solana_settings(&db.url, &node, &o);
    let mut daemon = Daemon::start(db, settings).await;
    daemon.network = Network::Solana;
    let mut w = SolanaWorld {
        node,
        daemon,
        token_account_owners: HashMap::new(),
        pool_counter: 0,
    };
    w.import_fresh(o.pool).await;
    // A fresh database starts at the node's tip: pay only once it is read.
    // A node that does not serve its newest block yet has the one below.
    let served = match o.fault {
        SolanaFault::BlockBackendTrails => w.node.slots().1 - 1,
        _ => w.node.slots().1,
    };
    w.daemon.wait_cursor(served).await;
    w
}

impl SolanaWorld {
    pub fn payer(&self) -> Keypair {
        SolanaNode::dev(1)
    }

    pub fn payer_address(&self) -> String {
        self.payer().pubkey().to_string()
    }

    /// Imports addresses as `paywatch addresses import` does: a pool file's
    /// lines, checked by `parse_pool`.
    pub async fn import(&self, addresses: &[String]) {
        let text = addresses.join("\n");
        let parsed = parse_pool("pool.txt", &text, Network::Solana)
            .unwrap_or_else(|e| panic!("the pool parses: {e:?}"));
        assert_eq!(parsed.len(), addresses.len());
        self.daemon
            .ctx
            .store
            .import_addresses(Network::Solana, &parsed, self.daemon.ctx.clock.now_ms())
            .await
            .expect("imported");
    }

    /// Imports `n` fresh wallet addresses.
    pub async fn import_fresh(&mut self, n: usize) -> Vec<String> {
        let mut fresh = Vec::new();
        if n == 0 {
            return fresh;
        }
        for _ in 0..n {
            self.pool_counter += 1;
            fresh.push(pool_key(self.pool_counter).pubkey().to_string());
        }
        self.import(&fresh).await;
        fresh
    }

    /// Imports the associated token account of a fresh owner for `mint`.
    pub async fn import_token_account(&mut self, mint: &Address) -> String {
        self.pool_counter += 1;
        let owner = pool_key(self.pool_counter).pubkey();
        let ata = associated_token_address(&owner, mint).to_string();
        self.import(std::slice::from_ref(&ata)).await;
        self.token_account_owners.insert(ata.clone(), owner);
        ata
    }

    /// Sends SOL from the payer; returns the signature as recorded (base58).
    pub fn pay_sol(&mut self, to: &str, lamports: u64) -> String {
        let payer = self.payer();
        self.node
            .send_sol(&payer, &address(to), lamports)
            .expect("SOL sent")
            .to_string()
    }

    /// Seals what was sent into a block (confirmed at once with the default
    /// lag), returns its slot.
    pub fn confirm(&mut self) -> u64 {
        self.node.produce_block()
    }

    /// Produces blocks until everything sealed so far is finalized.
    pub fn finalize(&mut self) {
        let (processed, _, _) = self.node.slots();
        while self.node.slots().2 < processed {
            self.node.produce_block();
        }
    }

    /// Seals what was sent and finalizes it.
    pub fn settle(&mut self) {
        self.confirm();
        self.finalize();
    }
}

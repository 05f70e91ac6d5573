//! A Solana test node: agave's JSON-RPC over HTTP, served from a chain that
//! litesvm executes, so a Solana watcher can be tested without a validator.
//!
//! [`SolanaNode::start`] serves on [`url`](SolanaNode::url) (127.0.0.1, a
//! free port) what a watcher reads, answering like agave 3.1:
//! - `getSlot` and `getBlockHeight` at `processed`, `confirmed` or
//!   `finalized` (the default);
//! - `getBlocks(start, end?, {commitment})`: the slots with a block, up to
//!   the commitment's slot; `getBlocksWithLimit(start, limit, {commitment})`
//!   likewise, at most `limit` of them;
//! - `getBlock(slot, {encoding: json|base64|base58, transactionDetails,
//!   rewards, commitment, maxSupportedTransactionVersion})`, with agave's
//!   errors: -32007 for a skipped slot, -32004 for a slot past the
//!   commitment's, -32015 for a v0 transaction without
//!   `maxSupportedTransactionVersion`;
//! - `getTransaction`, `getLatestBlockhash`, `getHealth`, `getVersion`.
//!
//! Transactions are real: signed, executed by litesvm (the system program,
//! spl-token, associated token accounts and lookup tables as on mainnet),
//! with the fee, balances, token balances, logs, inner instructions and
//! loaded addresses a validator records. The chain grows only when the test
//! says so, synchronously (no `.await`):
//! - accounts are [`SolanaNode::dev`]`(i)`, funded at genesis;
//! - [`send_sol`](SolanaNode::send_sol),
//!   [`send_sol_failing`](SolanaNode::send_sol_failing),
//!   [`create_usdc_mint`](SolanaNode::create_usdc_mint),
//!   [`mint_tokens`](SolanaNode::mint_tokens),
//!   [`send_token`](SolanaNode::send_token),
//!   [`create_token_account`](SolanaNode::create_token_account) (a program
//!   pays the new account: lamports moved by a CPI),
//!   [`create_lookup_table`](SolanaNode::create_lookup_table),
//!   [`send_sol_v0`](SolanaNode::send_sol_v0) and
//!   [`execute`](SolanaNode::execute) queue a transaction for the next block;
//! - [`produce_block`](SolanaNode::produce_block) seals it,
//!   [`skip_slot`](SolanaNode::skip_slot) leaves the next slot empty;
//! - [`fork`](SolanaNode::fork) replaces the newest unfinalized blocks by
//!   another branch;
//! - [`set_fault`](SolanaNode::set_fault) changes how the server answers.
//!
//! Confirmed is [`confirmed_lag`](SolanaNodeOptions::confirmed_lag) blocks
//! behind the newest (processed) block, finalized
//! [`finalized_lag`](SolanaNodeOptions::finalized_lag) blocks behind
//! confirmed. Slot 0 holds an empty genesis block.
//!
//! Not modelled: votes, rewards, leaders, the 150-block blockhash window
//! (a transaction must sign against the newest blockhash), jsonParsed,
//! and everything outside blocks and transactions.

mod chain;
mod programs;
mod rpc;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use solana_account_decoder_client_types::token::{real_number_string_trimmed, UiTokenAmount};
use solana_address::Address;
use solana_address_lookup_table_interface::instruction::{
    create_lookup_table, extend_lookup_table,
};
use solana_address_lookup_table_interface::state::AddressLookupTable;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_message::{v0, AddressLookupTableAccount, VersionedMessage};
use solana_program_pack::Pack;
use solana_signature::Signature;
use solana_signer::Signer;
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction::Transaction;
use solana_transaction_error::TransactionError;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use chain::{Chain, Ledger};
use rpc::{lock, Served, Shared};

pub use programs::{associated_token_address, ATA_PROGRAM, TOKEN_2022_PROGRAM, TOKEN_PROGRAM};

/// Lamports in a SOL.
pub const LAMPORTS_PER_SOL: u64 = 1_000_000_000;
/// Decimals of [`create_usdc_mint`](SolanaNode::create_usdc_mint)'s mint.
pub const USDC_DECIMALS: u8 = 6;

/// How the server answers, set with [`SolanaNode::set_fault`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SolanaFault {
    /// Answer normally.
    #[default]
    None,
    /// Answer the next `requests` HTTP requests with 429 and a
    /// `Retry-After: retry_after_secs` header, as a public RPC's rate limit
    /// does, then answer normally again.
    RateLimited {
        requests: u64,
        retry_after_secs: u64,
    },
    /// Answer every request with 503, as a node behind a load balancer that
    /// has no healthy backend.
    Unavailable,
    /// Wait this long before answering.
    Slow(Duration),
    /// Answer the next `requests` `getBlock` calls for the newest confirmed
    /// slot with agave's `-32014 Block status not yet available`, as a node
    /// does while that block is still being written.
    TipNotYetAvailable { requests: u64 },
    /// A provider whose `getBlock` backend trails its `getSlot` backend by
    /// a block: `getBlock` of the newest confirmed slot (at any commitment)
    /// answers agave's `-32014 Block status not yet available` for as long
    /// as it is the newest, and is served once a newer block is produced.
    BlockBackendTrails,
    /// A load balancer in front of `backends` nodes, one of them just
    /// restored from a snapshot whose first slot is `first_available`. The
    /// calls about older slots (`getBlock` below it, `getBlocksWithLimit`
    /// from below it, `getFirstAvailableBlock`) go round robin, the restored
    /// backend first: it answers as agave does without those slots
    /// (`-32001 … cleaned up`, a list starting at `first_available`,
    /// `first_available`), the others from the whole ledger.
    RestoredBackend { first_available: u64, backends: u64 },
}

/// How to start a [`SolanaNode`].
#[derive(Debug, Clone)]
pub struct SolanaNodeOptions {
    /// Confirmed = the newest block − this many blocks.
    pub confirmed_lag: usize,
    /// Finalized = confirmed − this many blocks.
    pub finalized_lag: usize,
    /// How many [`SolanaNode::dev`] accounts are funded at genesis.
    pub dev_accounts: u8,
    /// What each dev account holds at genesis, in lamports.
    pub dev_balance: u64,
}

impl Default for SolanaNodeOptions {
    fn default() -> Self {
        Self {
            confirmed_lag: 0,
            finalized_lag: 2,
            dev_accounts: 10,
            dev_balance: 1_000 * LAMPORTS_PER_SOL,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SolanaNodeError {
    #[error("cannot serve: {0}")]
    Io(#[from] io::Error),
    /// A leader would not include the transaction (bad signature, unknown
    /// blockhash, duplicate, payer cannot pay the fee, ...).
    #[error("transaction rejected: {0}")]
    Rejected(TransactionError),
    #[error("cannot build the transaction: {0}")]
    Build(String),
    #[error("cannot fork: {0}")]
    Fork(String),
}

/// The node; the server stops when it is dropped.
pub struct SolanaNode {
    chain: Chain,
    shared: Shared,
    options: SolanaNodeOptions,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl std::fmt::Debug for SolanaNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SolanaNode")
            .field("addr", &self.addr)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Drop for SolanaNode {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SolanaNode {
    /// Funds the dev accounts, makes the genesis block and serves.
    pub async fn start(options: SolanaNodeOptions) -> Result<SolanaNode, SolanaNodeError> {
        let mut ledger = Ledger::default();
        let mut chain = Chain::new(&mut ledger);
        for i in 0..options.dev_accounts {
            // litesvm's own airdrop transaction: genesis funds, in no block.
            chain
                .svm
                .airdrop(&Self::dev(i).pubkey(), options.dev_balance)
                .map_err(|f| SolanaNodeError::Rejected(f.err))?;
        }
        ledger.update_commitment(options.confirmed_lag, options.finalized_lag);
        let shared: Shared = Arc::new(std::sync::Mutex::new(Served {
            ledger,
            ..Served::default()
        }));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(rpc::serve(listener, shared.clone()));
        Ok(SolanaNode {
            chain,
            shared,
            options,
            addr,
            server,
        })
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Dev account `i`, from a fixed secret key (`[i + 1; 32]`); the first
    /// [`dev_accounts`](SolanaNodeOptions::dev_accounts) are funded.
    pub fn dev(i: u8) -> Keypair {
        Keypair::new_from_array([i.wrapping_add(1); 32])
    }

    /// Lamports `address` holds now (after the queued transactions).
    pub fn balance(&self, address: &Address) -> u64 {
        self.chain.svm.get_balance(address).unwrap_or(0)
    }

    /// The blockhash a transaction must sign against now.
    pub fn latest_blockhash(&self) -> solana_message::Hash {
        self.chain.svm.latest_blockhash()
    }

    /// Rent-exempt minimum for an account of `data_len` bytes.
    pub fn rent_exempt_minimum(&self, data_len: usize) -> u64 {
        self.chain.svm.minimum_balance_for_rent_exemption(data_len)
    }

    /// HTTP requests received so far (faulted ones included).
    pub fn requests(&self) -> u64 {
        lock(&self.shared).requests
    }

    /// JSON-RPC calls answered so far, by method (each call of a batch
    /// counts; refused HTTP requests, 429 or 503, hold no call).
    pub fn calls(&self) -> std::collections::BTreeMap<String, u64> {
        lock(&self.shared).calls.clone()
    }

    /// The `transactionDetails` of every `getBlock` asked so far, in order
    /// (`"full"` when the request named none).
    pub fn block_details_asked(&self) -> Vec<String> {
        lock(&self.shared).block_details.clone()
    }

    /// Bytes of response bodies sent so far, as sent: gzip-compressed above
    /// 256 bytes to a client that accepts it, as a provider's front end does.
    pub fn bytes_sent(&self) -> u64 {
        lock(&self.shared).bytes_sent
    }

    /// Responses sent gzip-compressed so far.
    pub fn gzipped_responses(&self) -> u64 {
        lock(&self.shared).gzipped
    }

    /// The newest slot at processed / confirmed / finalized.
    pub fn slots(&self) -> (u64, u64, u64) {
        let s = lock(&self.shared);
        (
            s.ledger.processed_slot,
            s.ledger.confirmed_slot,
            s.ledger.finalized_slot,
        )
    }

    pub fn set_fault(&self, fault: SolanaFault) {
        let mut s = lock(&self.shared);
        s.fault = fault;
        s.round_robin = 0;
    }

    /// As a node of a newer agave than the crates paywatch is built with:
    /// from now on every block gets a failed transaction (paid by the last
    /// dev account), and every failed transaction's `err` and `status` in
    /// `getBlock` and `getTransaction` answers name an error variant
    /// Solana's types do not know yet, in the shapes agave's serde gives
    /// variants (a bare string, an object, inside `InstructionError`).
    pub fn set_unknown_failures(&self, on: bool) {
        lock(&self.shared).unknown_failures = on;
    }

    /// Cleans every slot below `slot` out of the node's ledger, as a node
    /// without long-term storage does past its retention: `getBlock` on
    /// them answers agave's `-32001 … cleaned up`, `getBlocksWithLimit`
    /// silently starts at `slot`, `getFirstAvailableBlock` answers `slot`.
    pub fn forget_below(&self, slot: u64) {
        lock(&self.shared).ledger.first_available = slot;
    }

    /// The fault in force: a counted one returns to `None` once used up.
    pub fn fault(&self) -> SolanaFault {
        lock(&self.shared).fault.clone()
    }

    /// Executes `tx` and queues it for the next block. `Ok` means it is
    /// included, with the error it failed with, if any.
    pub fn execute(
        &mut self,
        tx: VersionedTransaction,
    ) -> Result<(Signature, Option<TransactionError>), SolanaNodeError> {
        self.chain.execute(tx).map_err(SolanaNodeError::Rejected)
    }

    /// A legacy transaction of `ixs`, paid by the first signer.
    fn send(
        &mut self,
        ixs: &[Instruction],
        signers: &[&Keypair],
    ) -> Result<Signature, SolanaNodeError> {
        let payer = signers
            .first()
            .ok_or_else(|| SolanaNodeError::Build("no signer".into()))?
            .pubkey();
        let tx =
            Transaction::new_signed_with_payer(ixs, Some(&payer), signers, self.latest_blockhash());
        self.execute(tx.into()).map(|(sig, _)| sig)
    }

    pub fn send_sol(
        &mut self,
        from: &Keypair,
        to: &Address,
        lamports: u64,
    ) -> Result<Signature, SolanaNodeError> {
        let ix = solana_system_interface::instruction::transfer(&from.pubkey(), to, lamports);
        self.send(&[ix], &[from])
    }

    /// A transfer of more than `from` holds: included, failed with the system
    /// program's `Custom(1)`, only the fee charged.
    pub fn send_sol_failing(
        &mut self,
        from: &Keypair,
        to: &Address,
    ) -> Result<Signature, SolanaNodeError> {
        let too_much = self.balance(&from.pubkey()).saturating_add(1);
        self.send_sol(from, to, too_much)
    }

    /// A new spl-token mint of [`USDC_DECIMALS`], `authority` minting.
    pub fn create_usdc_mint(&mut self, authority: &Keypair) -> Result<Address, SolanaNodeError> {
        let mint = Keypair::new();
        let len = spl_token_interface::state::Mint::LEN;
        let ixs = [
            solana_system_interface::instruction::create_account(
                &authority.pubkey(),
                &mint.pubkey(),
                self.rent_exempt_minimum(len),
                u64::try_from(len).unwrap_or(u64::MAX),
                &TOKEN_PROGRAM,
            ),
            spl_token_interface::instruction::initialize_mint2(
                &TOKEN_PROGRAM,
                &mint.pubkey(),
                &authority.pubkey(),
                None,
                USDC_DECIMALS,
            )
            .map_err(|e| SolanaNodeError::Build(e.to_string()))?,
        ];
        self.send(&ixs, &[authority, &mint])?;
        Ok(mint.pubkey())
    }

    /// Creates `owner`'s associated token account for `mint`, paid by
    /// `payer`: the associated token program moves the rent lamports to the
    /// new account by a CPI, a payment no top-level instruction names.
    pub fn create_token_account(
        &mut self,
        payer: &Keypair,
        owner: &Address,
        mint: &Address,
    ) -> Result<Signature, SolanaNodeError> {
        let ix = programs::create_ata_idempotent(&payer.pubkey(), owner, mint);
        self.send(&[ix], &[payer])
    }

    /// Mints `amount` (base units) to `to`'s associated token account,
    /// creating it if needed.
    pub fn mint_tokens(
        &mut self,
        mint: &Address,
        authority: &Keypair,
        to: &Address,
        amount: u64,
    ) -> Result<Signature, SolanaNodeError> {
        let ixs = [
            programs::create_ata_idempotent(&authority.pubkey(), to, mint),
            spl_token_interface::instruction::mint_to(
                &TOKEN_PROGRAM,
                mint,
                &associated_token_address(to, mint),
                &authority.pubkey(),
                &[],
                amount,
            )
            .map_err(|e| SolanaNodeError::Build(e.to_string()))?,
        ];
        self.send(&ixs, &[authority])
    }

    /// `transferChecked` of `amount` base units of `mint` between the
    /// associated token accounts of `from` and `to`, creating `to`'s first.
    pub fn send_token(
        &mut self,
        from: &Keypair,
        mint: &Address,
        to: &Address,
        amount: u64,
    ) -> Result<Signature, SolanaNodeError> {
        let ixs = [
            programs::create_ata_idempotent(&from.pubkey(), to, mint),
            self.transfer_checked(from, mint, to, amount)?,
        ];
        self.send(&ixs, &[from])
    }

    fn transfer_checked(
        &self,
        from: &Keypair,
        mint: &Address,
        to: &Address,
        amount: u64,
    ) -> Result<Instruction, SolanaNodeError> {
        spl_token_interface::instruction::transfer_checked(
            &TOKEN_PROGRAM,
            &associated_token_address(&from.pubkey(), mint),
            mint,
            &associated_token_address(to, mint),
            &from.pubkey(),
            &[],
            amount,
            USDC_DECIMALS,
        )
        .map_err(|e| SolanaNodeError::Build(e.to_string()))
    }

    /// An address lookup table holding `addresses`, owned by `authority`.
    /// As on mainnet, its addresses are usable from the next block on.
    pub fn create_lookup_table(
        &mut self,
        authority: &Keypair,
        addresses: Vec<Address>,
    ) -> Result<Address, SolanaNodeError> {
        let me = authority.pubkey();
        // The table's address derives from the recent slot; use the newest.
        let recent = lock(&self.shared).ledger.processed_slot;
        let (create, table) = create_lookup_table(me, me, recent);
        let extend = extend_lookup_table(table, me, Some(me), addresses);
        let tx = Transaction::new_signed_with_payer(
            &[create, extend],
            Some(&me),
            &[authority],
            self.latest_blockhash(),
        );
        match self.execute(tx.into())? {
            (_, None) => Ok(table),
            (_, Some(failed)) => Err(SolanaNodeError::Rejected(failed)),
        }
    }

    /// A v0 transfer whose recipient `to` is loaded from lookup table
    /// `table` (so `to` appears only in `loadedAddresses`).
    pub fn send_sol_v0(
        &mut self,
        from: &Keypair,
        to: &Address,
        lamports: u64,
        table: &Address,
    ) -> Result<Signature, SolanaNodeError> {
        let acc = self
            .chain
            .svm
            .get_account(table)
            .ok_or_else(|| SolanaNodeError::Build(format!("no lookup table {table}")))?;
        let addresses = AddressLookupTable::deserialize(&acc.data)
            .map_err(|e| SolanaNodeError::Build(e.to_string()))?
            .addresses
            .to_vec();
        let lookup = AddressLookupTableAccount {
            key: *table,
            addresses,
        };
        let ix = solana_system_interface::instruction::transfer(&from.pubkey(), to, lamports);
        let msg =
            v0::Message::try_compile(&from.pubkey(), &[ix], &[lookup], self.latest_blockhash())
                .map_err(|e| SolanaNodeError::Build(e.to_string()))?;
        let tx = VersionedTransaction::try_new(VersionedMessage::V0(msg), &[from])
            .map_err(|e| SolanaNodeError::Build(e.to_string()))?;
        self.execute(tx).map(|(sig, _)| sig)
    }

    /// Seals the queued transactions into a block at the next slot.
    pub fn produce_block(&mut self) -> u64 {
        self.seal(0)
    }

    /// Leaves the next slot without a block, then seals the queued
    /// transactions into a block at the slot after; returns that slot.
    pub fn skip_slot(&mut self) -> u64 {
        self.seal(1)
    }

    fn seal(&mut self, skip: u64) -> u64 {
        if lock(&self.shared).unknown_failures {
            let payer = Self::dev(self.options.dev_accounts.saturating_sub(1));
            // Failing is the point; a rejected one only leaves it out.
            let _ = self.send_sol_failing(&payer, &Self::dev(0).pubkey());
        }
        let mut s = lock(&self.shared);
        let slot = self.chain.seal(&mut s.ledger, skip);
        s.ledger
            .update_commitment(self.options.confirmed_lag, self.options.finalized_lag);
        self.chain.prune(s.ledger.finalized_slot);
        slot
    }

    /// Drops the newest `depth` blocks, which must all be above finalized,
    /// and anything queued: the chain is back at their parent's state, with
    /// a different blockhash sequence ahead, so the blocks the test produces
    /// next form another branch (other blockhashes; the dropped payments
    /// are gone unless sent again). Returns the dropped transactions'
    /// signatures.
    pub fn fork(&mut self, depth: usize) -> Result<Vec<Signature>, SolanaNodeError> {
        let mut s = lock(&self.shared);
        let dropped = self
            .chain
            .rewind(&mut s.ledger, depth)
            .map_err(SolanaNodeError::Fork)?;
        s.ledger
            .update_commitment(self.options.confirmed_lag, self.options.finalized_lag);
        Ok(dropped)
    }
}

/// As agave's `token_amount_to_ui_amount_v3` for a plain token. `ui_amount`
/// is parsed from the exact decimal string: the nearest f64, as agave's
/// division gives, without float arithmetic.
pub(crate) fn ui_token_amount(amount: u64, decimals: u8) -> UiTokenAmount {
    let ui_amount_string = real_number_string_trimmed(amount, decimals);
    UiTokenAmount {
        ui_amount: ui_amount_string.parse::<f64>().ok(),
        decimals,
        amount: amount.to_string(),
        ui_amount_string,
    }
}

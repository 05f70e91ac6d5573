//! The chain the node serves: blocks and transaction infos shaped like
//! mainnet's, built from queued transactions.
//!
//! Blocks are stored as the encoded answers (`BlockExtention`,
//! `TransactionInfoList`): 10 000 blocks of 300 transactions are ~2 GB that
//! way and several times more as decoded structs.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use alloy_primitives::keccak256;
use prost::Message;
use tron_grpc as pb;

use pb::transaction::contract::ContractType;
use pb::transaction::result::ContractResult;

use super::internal::{self, InternalTx, InternalTxSaving};
use super::keys::{sha256, tron_address, tron_body, TronAccount, ADDRESS_PREFIX};
use super::{Fault, TronNodeError, TronNodeOptions};

/// Milliseconds between blocks, as on mainnet.
pub const BLOCK_INTERVAL_MS: i64 = 3_000;
/// How many witnesses (super representatives) take turns producing blocks.
pub const WITNESS_COUNT: usize = 27;
/// `GetBlockByLimitNext2` answers at most this many blocks, like java-tron.
pub const BLOCK_LIMIT: i64 = 100;
/// A transaction expires this long after its timestamp (the wallets' default).
const EXPIRATION_MS: i64 = 60_000;
/// The block header version mainnet blocks carry nowadays.
const BLOCK_VERSION: i32 = 31;
/// `fee_limit` of smart-contract calls: 100 TRX, a common wallet setting.
const FEE_LIMIT_SUN: i64 = 100_000_000;
/// Bandwidth a TRX transfer uses (bytes), paid from free bandwidth.
const TRX_NET_USAGE: i64 = 268;
/// Bandwidth a contract call uses, burnt at 1000 sun a byte.
const TRIGGER_NET_FEE: i64 = 345_000;
/// Energy of a TRC-20 transfer to an address that already holds the token.
const TRANSFER_ENERGY: i64 = 14_650;
/// Energy burnt by a transfer that reverts (a failed `require`).
const REVERT_ENERGY: i64 = 9_500;
/// Sun per unit of energy (the current mainnet price).
const ENERGY_PRICE: i64 = 100;
/// The message java-tron puts in the info of a reverted call.
const REVERT_MESSAGE: &[u8] = b"REVERT opcode executed";
/// `transfer(address,uint256)`.
const TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];
/// `topics[0]` of `Transfer(address,address,uint256)`.
pub const TRANSFER_TOPIC: [u8; 32] = [
    0xdd, 0xf2, 0x52, 0xad, 0x1b, 0xe2, 0xc8, 0x9b, 0x69, 0xc2, 0xb0, 0x68, 0xfc, 0x37, 0x8d, 0xaa,
    0x95, 0x2b, 0xa7, 0xf1, 0x63, 0xc4, 0xa1, 0x16, 0x28, 0xf5, 0x5a, 0x4d, 0xf5, 0x23, 0xb3, 0xef,
];
/// The function a contract-made payment calls: its arguments (an opaque
/// order id) do not name the recipient, only the token's log does.
const PAYOUT_SIGNATURE: &str = "payout(bytes32)";
/// Fill blocks sign with this many accounts, made once.
const FILL_SENDERS: u32 = 16;
/// Fill blocks are handed to the servers this many at a time, so queries
/// are not held up for the whole fill.
const FILL_COMMIT_EVERY: usize = 64;

/// A transaction id: sha256 of the transaction's serialized `raw_data`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId(pub [u8; 32]);

impl TxId {
    /// Lower-case hex, as Tronscan and the HTTP API show it.
    pub fn to_hex(&self) -> String {
        alloy_primitives::hex::encode(self.0)
    }
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TxId({})", self.to_hex())
    }
}

/// A contract the node emits logs for. There is no EVM: a contract is only
/// an address that transactions call and logs name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TronContract {
    name: String,
    body: [u8; 21],
    address: String,
}

impl TronContract {
    fn new(name: &str, body: [u8; 21]) -> TronContract {
        TronContract {
            name: name.to_owned(),
            body,
            address: tron_address(&body),
        }
    }

    /// The name it was deployed under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base58check address (`T…`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The 21-byte address body (`0x41` + 20 bytes).
    pub fn body(&self) -> [u8; 21] {
        self.body
    }
}

/// A TRC-20 `Transfer` log a contract call emits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trc20Log {
    /// The token contract (base58check) that emits the log.
    pub token: String,
    /// Whose tokens move (base58check; an account or a contract).
    pub from: String,
    /// Who receives them (base58check).
    pub to: String,
    /// In the token's base units.
    pub amount: u128,
}

/// A signed transaction and its outcome, waiting for a block. The info's
/// block number and time are filled in when it is mined.
#[derive(Debug, Clone)]
pub(crate) struct PendingTx {
    txid: [u8; 32],
    pub(super) tx: pb::Transaction,
    pub(super) info: pb::TransactionInfo,
}

/// A block as served.
#[derive(Debug)]
pub(crate) struct StoredBlock {
    pub number: u64,
    pub blockid: [u8; 32],
    pub timestamp: i64,
    /// Index of the witness that produced it.
    pub witness: usize,
    pub txids: Vec<[u8; 32]>,
    /// The encoded `BlockExtention`.
    pub ext: Vec<u8>,
    /// The encoded `TransactionInfoList`, in the block's order.
    pub infos: Vec<u8>,
    /// What it did to balances, internal transactions included.
    pub moves: super::balances::Moves,
}

impl StoredBlock {
    pub fn extention(&self) -> Result<pb::BlockExtention, prost::DecodeError> {
        pb::BlockExtention::decode(self.ext.as_slice())
    }

    pub fn info_list(&self) -> Result<pb::TransactionInfoList, prost::DecodeError> {
        pb::TransactionInfoList::decode(self.infos.as_slice())
    }
}

/// What the servers read.
#[derive(Debug)]
pub(crate) struct Chain {
    /// The number of `blocks[0]`, the genesis block.
    base: u64,
    /// Never empty: the genesis block is never replaced.
    blocks: Vec<Arc<StoredBlock>>,
    solidity_lag: u64,
    fault: Fault,
}

impl Chain {
    pub fn tip(&self) -> &Arc<StoredBlock> {
        // `blocks` always holds at least the genesis block.
        &self.blocks[self.blocks.len() - 1]
    }

    pub fn solidified(&self) -> u64 {
        self.tip()
            .number
            .saturating_sub(self.solidity_lag)
            .max(self.base)
    }

    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// `address`'s account as of block `upto`.
    pub fn account(&self, address: [u8; 21], upto: u64) -> pb::Account {
        super::balances::account(
            address,
            self.blocks
                .iter()
                .filter(|b| b.number <= upto)
                .map(|b| (&b.moves, b.timestamp)),
        )
    }

    /// Block `number`, if it exists and is at most `upto`.
    pub fn block(&self, number: i64, upto: u64) -> Option<&Arc<StoredBlock>> {
        let number = u64::try_from(number).ok()?;
        if number > upto {
            return None;
        }
        let index = usize::try_from(number.checked_sub(self.base)?).ok()?;
        self.blocks.get(index)
    }

    /// The block holding `txid` among blocks up to `upto`, and its index
    /// there. A scan from the tip down: millions of ids take milliseconds,
    /// and an index would cost more memory than the blocks' ids do.
    pub fn find_tx(&self, txid: &[u8], upto: u64) -> Option<(Arc<StoredBlock>, usize)> {
        self.blocks
            .iter()
            .rev()
            .filter(|b| b.number <= upto)
            .find_map(|b| {
                let i = b.txids.iter().position(|id| id.as_slice() == txid)?;
                Some((Arc::clone(b), i))
            })
    }
}

/// Everything that makes blocks; one builder at a time.
#[derive(Debug)]
pub(crate) struct Builder {
    witnesses: Vec<TronAccount>,
    pending: Vec<PendingTx>,
    /// Bumped by every reorg, so a replaced height gets another witness.
    generation: usize,
    /// Counts queued transactions; varies their timestamps.
    queued: u64,
    /// TRC-20 contracts deployed so far (fill blocks move them).
    tokens: Vec<TronContract>,
    /// Contracts deployed so far, by name.
    contracts: HashMap<String, TronContract>,
    fill: Option<FillKit>,
    /// What the infos of blocks made from now on keep of the internal
    /// transactions their contracts made.
    saving: InternalTxSaving,
}

/// What fill blocks are made of, made on first use.
#[derive(Debug)]
struct FillKit {
    senders: Vec<TronAccount>,
    /// The contract that makes contract-made payments.
    payer: TronContract,
    /// The token moved when no TRC-20 was deployed.
    token: TronContract,
    payout_selector: [u8; 4],
    /// Counts fill transactions: makes each recipient and amount new.
    counter: u64,
}

/// The chain and its builder, shared by the node handle and the servers.
/// Lock order: `builder`, then `chain`.
#[derive(Debug)]
pub(crate) struct Shared {
    chain: RwLock<Chain>,
    builder: Mutex<Builder>,
    /// Per rpc (`Service/Method`): how many were answered, and the bytes of
    /// their answers as encoded on the wire (protobuf, without framing).
    served: Mutex<std::collections::BTreeMap<&'static str, (u64, u64)>>,
}

/// The tip a new transaction references (TaPoS) and is timed after.
struct RefBlock {
    number: u64,
    blockid: [u8; 32],
    timestamp: i64,
}

impl RefBlock {
    fn of(block: &StoredBlock) -> RefBlock {
        RefBlock {
            number: block.number,
            blockid: block.blockid,
            timestamp: block.timestamp,
        }
    }
}

impl Shared {
    pub fn new(options: &TronNodeOptions, now_ms: i64) -> Result<Shared, TronNodeError> {
        let witnesses: Vec<TronAccount> = (0..WITNESS_COUNT)
            .map(|i| TronAccount::dev(1_000_000 + i as u32))
            .collect();
        // Block times sit on 3-second slots, as mainnet's do.
        let timestamp = options
            .genesis_timestamp_ms
            .unwrap_or(now_ms - now_ms.rem_euclid(BLOCK_INTERVAL_MS));
        let genesis = assemble(
            options.genesis_number,
            [0u8; 32],
            timestamp,
            0,
            &witnesses[0],
            Vec::new(),
        )?;
        Ok(Shared {
            chain: RwLock::new(Chain {
                base: options.genesis_number,
                blocks: vec![Arc::new(genesis)],
                solidity_lag: options.solidity_lag,
                fault: Fault::None,
            }),
            builder: Mutex::new(Builder {
                witnesses,
                pending: Vec::new(),
                generation: 0,
                queued: 0,
                tokens: Vec::new(),
                contracts: HashMap::new(),
                fill: None,
                saving: options.internal_tx,
            }),
            served: Mutex::new(std::collections::BTreeMap::new()),
        })
    }

    /// Records an answered rpc and the size of its answer.
    pub fn count_served(&self, rpc: &'static str, answer_bytes: usize) {
        let mut served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = served.entry(rpc).or_default();
        entry.0 += 1;
        entry.1 += u64::try_from(answer_bytes).unwrap_or(u64::MAX);
    }

    pub fn served(&self) -> std::collections::BTreeMap<&'static str, (u64, u64)> {
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    // A panic while holding a lock leaves data that is still consistent
    // (blocks are swapped in whole), so poisoning is ignored.
    pub fn read(&self) -> RwLockReadGuard<'_, Chain> {
        self.chain.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Chain> {
        self.chain.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn builder(&self) -> MutexGuard<'_, Builder> {
        self.builder.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tip(&self) -> Arc<StoredBlock> {
        Arc::clone(self.read().tip())
    }

    pub fn set_fault(&self, fault: Fault) {
        self.write().fault = fault;
    }

    pub fn set_solidity_lag(&self, lag: u64) {
        self.write().solidity_lag = lag;
    }

    pub fn set_internal_tx_saving(&self, saving: InternalTxSaving) {
        self.builder().saving = saving;
    }

    pub fn pending_len(&self) -> usize {
        self.builder().pending.len()
    }

    /// The height of the block that holds `txid` now.
    pub fn tx_height(&self, txid: &TxId) -> Option<u64> {
        let chain = self.read();
        let upto = chain.tip().number;
        chain.find_tx(&txid.0, upto).map(|(b, _)| b.number)
    }

    // --- contracts -------------------------------------------------------

    /// A contract named `name` at `body`, or the one already deployed under
    /// that name.
    fn deploy(&self, name: &str, body: Option<[u8; 21]>, trc20: bool) -> TronContract {
        let mut b = self.builder();
        if let Some(c) = b.contracts.get(name) {
            return c.clone();
        }
        let body = body.unwrap_or_else(|| contract_body(name));
        let contract = TronContract::new(name, body);
        b.contracts.insert(name.to_owned(), contract.clone());
        if trc20 {
            b.tokens.push(contract.clone());
        }
        contract
    }

    pub fn deploy_trc20(&self, name: &str) -> TronContract {
        self.deploy(name, None, true)
    }

    pub fn deploy_trc20_at(
        &self,
        name: &str,
        address: &str,
    ) -> Result<TronContract, TronNodeError> {
        let body = tron_body(address)?;
        Ok(self.deploy(name, Some(body), true))
    }

    pub fn deploy_contract(&self, name: &str) -> TronContract {
        self.deploy(name, None, false)
    }

    // --- queueing --------------------------------------------------------

    /// Builds a transaction against the current tip and queues it.
    fn queue(
        &self,
        make: impl Fn(&RefBlock, i64) -> Result<PendingTx, TronNodeError>,
    ) -> Result<TxId, TronNodeError> {
        let mut b = self.builder();
        let tip = RefBlock::of(&self.tip());
        // Created between the tip and the next block; two equal transfers
        // queued at the same tip get different timestamps, hence txids, as
        // two real wallet calls would.
        let mut offset = b.queued;
        loop {
            let timestamp = tip.timestamp + 1 + (offset % (BLOCK_INTERVAL_MS as u64 - 2)) as i64;
            let pending = make(&tip, timestamp)?;
            offset += 1;
            if b.pending.iter().all(|p| p.txid != pending.txid) {
                b.queued = offset;
                let id = TxId(pending.txid);
                b.pending.push(pending);
                return Ok(id);
            }
        }
    }

    pub fn send_trx(&self, from: &TronAccount, to: &str, sun: u64) -> Result<TxId, TronNodeError> {
        let to = tron_body(to)?;
        let sun = i64::try_from(sun).map_err(|_| TronNodeError::InvalidInput {
            what: "amount",
            value: sun.to_string(),
            expected: "at most i64::MAX sun".to_owned(),
        })?;
        self.queue(|tip, ts| transfer_tx(from, to, sun, tip, ts))
    }

    pub fn trc20_transfer(
        &self,
        token: &TronContract,
        from: &TronAccount,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        let to = tron_body(to)?;
        self.queue(|tip, ts| trc20_tx(token.body, from, to, amount, true, tip, ts))
    }

    pub fn trc20_transfer_failing(
        &self,
        token: &TronContract,
        from: &TronAccount,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        let to = tron_body(to)?;
        self.queue(|tip, ts| trc20_tx(token.body, from, to, amount, false, tip, ts))
    }

    pub fn contract_trc20_transfer(
        &self,
        caller: &TronAccount,
        payer: &TronContract,
        token: &TronContract,
        to: &str,
        amount: u128,
    ) -> Result<TxId, TronNodeError> {
        let to = tron_body(to)?;
        let selector = selector(PAYOUT_SIGNATURE);
        let order = self.builder().queued;
        self.queue(|tip, ts| {
            payout_tx(
                caller, payer.body, token.body, to, amount, selector, order, tip, ts,
            )
        })
    }

    pub fn trigger(
        &self,
        caller: &TronAccount,
        contract: &TronContract,
        calldata: &[u8],
        logs: &[Trc20Log],
    ) -> Result<TxId, TronNodeError> {
        let logs = logs
            .iter()
            .map(|l| {
                Ok(transfer_log(
                    tron_body(&l.token)?,
                    tron_body(&l.from)?,
                    tron_body(&l.to)?,
                    l.amount,
                ))
            })
            .collect::<Result<Vec<_>, TronNodeError>>()?;
        // A call that emits transfers returns true, as `transfer` does.
        let result = if logs.is_empty() {
            Vec::new()
        } else {
            word_u128(1).to_vec()
        };
        self.queue(|tip, ts| {
            let raw = trigger_raw(caller, contract.body, calldata.to_vec(), 0, tip, ts);
            let (txid, tx) = sign_tx(caller, raw, ContractResult::Success)?;
            let info = trigger_info(txid, contract.body, Ok((logs.clone(), result.clone())));
            Ok(PendingTx { txid, tx, info })
        })
    }

    pub fn contract_trx_payout(
        &self,
        caller: &TronAccount,
        payer: &TronContract,
        to: &str,
        sun: u64,
    ) -> Result<TxId, TronNodeError> {
        let sun = i64::try_from(sun).map_err(|_| TronNodeError::InvalidInput {
            what: "amount",
            value: sun.to_string(),
            expected: "at most i64::MAX sun".to_owned(),
        })?;
        let order = self.builder().queued;
        let mut data = selector(PAYOUT_SIGNATURE).to_vec();
        data.extend_from_slice(&sha256(&order.to_be_bytes()));
        let paid = [InternalTx::call(payer.address(), to, sun)];
        self.trigger_internal(caller, payer, &data, 0, &paid, true)
    }

    pub fn trigger_internal(
        &self,
        caller: &TronAccount,
        contract: &TronContract,
        calldata: &[u8],
        call_value: i64,
        made: &[InternalTx],
        succeeds: bool,
    ) -> Result<TxId, TronNodeError> {
        // Every address must read before anything is queued.
        internal::to_proto(&[0; 32], made, false)?;
        self.queue(|tip, ts| {
            let raw = trigger_raw(
                caller,
                contract.body,
                calldata.to_vec(),
                call_value,
                tip,
                ts,
            );
            let outcome = if succeeds {
                ContractResult::Success
            } else {
                ContractResult::Revert
            };
            let (txid, tx) = sign_tx(caller, raw, outcome)?;
            let mut info = if succeeds {
                trigger_info(txid, contract.body, Ok((Vec::new(), Vec::new())))
            } else {
                trigger_info(txid, contract.body, Err(()))
            };
            info.internal_transactions = internal::to_proto(&txid, made, !succeeds)?;
            Ok(PendingTx { txid, tx, info })
        })
    }

    // --- blocks ----------------------------------------------------------

    /// Mines `n` blocks, the queued transactions in the first; the new tip.
    pub fn mine(&self, n: u64) -> Result<u64, TronNodeError> {
        let mut b = self.builder();
        let mut parent = self.tip();
        let mut made = Vec::new();
        for i in 0..n {
            let txs = if i == 0 {
                b.pending.clone()
            } else {
                Vec::new()
            };
            let block = b.next_block(&parent, None, txs)?;
            parent = Arc::new(block);
            made.push(Arc::clone(&parent));
        }
        if n > 0 {
            b.pending.clear();
        }
        let mut chain = self.write();
        chain.blocks.extend(made);
        Ok(chain.tip().number)
    }

    /// Mines `n` blocks of `per_block` generated transactions each (and the
    /// queued ones in the first); the new tip.
    pub fn fill_blocks(&self, n: u64, per_block: usize) -> Result<u64, TronNodeError> {
        let mut b = self.builder();
        let mut parent = self.tip();
        let mut made = Vec::new();
        for i in 0..n {
            let mut txs = if i == 0 {
                std::mem::take(&mut b.pending)
            } else {
                Vec::new()
            };
            txs.reserve(per_block);
            let tip = RefBlock::of(&parent);
            for j in 0..per_block {
                let timestamp = tip.timestamp + 1 + (j as i64 % (BLOCK_INTERVAL_MS - 2));
                txs.push(b.fill_tx(&tip, timestamp)?);
            }
            parent = Arc::new(b.next_block(&parent, None, txs)?);
            made.push(Arc::clone(&parent));
            if made.len() == FILL_COMMIT_EVERY {
                self.write().blocks.append(&mut made);
            }
        }
        let mut chain = self.write();
        chain.blocks.append(&mut made);
        Ok(chain.tip().number)
    }

    /// Replaces the last `depth` blocks with `replacement.len()` new ones;
    /// block i of the new branch holds the transactions `replacement[i]`
    /// names (orphaned by this reorg, or queued). The new tip.
    pub fn reorg(&self, depth: u64, replacement: &[Vec<TxId>]) -> Result<u64, TronNodeError> {
        let mut b = self.builder();
        let (fork, old) = {
            let chain = self.read();
            let replaceable = chain.tip().number - chain.base;
            if depth > replaceable {
                return Err(TronNodeError::InvalidInput {
                    what: "reorg depth",
                    value: depth.to_string(),
                    expected: format!("at most {replaceable} (the genesis block stays)"),
                });
            }
            let keep = chain.blocks.len() - depth as usize;
            (
                Arc::clone(&chain.blocks[keep - 1]),
                chain.blocks[keep..].to_vec(),
            )
        };
        let mut orphans = HashMap::new();
        for block in &old {
            for p in unmine(block)? {
                orphans.insert(p.txid, p);
            }
        }
        let mut used = HashSet::new();
        let mut branch_txs = Vec::with_capacity(replacement.len());
        for ids in replacement {
            let mut txs = Vec::with_capacity(ids.len());
            for id in ids {
                if !used.insert(*id) {
                    return Err(TronNodeError::InvalidInput {
                        what: "reorg transaction",
                        value: id.to_hex(),
                        expected: "each transaction named once".to_owned(),
                    });
                }
                let p = match orphans.get(&id.0) {
                    Some(p) => p.clone(),
                    None => b
                        .pending
                        .iter()
                        .find(|p| p.txid == id.0)
                        .cloned()
                        .ok_or(TronNodeError::UnknownTransaction(*id))?,
                };
                txs.push(p);
            }
            branch_txs.push(txs);
        }
        b.generation += 1;
        let mut parent = fork;
        let mut made = Vec::new();
        for (i, txs) in branch_txs.into_iter().enumerate() {
            let replaced = old.get(i).map(|o| o.witness);
            parent = Arc::new(b.next_block(&parent, replaced, txs)?);
            made.push(Arc::clone(&parent));
        }
        b.pending.retain(|p| !used.contains(&TxId(p.txid)));
        let mut chain = self.write();
        let keep = chain.blocks.len() - old.len();
        chain.blocks.truncate(keep);
        chain.blocks.extend(made);
        Ok(chain.tip().number)
    }
}

impl Builder {
    /// The block after `parent` holding `txs`, by the witness whose turn it
    /// is, or the next one if that one made the block it replaces.
    fn next_block(
        &self,
        parent: &StoredBlock,
        replaced_witness: Option<usize>,
        mut txs: Vec<PendingTx>,
    ) -> Result<StoredBlock, TronNodeError> {
        // Balances move whatever the infos keep.
        let moves = super::balances::Moves::of(&txs);
        for p in &mut txs {
            internal::keep(self.saving, &mut p.info);
        }
        let number = parent.number + 1;
        let mut witness = (number as usize).wrapping_add(self.generation) % WITNESS_COUNT;
        if replaced_witness == Some(witness) {
            witness = (witness + 1) % WITNESS_COUNT;
        }
        let mut block = assemble(
            number,
            parent.blockid,
            parent.timestamp + BLOCK_INTERVAL_MS,
            witness,
            &self.witnesses[witness],
            txs,
        )?;
        block.moves = moves;
        Ok(block)
    }

    /// A generated transaction for fill blocks: 4 in 10 TRX transfers, 4
    /// TRC-20 transfers, 1 a reverted TRC-20 transfer, 1 a contract-made
    /// TRC-20 payment; each to a new address.
    fn fill_tx(&mut self, tip: &RefBlock, timestamp: i64) -> Result<PendingTx, TronNodeError> {
        if self.fill.is_none() {
            self.fill = Some(FillKit {
                senders: (0..FILL_SENDERS)
                    .map(|i| TronAccount::dev(2_000_000 + i))
                    .collect(),
                payer: TronContract::new("fill payer", contract_body("fill payer")),
                token: TronContract::new("fill token", contract_body("fill token")),
                payout_selector: selector(PAYOUT_SIGNATURE),
                counter: 0,
            });
        }
        let Some(kit) = self.fill.as_mut() else {
            return Err(TronNodeError::Internal("fill kit missing".to_owned()));
        };
        let n = kit.counter;
        kit.counter += 1;
        let from = &kit.senders[(n % u64::from(FILL_SENDERS)) as usize];
        let mut to = [0u8; 21];
        to[0] = ADDRESS_PREFIX;
        to[1..].copy_from_slice(&sha256(&n.to_be_bytes())[..20]);
        let token = if self.tokens.is_empty() {
            kit.token.body
        } else {
            self.tokens[(n / 10) as usize % self.tokens.len()].body
        };
        let amount = 1_000_000 + (n % 1_000) * 10_000;
        match n % 10 {
            0..=3 => transfer_tx(from, to, amount as i64, tip, timestamp),
            4..=7 => trc20_tx(token, from, to, u128::from(amount), true, tip, timestamp),
            8 => trc20_tx(token, from, to, u128::from(amount), false, tip, timestamp),
            _ => payout_tx(
                from,
                kit.payer.body,
                token,
                to,
                u128::from(amount),
                kit.payout_selector,
                n,
                tip,
                timestamp,
            ),
        }
    }
}

/// A block's id: sha256 of its serialized raw header, whose first 8 bytes
/// are replaced by the block number (big-endian). Also the plain hash, which
/// the witness signs.
pub(crate) fn block_id(raw: &pb::block_header::Raw) -> ([u8; 32], [u8; 32]) {
    let hash = sha256(&raw.encode_to_vec());
    let mut id = hash;
    id[..8].copy_from_slice(&(raw.number as u64).to_be_bytes());
    (id, hash)
}

/// Builds and signs block `number` holding `txs`.
fn assemble(
    number: u64,
    parent: [u8; 32],
    timestamp: i64,
    witness_index: usize,
    witness: &TronAccount,
    txs: Vec<PendingTx>,
) -> Result<StoredBlock, TronNodeError> {
    let mut leaves = Vec::with_capacity(txs.len());
    let mut exts = Vec::with_capacity(txs.len());
    let mut infos = Vec::with_capacity(txs.len());
    let mut txids = Vec::with_capacity(txs.len());
    for p in txs {
        leaves.push(sha256(&p.tx.encode_to_vec()));
        let mut info = p.info;
        info.block_number = number as i64;
        info.block_time_stamp = timestamp;
        infos.push(info);
        txids.push(p.txid);
        // What java-tron's block2Extention adds to each transaction.
        exts.push(pb::TransactionExtention {
            transaction: Some(p.tx),
            txid: p.txid.to_vec(),
            result: Some(pb::Return {
                result: true,
                code: pb::r#return::ResponseCode::Success as i32,
                message: Vec::new(),
            }),
            ..Default::default()
        });
    }
    let raw = pb::block_header::Raw {
        timestamp,
        tx_trie_root: merkle_root(leaves).to_vec(),
        parent_hash: parent.to_vec(),
        number: number as i64,
        witness_address: witness.body().to_vec(),
        version: BLOCK_VERSION,
        ..Default::default()
    };
    let (blockid, hash) = block_id(&raw);
    let witness_signature = witness.sign(&hash)?.to_vec();
    let ext = pb::BlockExtention {
        transactions: exts,
        block_header: Some(pb::BlockHeader {
            raw_data: Some(raw),
            witness_signature,
        }),
        blockid: blockid.to_vec(),
    };
    Ok(StoredBlock {
        number,
        blockid,
        timestamp,
        witness: witness_index,
        txids,
        ext: ext.encode_to_vec(),
        infos: pb::TransactionInfoList {
            transaction_info: infos,
        }
        .encode_to_vec(),
        moves: super::balances::Moves::default(),
    })
}

/// The transactions of a block, as they were before it was mined.
fn unmine(block: &StoredBlock) -> Result<Vec<PendingTx>, TronNodeError> {
    let corrupt = |e: prost::DecodeError| TronNodeError::Internal(format!("stored block: {e}"));
    let ext = block.extention().map_err(corrupt)?;
    let infos = block.info_list().map_err(corrupt)?;
    Ok(ext
        .transactions
        .into_iter()
        .zip(infos.transaction_info)
        .zip(&block.txids)
        .filter_map(|((t, mut info), txid)| {
            info.block_number = 0;
            info.block_time_stamp = 0;
            Some(PendingTx {
                txid: *txid,
                tx: t.transaction?,
                info,
            })
        })
        .collect())
}

/// java-tron's transaction Merkle root: leaves are sha256 of each whole
/// serialized transaction, a parent is sha256(left || right), an odd node
/// moves up as it is; 32 zero bytes for a block without transactions.
fn merkle_root(mut level: Vec<[u8; 32]>) -> [u8; 32] {
    if level.is_empty() {
        return [0u8; 32];
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| match pair {
                [left, right] => {
                    let mut both = [0u8; 64];
                    both[..32].copy_from_slice(left);
                    both[32..].copy_from_slice(right);
                    sha256(&both)
                }
                [single] => *single,
                _ => [0u8; 32],
            })
            .collect();
    }
    level[0]
}

/// An address no key controls, the same for the same name: `0x41` + the
/// first 20 bytes of keccak256 of the name.
fn contract_body(name: &str) -> [u8; 21] {
    let hash = keccak256(format!("paywatch-testkit contract {name}"));
    let mut body = [0u8; 21];
    body[0] = ADDRESS_PREFIX;
    body[1..].copy_from_slice(&hash[..20]);
    body
}

fn selector(signature: &str) -> [u8; 4] {
    let hash = keccak256(signature);
    [hash[0], hash[1], hash[2], hash[3]]
}

fn word_u128(v: u128) -> [u8; 32] {
    let mut word = [0u8; 32];
    word[16..].copy_from_slice(&v.to_be_bytes());
    word
}

/// An ABI address word: the 20 bytes after `0x41`, left-padded.
fn word_address(body: &[u8; 21]) -> [u8; 32] {
    let mut word = [0u8; 32];
    word[12..].copy_from_slice(&body[1..]);
    word
}

fn transfer_log(
    token: [u8; 21],
    from: [u8; 21],
    to: [u8; 21],
    amount: u128,
) -> pb::transaction_info::Log {
    pb::transaction_info::Log {
        // Logs name contracts by their 20 bytes, without 0x41.
        address: token[1..].to_vec(),
        topics: vec![
            TRANSFER_TOPIC.to_vec(),
            word_address(&from).to_vec(),
            word_address(&to).to_vec(),
        ],
        data: word_u128(amount).to_vec(),
    }
}

/// `raw_data` with one contract of `kind` whose parameter is `parameter`.
fn raw_tx(
    kind: ContractType,
    parameter: Vec<u8>,
    tip: &RefBlock,
    timestamp: i64,
    fee_limit: i64,
) -> pb::transaction::Raw {
    let mut contract = pb::transaction::Contract {
        r#type: kind as i32,
        ..Default::default()
    };
    // `parameter` is a `prost_types::Any`; testkit does not depend on
    // prost-types, so the Any is filled in place rather than named.
    let any = contract.parameter.get_or_insert_with(Default::default);
    any.type_url = format!("type.googleapis.com/protocol.{}", kind.as_str_name());
    any.value = parameter;
    pb::transaction::Raw {
        // TaPoS: bytes 6..8 of the reference block's number and bytes
        // 8..16 of its id.
        ref_block_bytes: tip.number.to_be_bytes()[6..8].to_vec(),
        ref_block_hash: tip.blockid[8..16].to_vec(),
        expiration: timestamp + EXPIRATION_MS,
        timestamp,
        contract: vec![contract],
        fee_limit,
        ..Default::default()
    }
}

/// Signs `raw` as `from`: the txid and the transaction with its outcome.
fn sign_tx(
    from: &TronAccount,
    raw: pb::transaction::Raw,
    outcome: ContractResult,
) -> Result<([u8; 32], pb::Transaction), TronNodeError> {
    let txid = sha256(&raw.encode_to_vec());
    let signature = from.sign(&txid)?;
    let tx = pb::Transaction {
        raw_data: Some(raw),
        signature: vec![signature.to_vec()],
        ret: vec![pb::transaction::Result {
            contract_ret: outcome as i32,
            ..Default::default()
        }],
    };
    Ok((txid, tx))
}

fn transfer_tx(
    from: &TronAccount,
    to: [u8; 21],
    sun: i64,
    tip: &RefBlock,
    timestamp: i64,
) -> Result<PendingTx, TronNodeError> {
    let parameter = pb::TransferContract {
        owner_address: from.body().to_vec(),
        to_address: to.to_vec(),
        amount: sun,
    }
    .encode_to_vec();
    let raw = raw_tx(ContractType::TransferContract, parameter, tip, timestamp, 0);
    let (txid, tx) = sign_tx(from, raw, ContractResult::Success)?;
    // A TRX transfer: no contract, no logs, bandwidth only.
    let info = pb::TransactionInfo {
        id: txid.to_vec(),
        contract_result: vec![Vec::new()],
        receipt: Some(pb::ResourceReceipt {
            net_usage: TRX_NET_USAGE,
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(PendingTx { txid, tx, info })
}

fn trigger_raw(
    from: &TronAccount,
    contract: [u8; 21],
    data: Vec<u8>,
    call_value: i64,
    tip: &RefBlock,
    timestamp: i64,
) -> pb::transaction::Raw {
    let parameter = pb::TriggerSmartContract {
        owner_address: from.body().to_vec(),
        contract_address: contract.to_vec(),
        data,
        call_value,
        ..Default::default()
    }
    .encode_to_vec();
    raw_tx(
        ContractType::TriggerSmartContract,
        parameter,
        tip,
        timestamp,
        FEE_LIMIT_SUN,
    )
}

/// The info of a call to `contract`: `Ok((logs, return data))` if it
/// succeeded, `Err(())` if it reverted.
fn trigger_info(
    txid: [u8; 32],
    contract: [u8; 21],
    outcome: Result<(Vec<pb::transaction_info::Log>, Vec<u8>), ()>,
) -> pb::TransactionInfo {
    let (energy, result, logs, returned, code, message) = match outcome {
        Ok((logs, returned)) => (
            TRANSFER_ENERGY,
            ContractResult::Success,
            logs,
            returned,
            pb::transaction_info::Code::Sucess,
            Vec::new(),
        ),
        Err(()) => (
            REVERT_ENERGY,
            ContractResult::Revert,
            Vec::new(),
            Vec::new(),
            pb::transaction_info::Code::Failed,
            REVERT_MESSAGE.to_vec(),
        ),
    };
    let energy_fee = energy * ENERGY_PRICE;
    pb::TransactionInfo {
        id: txid.to_vec(),
        fee: energy_fee + TRIGGER_NET_FEE,
        contract_result: vec![returned],
        contract_address: contract.to_vec(),
        receipt: Some(pb::ResourceReceipt {
            energy_fee,
            energy_usage_total: energy,
            net_fee: TRIGGER_NET_FEE,
            result: result as i32,
            ..Default::default()
        }),
        log: logs,
        result: code as i32,
        res_message: message,
        ..Default::default()
    }
}

/// `from` calls `transfer(to, amount)` on `token`; if `succeeds` the token
/// logs the transfer, else the call reverts and logs nothing.
fn trc20_tx(
    token: [u8; 21],
    from: &TronAccount,
    to: [u8; 21],
    amount: u128,
    succeeds: bool,
    tip: &RefBlock,
    timestamp: i64,
) -> Result<PendingTx, TronNodeError> {
    let mut data = Vec::with_capacity(68);
    data.extend_from_slice(&TRANSFER_SELECTOR);
    data.extend_from_slice(&word_address(&to));
    data.extend_from_slice(&word_u128(amount));
    let raw = trigger_raw(from, token, data, 0, tip, timestamp);
    let outcome = if succeeds {
        ContractResult::Success
    } else {
        ContractResult::Revert
    };
    let (txid, tx) = sign_tx(from, raw, outcome)?;
    let info = if succeeds {
        let log = transfer_log(token, from.body(), to, amount);
        trigger_info(txid, token, Ok((vec![log], word_u128(1).to_vec())))
    } else {
        trigger_info(txid, token, Err(()))
    };
    Ok(PendingTx { txid, tx, info })
}

/// `caller` calls `payout(order)` on `payer`, which pays `amount` of
/// `token` from its own balance to `to`: the log is the token's, from
/// `payer`; the calldata does not name `to`.
#[allow(clippy::too_many_arguments)]
fn payout_tx(
    caller: &TronAccount,
    payer: [u8; 21],
    token: [u8; 21],
    to: [u8; 21],
    amount: u128,
    selector: [u8; 4],
    order: u64,
    tip: &RefBlock,
    timestamp: i64,
) -> Result<PendingTx, TronNodeError> {
    let mut data = Vec::with_capacity(36);
    data.extend_from_slice(&selector);
    data.extend_from_slice(&sha256(&order.to_be_bytes()));
    let raw = trigger_raw(caller, payer, data, 0, tip, timestamp);
    let (txid, tx) = sign_tx(caller, raw, ContractResult::Success)?;
    let log = transfer_log(token, payer, to, amount);
    let info = trigger_info(txid, payer, Ok((vec![log], Vec::new())));
    Ok(PendingTx { txid, tx, info })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_topic_is_the_event_hash() {
        assert_eq!(
            keccak256("Transfer(address,address,uint256)").0,
            TRANSFER_TOPIC
        );
        assert_eq!(selector("transfer(address,uint256)"), TRANSFER_SELECTOR);
    }

    #[test]
    fn merkle_root_pairs_and_carries() {
        let a = sha256(b"a");
        let b = sha256(b"b");
        let c = sha256(b"c");
        assert_eq!(merkle_root(vec![]), [0u8; 32]);
        assert_eq!(merkle_root(vec![a]), a);
        let ab = sha256(&[a, b].concat());
        assert_eq!(merkle_root(vec![a, b]), ab);
        assert_eq!(merkle_root(vec![a, b, c]), sha256(&[ab, c].concat()));
    }
}

//! The chain behind [`SolanaNode`](super::SolanaNode): litesvm executes real
//! signed transactions; this records, per transaction, what a `getBlock`
//! answer needs as the client-types crate's `TransactionStatusMeta`, so the
//! crate's own `From` makes the wire form at request time.

use std::collections::BTreeMap;

use litesvm::LiteSVM;
use solana_address::Address;
use solana_address_lookup_table_interface::state::AddressLookupTable;
use solana_message::inner_instruction::InnerInstructionsList;
use solana_message::v0::LoadedAddresses;
use solana_message::VersionedMessage;
use solana_program_pack::Pack;
use solana_signature::Signature;
use solana_slot_hashes::SlotHashes;
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_error::TransactionError;
use solana_transaction_status_client_types::{
    InnerInstruction, InnerInstructions, TransactionStatusMeta, TransactionTokenBalance,
};
use spl_token_interface::state::{Account as TokenAccount, AccountState, Mint};

use super::programs::{TOKEN_2022_PROGRAM, TOKEN_PROGRAM};
use super::ui_token_amount;

/// A block's time is the wall clock's when it is sealed, as a validator's
/// vote timestamps are, so expiry and lateness can be tested against
/// blocks; never earlier than its parent's, as agave keeps it monotonic.
fn wall_clock_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A transaction included in a block (executed, maybe failed, fee charged).
#[derive(Clone, Debug)]
pub(crate) struct StoredTx {
    pub(crate) tx: VersionedTransaction,
    pub(crate) meta: TransactionStatusMeta,
}

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub(crate) slot: u64,
    pub(crate) parent_slot: u64,
    pub(crate) blockhash: String,
    pub(crate) previous_blockhash: String,
    pub(crate) block_time: i64,
    pub(crate) block_height: u64,
    pub(crate) txs: Vec<StoredTx>,
}

/// What the JSON-RPC server reads: blocks and commitment levels, with no
/// litesvm inside (the server only needs these, behind a mutex).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) blocks: BTreeMap<u64, Block>,
    pub(crate) processed_slot: u64,
    pub(crate) confirmed_slot: u64,
    pub(crate) finalized_slot: u64,
    /// The blockhash transactions sign against now (getLatestBlockhash).
    pub(crate) latest_blockhash: String,
    /// Slots below this were cleaned out of the node's ledger (no
    /// long-term storage): `getFirstAvailableBlock`.
    pub(crate) first_available: u64,
}

impl Ledger {
    /// Confirmed is `confirmed_lag` blocks behind the newest, finalized
    /// `finalized_lag` blocks behind confirmed. Finalized never goes back
    /// (a fork may not replace it), so a fork leaves it where it was.
    pub(crate) fn update_commitment(&mut self, confirmed_lag: usize, finalized_lag: usize) {
        let slots: Vec<u64> = self.blocks.keys().rev().copied().collect();
        let at = |lag: usize| slots.get(lag).or(slots.last()).copied().unwrap_or(0);
        self.processed_slot = at(0);
        self.finalized_slot = self
            .finalized_slot
            .max(at(confirmed_lag.saturating_add(finalized_lag)));
        self.confirmed_slot = at(confirmed_lag).max(self.finalized_slot);
    }

    pub(crate) fn block_height_at(&self, slot: u64) -> u64 {
        self.blocks
            .range(..=slot)
            .next_back()
            .map_or(0, |(_, b)| b.block_height)
    }
}

/// litesvm's state right after a block was sealed: a fork restarts from it.
#[derive(Clone)]
struct Snapshot {
    svm: LiteSVM,
    block_height: u64,
    blockhash: String,
    position: u64,
}

pub(crate) struct Chain {
    pub(crate) svm: LiteSVM,
    slot: u64,
    block_height: u64,
    last_blockhash: String,
    pending: Vec<StoredTx>,
    /// litesvm's blockhashes are a hash chain from genesis: the latest is
    /// the `position`-th. No position is used twice (see `rewind`), so no
    /// two blocks, on any branch, share a blockhash.
    position: u64,
    max_position: u64,
    /// By slot, for the blocks a fork may still replace (and the newest
    /// finalized one, which a fork restarts from).
    snapshots: BTreeMap<u64, Snapshot>,
}

impl Chain {
    /// A chain with litesvm's mainnet feature set, builtins and default SPL
    /// programs (token, token-2022, associated token, lookup tables), with
    /// signature and blockhash checks on, and an empty genesis block at slot 0.
    pub(crate) fn new(ledger: &mut Ledger) -> Self {
        let svm = LiteSVM::new();
        let last_blockhash = svm.latest_blockhash().to_string();
        let mut chain = Self {
            svm,
            slot: 0,
            block_height: 0,
            last_blockhash: last_blockhash.clone(),
            pending: Vec::new(),
            position: 0,
            max_position: 0,
            snapshots: BTreeMap::new(),
        };
        ledger.blocks.insert(
            0,
            Block {
                slot: 0,
                parent_slot: 0,
                blockhash: last_blockhash.clone(),
                previous_blockhash: last_blockhash.clone(),
                block_time: wall_clock_secs(),
                block_height: 0,
                txs: Vec::new(),
            },
        );
        ledger.latest_blockhash = last_blockhash;
        chain.snapshot();
        chain
    }

    fn snapshot(&mut self) {
        let snap = Snapshot {
            svm: self.svm.clone(),
            block_height: self.block_height,
            blockhash: self.last_blockhash.clone(),
            position: self.position,
        };
        self.snapshots.insert(self.slot, snap);
    }

    /// Account keys in the order RPC lists balances: static keys, then the
    /// lookup tables' writable, then readonly addresses.
    fn resolve(&self, tx: &VersionedTransaction) -> (Vec<Address>, LoadedAddresses) {
        let mut keys = tx.message.static_account_keys().to_vec();
        let mut loaded = LoadedAddresses::default();
        if let VersionedMessage::V0(m) = &tx.message {
            for lookup in &m.address_table_lookups {
                let Some(acc) = self.svm.get_account(&lookup.account_key) else {
                    continue;
                };
                let Ok(table) = AddressLookupTable::deserialize(&acc.data) else {
                    continue;
                };
                let pick = |idx: &[u8]| -> Vec<Address> {
                    idx.iter()
                        .filter_map(|&i| table.addresses.get(usize::from(i)).copied())
                        .collect()
                };
                loaded.writable.extend(pick(&lookup.writable_indexes));
                loaded.readonly.extend(pick(&lookup.readonly_indexes));
            }
        }
        keys.extend(
            loaded
                .writable
                .iter()
                .chain(loaded.readonly.iter())
                .copied(),
        );
        (keys, loaded)
    }

    fn balances(&self, keys: &[Address]) -> Vec<u64> {
        keys.iter()
            .map(|k| self.svm.get_balance(k).unwrap_or(0))
            .collect()
    }

    /// As agave: only when a token program is among the keys, one entry per
    /// initialized token account (the base 165-byte layout serves both
    /// spl-token and token-2022).
    fn token_balances(&self, keys: &[Address]) -> Vec<TransactionTokenBalance> {
        if !keys
            .iter()
            .any(|k| *k == TOKEN_PROGRAM || *k == TOKEN_2022_PROGRAM)
        {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let Some(acc) = self.svm.get_account(key) else {
                continue;
            };
            if acc.owner != TOKEN_PROGRAM && acc.owner != TOKEN_2022_PROGRAM {
                continue;
            }
            // Shorter is a mint; token-2022 marks an extended account with 2.
            if acc.data.len() < TokenAccount::LEN || (acc.data.len() > 165 && acc.data[165] != 2) {
                continue;
            }
            let Ok(ta) = TokenAccount::unpack_from_slice(&acc.data[..TokenAccount::LEN]) else {
                continue;
            };
            if ta.state == AccountState::Uninitialized {
                continue;
            }
            let decimals = self
                .svm
                .get_account(&ta.mint)
                .filter(|m| m.data.len() >= Mint::LEN)
                .and_then(|m| Mint::unpack_from_slice(&m.data[..Mint::LEN]).ok())
                .map_or(0, |m| m.decimals);
            out.push(TransactionTokenBalance {
                account_index: u8::try_from(i).unwrap_or(u8::MAX),
                mint: ta.mint.to_string(),
                ui_token_amount: ui_token_amount(ta.amount, decimals),
                owner: ta.owner.to_string(),
                program_id: acc.owner.to_string(),
            });
        }
        out
    }

    /// Executes a signed transaction. One that lands in a block (maybe
    /// failed, its fee charged) is queued for the next block; one a leader
    /// would reject (bad signature, unknown blockhash, duplicate) is `Err`.
    pub(crate) fn execute(
        &mut self,
        tx: VersionedTransaction,
    ) -> Result<(Signature, Option<TransactionError>), TransactionError> {
        let (keys, loaded_addresses) = self.resolve(&tx);
        let pre_balances = self.balances(&keys);
        let pre_token_balances = self.token_balances(&keys);
        let sig = tx.signatures.first().copied().unwrap_or_default();
        let seen_before = self.svm.get_transaction(&sig).is_some();

        let res = self.svm.send_transaction(tx.clone());
        // litesvm's history holds only transactions that would be in a block
        // (a duplicate fails with AlreadyProcessed, its first copy is there).
        if seen_before || self.svm.get_transaction(&sig).is_none() {
            return Err(res
                .err()
                .map_or(TransactionError::AccountNotFound, |f| f.err));
        }
        let (status, m) = match res {
            Ok(m) => (Ok(()), m),
            // litesvm has already taken the fee from the payer.
            Err(f) => (Err(f.err), f.meta),
        };
        let meta = TransactionStatusMeta {
            status: status.clone(),
            fee: m.fee,
            pre_balances,
            post_balances: self.balances(&keys),
            inner_instructions: Some(inner_instructions(m.inner_instructions)),
            log_messages: Some(m.logs),
            pre_token_balances: Some(pre_token_balances),
            post_token_balances: Some(self.token_balances(&keys)),
            rewards: Some(Vec::new()),
            loaded_addresses,
            return_data: (!m.return_data.data.is_empty()).then_some(m.return_data),
            compute_units_consumed: Some(m.compute_units_consumed),
            cost_units: None,
        };
        self.pending.push(StoredTx { tx, meta });
        Ok((sig, status.err()))
    }

    /// Seals the queued transactions into a block `1 + skip` slots after the
    /// last one (the slots between are skipped), then moves litesvm to a
    /// fresh blockhash, so later transactions sign against this block.
    pub(crate) fn seal(&mut self, ledger: &mut Ledger, skip: u64) -> u64 {
        let parent_slot = self.slot;
        self.slot = self.slot.saturating_add(1).saturating_add(skip);
        self.block_height += 1;
        self.svm.expire_blockhash();
        self.position += 1;
        self.max_position = self.max_position.max(self.position);
        self.svm.warp_to_slot(self.slot);
        let hash = self.svm.latest_blockhash();
        // As a bank does: programs that name a recent slot (a lookup
        // table's creation) find it in SlotHashes.
        let mut slot_hashes: SlotHashes = self.svm.get_sysvar();
        slot_hashes.add(self.slot, hash);
        self.svm.set_sysvar(&slot_hashes);
        let blockhash = hash.to_string();
        let parent_time = ledger.blocks.get(&parent_slot).map_or(0, |b| b.block_time);
        let block = Block {
            slot: self.slot,
            parent_slot,
            previous_blockhash: std::mem::replace(&mut self.last_blockhash, blockhash.clone()),
            blockhash: blockhash.clone(),
            block_time: wall_clock_secs().max(parent_time),
            block_height: self.block_height,
            txs: std::mem::take(&mut self.pending),
        };
        ledger.blocks.insert(self.slot, block);
        ledger.latest_blockhash = blockhash;
        self.snapshot();
        self.slot
    }

    /// Forgets snapshots a fork can no longer use (below finalized).
    pub(crate) fn prune(&mut self, finalized_slot: u64) {
        self.snapshots = self.snapshots.split_off(&finalized_slot);
    }

    /// Drops the newest `depth` blocks (and anything queued), puts litesvm
    /// back to the state after their parent, and returns the signatures of
    /// the dropped transactions. litesvm has no rollback, hence snapshots.
    pub(crate) fn rewind(
        &mut self,
        ledger: &mut Ledger,
        depth: usize,
    ) -> Result<Vec<Signature>, String> {
        let dropped: Vec<u64> = ledger.blocks.keys().rev().take(depth).copied().collect();
        let Some(&oldest) = dropped.last() else {
            return Err("fork depth must be at least 1".into());
        };
        if dropped.len() < depth || oldest <= ledger.finalized_slot {
            return Err(format!(
                "cannot replace {depth} blocks: slot {oldest} is at or below finalized slot {}",
                ledger.finalized_slot
            ));
        }
        let parent = ledger.blocks[&oldest].parent_slot;
        let snap = self
            .snapshots
            .get(&parent)
            .cloned()
            .ok_or_else(|| format!("no snapshot of slot {parent}"))?;
        let mut signatures: Vec<Signature> =
            self.pending.drain(..).map(|t| t.tx.signatures[0]).collect();
        for slot in &dropped {
            if let Some(b) = ledger.blocks.remove(slot) {
                signatures.extend(b.txs.iter().map(|t| t.tx.signatures[0]));
            }
            self.snapshots.remove(slot);
        }
        self.svm = snap.svm;
        // Step the blockhash chain past every position any branch has used,
        // so the new branch's blocks get hashes no block ever had.
        for _ in snap.position..self.max_position {
            self.svm.expire_blockhash();
        }
        self.position = self.max_position;
        self.slot = parent;
        self.block_height = snap.block_height;
        self.last_blockhash = snap.blockhash;
        ledger.latest_blockhash = self.svm.latest_blockhash().to_string();
        Ok(signatures)
    }
}

/// litesvm lists inner instructions per top-level instruction, empty ones
/// included; RPC lists only the non-empty groups, with their index.
fn inner_instructions(list: InnerInstructionsList) -> Vec<InnerInstructions> {
    list.into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(index, v)| InnerInstructions {
            index: u8::try_from(index).unwrap_or(u8::MAX),
            instructions: v
                .into_iter()
                .map(|ii| InnerInstruction {
                    instruction: ii.instruction,
                    stack_height: Some(u32::from(ii.stack_height)),
                })
                .collect(),
        })
        .collect()
}

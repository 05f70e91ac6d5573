//! One `getBlock` or `getTransaction` answer → the transfers it makes to
//! watched addresses. The watcher and `paywatch extract` both go through
//! [`scan_block`] / [`scan_transaction`], so an operator reading a recorded
//! answer sees exactly what the watcher saw.
//!
//! Solana has no transfer records to read: SOL and SPL token payments are
//! read from the balance changes the node reports in each transaction's
//! meta, which cover every program (System transfers, inner instructions,
//! closes of accounts) alike, and never from instruction data.

use std::collections::HashMap;

use paywatch_core::{Amount, Asset, AssetId, BlockRef, Network, Transfer, WatchRead};
use serde_json::Value;
use solana_transaction_status_client_types::option_serializer::OptionSerializer;
use solana_transaction_status_client_types::{
    EncodedTransaction, EncodedTransactionWithStatusMeta, TransactionBinaryEncoding,
    UiConfirmedBlock, UiMessage, UiTransactionStatusMeta, UiTransactionTokenBalance,
};

use crate::address::{encode_address, parse_address, KEY_LEN};

/// Token payments get `TOKEN_INDEX` plus the token account's index; SOL
/// payments keep the bare account index below it. A transfer is unique by
/// (txid, index), and one account can both gain lamports and be a token
/// account whose owner is watched.
pub const TOKEN_INDEX: u32 = 1 << 31;

/// An answer that does not hold together: nothing from it is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error("the block has no {field}")]
    MissingBlockField { field: &'static str },
    #[error("the block's {field} {value:?} is not a base58 32-byte hash")]
    BadBlockHash { field: &'static str, value: String },
    #[error(
        "the block has no transactions list; ask getBlock for transactionDetails \"full\" or \
         \"accounts\""
    )]
    NoTransactions,
    #[error("the answer cannot be read: {why}")]
    Malformed { why: String },
    #[error("transaction {position} has no signature")]
    NoSignature { position: usize },
    #[error("transaction {tx} has no meta, so neither its success nor its balances are known")]
    MissingMeta { tx: String },
    #[error("transaction {position} cannot be decoded from its binary encoding")]
    Undecodable { position: usize },
    #[error(
        "transaction {position} is {chars} characters of base58, more than any transaction takes"
    )]
    Oversized { position: usize, chars: usize },
    #[error(
        "transaction {tx} is given in parsed or accounts form without account keys; ask for \
         \"json\", \"base64\" or transactionDetails \"accounts\""
    )]
    NoAccountKeys { tx: String },
    #[error(
        "transaction {tx}: {which} has {found} entries for {accounts} accounts (were the \
         loaded addresses of a v0 transaction left out?)"
    )]
    BalanceCount {
        tx: String,
        which: &'static str,
        found: usize,
        accounts: usize,
    },
    #[error("transaction {tx}: account {index} {key:?} is not a Solana address")]
    BadAccountKey {
        tx: String,
        index: usize,
        key: String,
    },
    #[error("transaction {tx}: token balance for account {index}, of {accounts} accounts")]
    TokenAccountOutOfRange {
        tx: String,
        index: u8,
        accounts: usize,
    },
    #[error("transaction {tx}: token account {index} is listed twice in {which}")]
    DuplicateTokenBalance {
        tx: String,
        index: u8,
        which: &'static str,
    },
    #[error("transaction {tx}: token account {index}: {why}")]
    BadTokenAmount { tx: String, index: u8, why: String },
}

/// Reads a `getBlock` result (not its JSON-RPC envelope), naming a missing
/// `blockhash` or `previousBlockhash` rather than leaving it to serde.
/// A transaction that failed in a way this build does not know reads as
/// failed, as the watcher reads it.
pub fn parse_block(mut json: Value) -> Result<UiConfirmedBlock, ScanError> {
    for field in ["blockhash", "previousBlockhash", "parentSlot"] {
        if json.get(field).is_none_or(Value::is_null) {
            return Err(ScanError::MissingBlockField { field });
        }
    }
    crate::failure::make_result_readable(&mut json);
    serde_json::from_value(json).map_err(|e| ScanError::Malformed { why: e.to_string() })
}

/// The block's place in its chain: the slot (which `getBlock` answers do
/// not repeat, so the caller gives it), its hash and its parent's hash.
pub fn block_ref(slot: u64, block: &UiConfirmedBlock) -> Result<BlockRef, ScanError> {
    check_hash("blockhash", &block.blockhash)?;
    check_hash("previousBlockhash", &block.previous_blockhash)?;
    Ok(BlockRef {
        height: slot,
        hash: block.blockhash.clone(),
        parent: block.previous_blockhash.clone(),
    })
}

fn check_hash(field: &'static str, value: &str) -> Result<(), ScanError> {
    if value.is_empty() {
        return Err(ScanError::MissingBlockField { field });
    }
    parse_address(value)
        .map(drop)
        .map_err(|_| ScanError::BadBlockHash {
            field,
            value: value.to_owned(),
        })
}

/// Every payment in one `getBlock` answer (encoding `json`, `base64` or
/// `base58`; transactionDetails `full` or `accounts`;
/// maxSupportedTransactionVersion 0) to a watched address. The hashes are
/// checked as for [`block_ref`]; a block that fails any check gives nothing.
pub fn scan_block(
    block: &UiConfirmedBlock,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    check_hash("blockhash", &block.blockhash)?;
    check_hash("previousBlockhash", &block.previous_blockhash)?;
    let transactions = block
        .transactions
        .as_deref()
        .ok_or(ScanError::NoTransactions)?;
    let mut found = Vec::new();
    for (position, tx) in transactions.iter().enumerate() {
        found.extend(scan_in_block(position, tx, watch)?);
    }
    Ok(found)
}

/// [`scan_block`] for one transaction, as `getTransaction` gives it.
pub fn scan_transaction(
    tx: &EncodedTransactionWithStatusMeta,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    scan_in_block(0, tx, watch)
}

/// One account key as the answer gives it: text in json answers, bytes in
/// binary ones. Each is converted only when it matters (a balance rose).
#[derive(Debug, Clone, Copy)]
enum Key<'a> {
    Text(&'a str),
    Raw([u8; KEY_LEN]),
}

impl Key<'_> {
    fn raw(self) -> Option<[u8; KEY_LEN]> {
        match self {
            Key::Text(t) => parse_address(t).ok(),
            Key::Raw(r) => Some(r),
        }
    }

    fn text(self) -> String {
        match self {
            Key::Text(t) => t.to_owned(),
            Key::Raw(r) => encode_address(&r),
        }
    }
}

/// A transaction's first signature (its id) and all its account keys, in
/// the order balances are listed.
fn accounts<'a>(
    position: usize,
    tx: &'a EncodedTransactionWithStatusMeta,
    meta: Option<&'a UiTransactionStatusMeta>,
) -> Result<(String, Vec<Key<'a>>), ScanError> {
    let first = |signatures: &[String]| {
        signatures
            .first()
            .cloned()
            .ok_or(ScanError::NoSignature { position })
    };
    // Parsed messages and accounts lists already include the accounts
    // loaded from lookup tables; raw and binary messages hold only the
    // static keys, which the meta's loadedAddresses follow.
    let (txid, mut keys, complete): (String, Vec<Key<'a>>, bool) = match &tx.transaction {
        EncodedTransaction::Json(ui) => {
            let txid = first(&ui.signatures)?;
            match &ui.message {
                UiMessage::Raw(raw) => {
                    let keys = raw.account_keys.iter().map(|k| Key::Text(k)).collect();
                    (txid, keys, false)
                }
                UiMessage::Parsed(parsed) => {
                    let keys = parsed
                        .account_keys
                        .iter()
                        .map(|a| Key::Text(&a.pubkey))
                        .collect();
                    (txid, keys, true)
                }
            }
        }
        EncodedTransaction::Accounts(list) => {
            let txid = first(&list.signatures)?;
            let keys = list
                .account_keys
                .iter()
                .map(|a| Key::Text(&a.pubkey))
                .collect();
            (txid, keys, true)
        }
        EncodedTransaction::LegacyBinary(_) | EncodedTransaction::Binary(..) => {
            if let Some(chars) = base58_len(&tx.transaction).filter(|n| *n > MAX_BASE58_CHARS) {
                return Err(ScanError::Oversized { position, chars });
            }
            let decoded = tx
                .transaction
                .decode()
                .ok_or(ScanError::Undecodable { position })?;
            let txid = decoded
                .signatures
                .first()
                .map(ToString::to_string)
                .ok_or(ScanError::NoSignature { position })?;
            let keys = decoded
                .message
                .static_account_keys()
                .iter()
                .map(|k| Key::Raw(k.to_bytes()))
                .collect();
            (txid, keys, false)
        }
    };
    if !complete {
        if let Some(OptionSerializer::Some(loaded)) = meta.map(|m| &m.loaded_addresses) {
            keys.extend(loaded.writable.iter().map(|k| Key::Text(k)));
            keys.extend(loaded.readonly.iter().map(|k| Key::Text(k)));
        }
    }
    Ok((txid, keys))
}

/// Solana's packet holds 1,232 bytes; four times that leaves room for
/// larger transactions to come.
const MAX_TRANSACTION_BYTES: usize = 4 * 1_232;
/// The most base58 characters that many bytes take (log 256 / log 58 is
/// 1.3657…).
const MAX_BASE58_CHARS: usize = MAX_TRANSACTION_BYTES * 1_366 / 1_000 + 1;

/// The length of a base58 transaction. The decoder's time is quadratic in
/// it: a node answering a few hundred kilobytes would hold the scan for
/// minutes, so a length no transaction has is refused unread.
fn base58_len(tx: &EncodedTransaction) -> Option<usize> {
    match tx {
        EncodedTransaction::LegacyBinary(blob)
        | EncodedTransaction::Binary(blob, TransactionBinaryEncoding::Base58) => Some(blob.len()),
        _ => None,
    }
}

fn scan_in_block(
    position: usize,
    tx: &EncodedTransactionWithStatusMeta,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    let (txid, keys) = accounts(position, tx, tx.meta.as_ref())?;
    let meta = tx
        .meta
        .as_ref()
        .ok_or_else(|| ScanError::MissingMeta { tx: txid.clone() })?;
    for (which, balances) in [
        ("preBalances", &meta.pre_balances),
        ("postBalances", &meta.post_balances),
    ] {
        if balances.len() != keys.len() {
            return Err(ScanError::BalanceCount {
                tx: txid,
                which,
                found: balances.len(),
                accounts: keys.len(),
            });
        }
    }
    // A failed transaction still pays its fee and may advance a nonce, but
    // moves nothing else: its balance changes are no payment to anyone.
    if failed(meta) {
        return Ok(Vec::new());
    }
    let watched = |index: usize, key: Key<'_>| -> Result<bool, ScanError> {
        let raw = key.raw().ok_or_else(|| ScanError::BadAccountKey {
            tx: txid.clone(),
            index,
            key: key.text(),
        })?;
        Ok(watch.contains_key(&raw))
    };
    let mut found = Vec::new();
    // The fee payer is account 0; whoever paid the lamports is not known
    // from balances alone, and the payer is the best single answer.
    let fee_payer = keys.first().map(|k| k.text());
    for (index, ((key, pre), post)) in keys
        .iter()
        .zip(&meta.pre_balances)
        .zip(&meta.post_balances)
        .enumerate()
    {
        // Only a rise is a payment. The fee payer's balance falls by the fee
        // and what it sends; should a watched fee payer still rise net (it
        // was paid more than it spent, e.g. a swap), the net rise is what
        // arrived, and it is reported like any other.
        let Some(gain) = post.checked_sub(*pre).filter(|g| *g > 0) else {
            continue;
        };
        if !watched(index, *key)? {
            continue;
        }
        found.push(Transfer {
            network: Network::Solana,
            asset: AssetId::Known(Asset::Sol),
            txid: txid.clone(),
            index: u32::try_from(index).unwrap_or(u32::MAX),
            to: key.text(),
            from: fee_payer.clone(),
            amount: Amount(u128::from(gain)),
            success: true,
            matures_at: None,
        });
    }
    found.extend(token_transfers(&txid, keys.len(), meta, watch)?);
    Ok(found)
}

/// `err` says whether a transaction failed; the deprecated `status` repeats
/// it, and either saying so is enough: a failure is never read as success.
pub(crate) fn failed(meta: &UiTransactionStatusMeta) -> bool {
    meta.err.is_some() || meta.status.is_err()
}

/// A token account's balance as a meta lists it.
struct Holding<'a> {
    mint: &'a str,
    owner: Option<&'a str>,
    amount: u128,
}

fn holdings<'a>(
    txid: &str,
    which: &'static str,
    accounts: usize,
    balances: &'a OptionSerializer<Vec<UiTransactionTokenBalance>>,
) -> Result<HashMap<u8, Holding<'a>>, ScanError> {
    let mut out = HashMap::new();
    // A node that does not record token balances (old or trimmed) gives
    // none: no token payment can be seen, which is not an inconsistency.
    let OptionSerializer::Some(balances) = balances else {
        return Ok(out);
    };
    for b in balances {
        let index = b.account_index;
        if usize::from(index) >= accounts {
            return Err(ScanError::TokenAccountOutOfRange {
                tx: txid.to_owned(),
                index,
                accounts,
            });
        }
        // uiTokenAmount.amount is the exact integer in base units; the
        // float uiAmount beside it is never used.
        let amount = Amount::parse_base_units("uiTokenAmount.amount", &b.ui_token_amount.amount)
            .map_err(|e| ScanError::BadTokenAmount {
                tx: txid.to_owned(),
                index,
                why: e.to_string(),
            })?
            .0;
        let owner = match &b.owner {
            OptionSerializer::Some(o) => Some(o.as_str()),
            _ => None,
        };
        let holding = Holding {
            mint: &b.mint,
            owner,
            amount,
        };
        if out.insert(index, holding).is_some() {
            return Err(ScanError::DuplicateTokenBalance {
                tx: txid.to_owned(),
                index,
                which,
            });
        }
    }
    Ok(out)
}

/// SPL token payments: a token account whose balance of its mint rose and
/// whose owner is watched. Paid to the owner (the address a payer is given),
/// by mint; a token account not listed before the transaction held zero.
fn token_transfers(
    txid: &str,
    accounts: usize,
    meta: &UiTransactionStatusMeta,
    watch: &WatchRead<'_>,
) -> Result<Vec<Transfer>, ScanError> {
    let pre = holdings(txid, "preTokenBalances", accounts, &meta.pre_token_balances)?;
    let post = holdings(
        txid,
        "postTokenBalances",
        accounts,
        &meta.post_token_balances,
    )?;
    let mut indexes: Vec<&u8> = post.keys().collect();
    indexes.sort_unstable();
    let mut found = Vec::new();
    for &index in indexes {
        let after = &post[&index];
        // An account closed and opened again for another mint in the same
        // transaction held none of the new mint before: all of it arrived.
        // Refusing it would stall the whole block on a valid transaction.
        let before = match pre.get(&index) {
            Some(p) if p.mint == after.mint => p.amount,
            _ => 0,
        };
        let Some(gain) = after.amount.checked_sub(before).filter(|g| *g > 0) else {
            continue;
        };
        // An owner is absent only from answers of nodes too old to record
        // it; the payment cannot be attributed then.
        let Some(owner) = after.owner else { continue };
        let Some(raw) = parse_address(owner).ok() else {
            continue;
        };
        if !watch.contains_key(&raw) {
            continue;
        }
        found.push(Transfer {
            network: Network::Solana,
            asset: asset_of_mint(after.mint),
            txid: txid.to_owned(),
            index: TOKEN_INDEX | u32::from(index),
            to: owner.to_owned(),
            from: sender(after.mint, &pre, &post),
            amount: Amount(gain),
            success: true,
            matures_at: None,
        });
    }
    Ok(found)
}

/// No method on Solana is a token: a mint is another method's asset when
/// it is that asset's issuer's (real USDT or USDC sent by mistake, for a
/// person), else a token recorded by its mint that moves nothing.
fn asset_of_mint(mint: &str) -> AssetId {
    paywatch_core::recognised_tokens(Network::Solana)
        .iter()
        .find(|(_, m)| *m == mint)
        .map_or_else(
            || AssetId::Token {
                contract: mint.to_owned(),
            },
            |(asset, _)| AssetId::Known(*asset),
        )
}

/// The owner of the one token account of `mint` whose balance fell, when
/// there is exactly one: the sender of a plain transfer. `None` when it is
/// ambiguous (a swap, a batch) rather than a guess.
fn sender(
    mint: &str,
    pre: &HashMap<u8, Holding<'_>>,
    post: &HashMap<u8, Holding<'_>>,
) -> Option<String> {
    let mut fell = pre.iter().filter(|(index, before)| {
        before.mint == mint && post.get(index).map_or(0, |after| after.amount) < before.amount
    });
    let (_, only) = fell.next()?;
    if fell.next().is_some() {
        return None;
    }
    only.owner.map(str::to_owned)
}

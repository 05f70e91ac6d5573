//! Internal transactions: what contract code did with TRX and TRC-10
//! tokens, as java-tron records it (`Program.callToAddress`, `createContract`,
//! `suicide` and the featured opcodes) and keeps it in an info only as the
//! node's `vm.saveInternalTx` / `vm.saveFeaturedInternalTx` settings say.

use tron_grpc as pb;

use super::keys::{sha256, tron_body};
use super::TronNodeError;

/// Which internal transactions the node keeps in the infos of the blocks
/// it makes. Like java-tron, it decides when the transaction is executed
/// (mined here): an info once made keeps what it had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InternalTxSaving {
    /// `vm.saveInternalTx = false`, java-tron's default: none, so a TRX
    /// payment made by a contract leaves no trace in the answers.
    #[default]
    Off,
    /// `vm.saveInternalTx = true`: the `call`, `create` and `suicide` ones.
    On,
    /// `vm.saveInternalTx = true` and `vm.saveFeaturedInternalTx = true`:
    /// the featured ones too (`freezeBalanceV2`, `delegateResource`, …),
    /// in the order the contract made them.
    WithFeatured,
}

/// The notes a node without `vm.saveFeaturedInternalTx` keeps.
const PLAIN_NOTES: [&str; 3] = ["call", "create", "suicide"];

/// An internal transaction a contract call makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTx {
    /// What made it: `call` (a call, with value or not), `create`,
    /// `suicide` (a selfdestruct paying its balance to `to`), or a featured
    /// opcode's name (`freezeBalanceV2`, `delegateResource`, …), which moves
    /// nothing to `to`'s balance.
    pub note: String,
    /// The contract whose code made it (base58check).
    pub from: String,
    /// The callee, new contract, heir or resource receiver (base58check).
    pub to: String,
    /// TRX carried, in sun; 0 for none.
    pub sun: i64,
    /// TRC-10 tokens carried: (token id, amount).
    pub tokens: Vec<(String, i64)>,
    /// Its call reverted and the contract went on: java-tron keeps it,
    /// marked rejected. Every one of a reverted transaction is.
    pub rejected: bool,
}

impl InternalTx {
    /// `from` sends `sun` TRX to `to` (Solidity's `transfer`, `send`, or a
    /// call with value).
    pub fn call(from: &str, to: &str, sun: i64) -> InternalTx {
        InternalTx {
            note: "call".to_owned(),
            from: from.to_owned(),
            to: to.to_owned(),
            sun,
            tokens: Vec::new(),
            rejected: false,
        }
    }
}

/// The protobuf of `internal`, made by transaction `txid`. The TRX value
/// comes first with no token id (0 included), then one entry per token, as
/// java-tron's `buildInternalTransaction` writes them.
pub(crate) fn to_proto(
    txid: &[u8; 32],
    internal: &[InternalTx],
    reverted: bool,
) -> Result<Vec<pb::InternalTransaction>, TronNodeError> {
    internal
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let mut seed = txid.to_vec();
            seed.extend_from_slice(&(i as u64).to_be_bytes());
            let mut values = vec![pb::internal_transaction::CallValueInfo {
                call_value: it.sun,
                token_id: String::new(),
            }];
            values.extend(it.tokens.iter().map(|(id, amount)| {
                pb::internal_transaction::CallValueInfo {
                    call_value: *amount,
                    token_id: id.clone(),
                }
            }));
            Ok(pb::InternalTransaction {
                hash: sha256(&seed).to_vec(),
                caller_address: tron_body(&it.from)?.to_vec(),
                transfer_to_address: tron_body(&it.to)?.to_vec(),
                call_value_info: values,
                note: it.note.as_bytes().to_vec(),
                // A reverted transaction rejects every internal one.
                rejected: it.rejected || reverted,
                extra: String::new(),
            })
        })
        .collect()
}

/// What a node with `saving` keeps of an info's internal transactions.
pub(crate) fn keep(saving: InternalTxSaving, info: &mut pb::TransactionInfo) {
    match saving {
        InternalTxSaving::Off => info.internal_transactions.clear(),
        InternalTxSaving::On => info
            .internal_transactions
            .retain(|it| PLAIN_NOTES.iter().any(|n| n.as_bytes() == it.note)),
        InternalTxSaving::WithFeatured => {}
    }
}

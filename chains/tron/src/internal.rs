//! TRX sent by contracts: the internal transactions java-tron writes into
//! a transaction's info when the node runs with `vm.saveInternalTx = true`
//! (multisend and payout contracts, dice games, DEX routers paying out TRX).
//! Without it the list is empty and such payments are not visible here.

use crate::address::body_from_proto;
use crate::proto::TransactionInfo;

/// The notes of the internal transactions that move TRX to
/// `transferTo_address`: a call with value, a contract created with an
/// endowment, a selfdestruct's balance going to its heir. These are all a
/// node keeps without `vm.saveFeaturedInternalTx`; the featured ones it
/// adds (freezeBalanceV2, delegateResource, voteWitness, …) move nothing to
/// their `transferTo_address`'s balance and are skipped, so they shift no
/// position either.
const MOVING_NOTES: [&[u8]; 3] = [b"call", b"create", b"suicide"];

/// TRX one internal transaction carries to someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InternalTrx {
    /// Among the transaction's TRX-carrying internal transactions, in the
    /// node's order; the same on every node (see [`internal_trx`]).
    pub(crate) position: usize,
    /// The internal transaction's own place in the list, for errors.
    pub(crate) listed_at: usize,
    pub(crate) from: Option<[u8; 20]>,
    pub(crate) to: Option<[u8; 20]>,
    /// Sun; `Err` with the reason when the node's values do not add up.
    pub(crate) amount: Result<u128, String>,
    /// The call reverted (or the whole transaction did): nothing moved.
    pub(crate) rejected: bool,
}

/// Every internal transaction of `info` that carries TRX to another
/// address, numbered by [`InternalTrx::position`].
///
/// Counted are only those with a moving note, a TRX value (callValueInfo
/// entries without a token id; TRC-10 entries name theirs) other than zero,
/// and a recipient other than the caller (a delegatecall's value stays in
/// the contract; a selfdestruct to itself burns). Rejected ones count, so
/// a rejection never renumbers the rest. What is counted depends only on
/// what every java-tron node writes alike, whatever its featured setting.
pub(crate) fn internal_trx(info: &TransactionInfo) -> Vec<InternalTrx> {
    let mut found = Vec::new();
    for (listed_at, it) in info.internal_transactions.iter().enumerate() {
        if !MOVING_NOTES.contains(&it.note.as_slice()) {
            continue;
        }
        let trx: Vec<i64> = it
            .call_value_info
            .iter()
            .filter(|v| v.token_id.is_empty())
            .map(|v| v.call_value)
            .collect();
        // Only a value other than zero moves money.
        if trx.iter().all(|v| *v == 0) {
            continue;
        }
        let amount = trx.iter().try_fold(0u128, |sum, v| {
            let v = u128::try_from(*v).map_err(|_| format!("carries a negative value, {v} sun"))?;
            sum.checked_add(v)
                .ok_or_else(|| "carries more sun than fits".to_owned())
        });
        let from = address(&it.caller_address);
        let to = address(&it.transfer_to_address);
        if from.is_some() && from == to {
            continue;
        }
        found.push(InternalTrx {
            position: found.len(),
            listed_at,
            from,
            to,
            amount,
            rejected: it.rejected,
        });
    }
    found
}

/// java-tron writes 21 bytes (0x41 and the body); a bare 20-byte body is
/// read too, as logs name addresses so.
fn address(raw: &[u8]) -> Option<[u8; 20]> {
    body_from_proto(raw).or_else(|| raw.try_into().ok())
}

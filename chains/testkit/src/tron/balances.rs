//! Accounts as `WalletSolidity/GetAccount` answers them: TRX balances and
//! the mark a signed transaction leaves (`latest_opration_time`), summed
//! from the blocks. Each block keeps what it moved, internal transactions
//! included, before its infos drop them (`vm.saveInternalTx` off): the
//! balance sees a contract's TRX whether the infos tell of it or not, as a
//! real node's does. Balances start at zero; a sender's own funding is not
//! modelled (its balance never goes below zero).

use pb::transaction::contract::ContractType;
use prost::Message;
use tron_grpc as pb;

use super::chain::PendingTx;

/// What one block did to accounts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Moves {
    /// (receiver, sun), successful transfers only.
    credits: Vec<([u8; 21], i64)>,
    /// (sender, sun).
    debits: Vec<([u8; 21], i64)>,
    /// The accounts that signed a transaction in it.
    owners: Vec<[u8; 21]>,
}

fn body(bytes: &[u8]) -> Option<[u8; 21]> {
    bytes.try_into().ok()
}

impl Moves {
    /// Read from the block's transactions before `keep` empties their infos.
    pub(crate) fn of(txs: &[PendingTx]) -> Moves {
        let mut m = Moves::default();
        for p in txs {
            let Some(contract) = p.tx.raw_data.as_ref().and_then(|r| r.contract.first()) else {
                continue;
            };
            let value = contract
                .parameter
                .as_ref()
                .map_or(&[][..], |a| a.value.as_slice());
            let succeeded = p.tx.ret.first().is_none_or(|r| r.contract_ret <= 1);
            match ContractType::try_from(contract.r#type) {
                Ok(ContractType::TransferContract) => {
                    if let Ok(t) = pb::TransferContract::decode(value) {
                        if let (Some(from), Some(to)) =
                            (body(&t.owner_address), body(&t.to_address))
                        {
                            m.owners.push(from);
                            m.debits.push((from, t.amount));
                            m.credits.push((to, t.amount));
                        }
                    }
                }
                Ok(ContractType::TriggerSmartContract) => {
                    if let Ok(t) = pb::TriggerSmartContract::decode(value) {
                        if let Some(from) = body(&t.owner_address) {
                            m.owners.push(from);
                            if let (true, Some(to)) = (succeeded, body(&t.contract_address)) {
                                m.debits.push((from, t.call_value));
                                m.credits.push((to, t.call_value));
                            }
                        }
                    }
                }
                _ => {}
            }
            for it in &p.info.internal_transactions {
                let sun = it
                    .call_value_info
                    .first()
                    .filter(|v| v.token_id.is_empty())
                    .map_or(0, |v| v.call_value);
                if it.rejected || sun == 0 {
                    continue;
                }
                if let (Some(from), Some(to)) =
                    (body(&it.caller_address), body(&it.transfer_to_address))
                {
                    m.debits.push((from, sun));
                    m.credits.push((to, sun));
                }
            }
        }
        m
    }
}

/// `address`'s account as of the blocks given (with their timestamps).
pub(crate) fn account<'a>(
    address: [u8; 21],
    blocks: impl Iterator<Item = (&'a Moves, i64)>,
) -> pb::Account {
    let mut balance: i128 = 0;
    let mut latest_operation = 0;
    let mut exists = false;
    for (m, timestamp) in blocks {
        for (to, sun) in &m.credits {
            if *to == address {
                balance += i128::from(*sun);
                exists = true;
            }
        }
        for (from, sun) in &m.debits {
            if *from == address {
                balance -= i128::from(*sun);
            }
        }
        if m.owners.contains(&address) {
            latest_operation = timestamp;
            exists = true;
        }
    }
    if !exists {
        // java-tron answers an account it does not know as an empty one.
        return pb::Account::default();
    }
    pb::Account {
        address: address.to_vec(),
        balance: i64::try_from(balance.max(0)).unwrap_or(i64::MAX),
        latest_opration_time: latest_operation,
        ..Default::default()
    }
}

//! Balances for the backstop: without traces, ETH a contract sends is in
//! no block paywatch reads, yet it is in the address's balance. One batched
//! request asks `eth_getBalance` and `eth_getTransactionCount` of each
//! address at a final block, so the watcher can compare them with the money
//! it recorded.

use alloy_primitives::{U256, U64};
use paywatch_core::{NativeBalance, SourceError};

use crate::address::parse_address;
use crate::rpc::Rpc;

/// Whether the backstop runs, given traces and what became of them: without
/// traces always; with traces only once a block's traces were given up on
/// (`eth_traces_unavailable`), and not while others are still asked for,
/// since ETH in those is recorded once they come.
pub(crate) fn backstop_needed(traces: bool, waiting: u64, given_up: u64) -> bool {
    !traces || (given_up > 0 && waiting == 0)
}

/// The balance and sent mark of each of `addresses` at block `at_height`.
pub(crate) async fn native_balances(
    rpc: &Rpc,
    addresses: &[String],
    at_height: u64,
) -> Result<Vec<NativeBalance>, SourceError> {
    let transient = |call: &str, e: crate::rpc::CallError| {
        SourceError::Transient(format!("{call} at {}: {e}", rpc.host()))
    };
    let block = U64::from(at_height);
    let mut batch = rpc.new_batch();
    let mut waiters = Vec::with_capacity(addresses.len());
    for a in addresses {
        let address = parse_address(a).map_err(|e| {
            SourceError::Fatal(format!(
                "balance backstop: '{a}' is no Ethereum address: {e}"
            ))
        })?;
        let balance = batch
            .add::<_, U256>("eth_getBalance", &(address, block))
            .map_err(|e| transient("eth_getBalance", e))?;
        let nonce = batch
            .add::<_, U64>("eth_getTransactionCount", &(address, block))
            .map_err(|e| transient("eth_getTransactionCount", e))?;
        waiters.push((balance, nonce));
    }
    if waiters.is_empty() {
        return Ok(Vec::new());
    }
    batch.send().await.map_err(|e| transient("batch", e))?;
    let mut out = Vec::with_capacity(waiters.len());
    for (a, (balance, nonce)) in addresses.iter().zip(waiters) {
        let balance = balance
            .await
            .map_err(|e| transient("eth_getBalance", crate::rpc::classify_error(e)))?;
        let nonce = nonce
            .await
            .map_err(|e| transient("eth_getTransactionCount", crate::rpc::classify_error(e)))?;
        let balance = u128::try_from(balance).map_err(|_| {
            SourceError::Transient(format!(
                "eth_getBalance at {}: {a} holds {balance} wei, beyond what paywatch counts",
                rpc.host()
            ))
        })?;
        out.push(NativeBalance {
            balance,
            // EIP-161: a contract's nonce starts at 1, so a delegated or
            // deployed account also counts as one that may have spent.
            has_sent: nonce > U64::ZERO,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traced_sources_need_the_backstop_only_once_traces_were_given_up() {
        assert!(backstop_needed(false, 0, 0));
        assert!(backstop_needed(false, 3, 0));
        assert!(!backstop_needed(true, 0, 0));
        assert!(!backstop_needed(true, 1, 1));
        assert!(backstop_needed(true, 0, 1));
    }
}

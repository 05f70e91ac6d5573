//! Balances for the backstop. A node with `vm.saveInternalTx` off (java-tron's
//! default) keeps no trace of TRX a contract sends, yet the TRX is in the
//! receiver's balance. java-tron has no balance by height: the solidity
//! service's `GetAccount` answers the account as of the latest solidified
//! block, at or above any final height paywatch has read.
//!
//! "Has sent" is any mark a transaction the account signed leaves: the
//! bandwidth and energy processors set `latest_opration_time` (and the
//! consume times) whenever the owner's own or free bandwidth, or its
//! energy, pays. A send paid wholly by burning TRX, with the day's free
//! bandwidth spent, leaves no mark; its balance only drops, which hides a
//! difference and never makes one up.

use paywatch_core::{NativeBalance, SourceError};
use tokio::task::JoinSet;
use tron_grpc::wallet_solidity_client::WalletSolidityClient;
use tron_grpc::Account;

use crate::address::parse_address;

/// `GetAccount` calls in flight at once.
const IN_FLIGHT: usize = 4;

/// What a `GetAccount` answer says for the backstop.
pub(crate) fn reading(account: &Account) -> Result<NativeBalance, String> {
    let balance = u128::try_from(account.balance)
        .map_err(|_| format!("a negative balance ({})", account.balance))?;
    let energy_used = account
        .account_resource
        .as_ref()
        .is_some_and(|r| r.latest_consume_time_for_energy > 0);
    Ok(NativeBalance {
        balance,
        has_sent: account.latest_opration_time > 0
            || account.latest_consume_time > 0
            || account.latest_consume_free_time > 0
            || energy_used,
    })
}

/// Each of `addresses`' balance and sent mark, in order, from the solidity
/// service. `transient` words a failed call the source's way.
pub(crate) async fn native_balances<C>(
    client: WalletSolidityClient<C>,
    addresses: &[String],
    transient: impl Fn(tonic::Status) -> SourceError,
) -> Result<Vec<NativeBalance>, SourceError>
where
    C: tonic::client::GrpcService<tonic::body::BoxBody> + Clone + Send + 'static,
    C::Error: Into<tonic::codegen::StdError>,
    C::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <C::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
    C::Future: Send,
{
    let mut bodies = Vec::with_capacity(addresses.len());
    for a in addresses {
        let body = parse_address(a).map_err(|e| {
            SourceError::Fatal(format!("balance backstop: '{a}' is no Tron address: {e}"))
        })?;
        let mut full = vec![0x41];
        full.extend_from_slice(&body);
        bodies.push(full);
    }
    let mut out = vec![None; addresses.len()];
    let mut next = 0;
    let mut calls = JoinSet::new();
    while next < bodies.len() || !calls.is_empty() {
        while next < bodies.len() && calls.len() < IN_FLIGHT {
            let mut client = client.clone();
            let address = bodies[next].clone();
            let i = next;
            calls.spawn(async move {
                let answer = client
                    .get_account(Account {
                        address,
                        ..Default::default()
                    })
                    .await;
                (i, answer)
            });
            next += 1;
        }
        let Some(done) = calls.join_next().await else {
            break;
        };
        let (i, answer) =
            done.map_err(|e| SourceError::Transient(format!("GetAccount task: {e}")))?;
        let account = answer.map_err(&transient)?.into_inner();
        let read = reading(&account).map_err(|why| {
            SourceError::Transient(format!("GetAccount of {}: {why}", addresses[i]))
        })?;
        out[i] = Some(read);
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| SourceError::Transient("GetAccount: an answer is missing".into())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_that_signed_anything_has_sent() {
        let fresh = Account {
            balance: 98_500_000,
            create_time: 1_700_000_000_000,
            ..Default::default()
        };
        assert_eq!(
            reading(&fresh),
            Ok(NativeBalance {
                balance: 98_500_000,
                has_sent: false
            })
        );
        let swept = Account {
            latest_opration_time: 1_700_000_003_000,
            latest_consume_free_time: 566_667,
            ..fresh.clone()
        };
        assert!(reading(&swept).unwrap().has_sent);
        let energy = Account {
            account_resource: Some(tron_grpc::account::AccountResource {
                latest_consume_time_for_energy: 566_668,
                ..Default::default()
            }),
            ..fresh.clone()
        };
        assert!(reading(&energy).unwrap().has_sent);
        // An account the node does not know is empty, not an error.
        assert_eq!(reading(&Account::default()).unwrap().balance, 0);
    }
}

//! The gRPC services: java-tron's `Wallet` (full node) and `WalletSolidity`
//! (solidified state), through the tonic servers generated from Tron's
//! protos. The rpcs a watcher needs answer from the chain; every other rpc
//! answers `UNIMPLEMENTED`.
//!
//! Like java-tron, a block or transaction that does not exist (or is not
//! solidified yet, on `WalletSolidity`) is an empty message, not an error:
//! a `BlockExtention` without a header, an empty info list, a `Transaction`
//! without `raw_data`.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use tron_grpc as pb;
use tron_grpc::wallet_server::Wallet;
use tron_grpc::wallet_solidity_server::WalletSolidity;

use super::chain::{block_id, Chain, Shared, StoredBlock, BLOCK_LIMIT};
use super::keys::sha256;
use super::Fault;

/// Which state an rpc answers from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// The full node: everything up to the tip.
    Head,
    /// The solidity API: up to the solidified block.
    Solidified,
}

/// `Wallet`, served on [`TronNode::url`](super::TronNode::url).
#[derive(Debug, Clone)]
pub(crate) struct WalletApi {
    pub shared: Arc<Shared>,
}

/// `WalletSolidity`, served on
/// [`TronNode::solidity_url`](super::TronNode::solidity_url).
#[derive(Debug, Clone)]
pub(crate) struct SolidityApi {
    pub shared: Arc<Shared>,
}

/// Implements a generated service trait: the rpcs given as methods, and the
/// ones listed under `unimplemented` as `UNIMPLEMENTED` answers. The trait
/// has no default methods, and `async_trait` must see every method, so the
/// whole impl is made here.
macro_rules! grpc_service {
    (
        impl $service:ident for $api:ty {
            $($method:tt)*
        }
        unimplemented {
            $($name:ident($req:ty) -> $resp:ty;)*
        }
    ) => {
        #[tonic::async_trait]
        impl $service for $api {
            $($method)*

            $(
                async fn $name(
                    &self,
                    _request: Request<$req>,
                ) -> Result<Response<$resp>, Status> {
                    Err(Status::unimplemented(concat!(
                        "the paywatch-testkit Tron node does not serve ",
                        stringify!($name)
                    )))
                }
            )*
        }
    };
}

grpc_service! {
    impl Wallet for WalletApi {
        async fn get_account(
            &self,
            request: Request<pb::Account>,
        ) -> Result<Response<pb::Account>, Status> {
            counted(&self.shared, "Wallet/GetAccount", account(&self.shared, View::Head, &request.into_inner().address).await)
        }

        async fn get_now_block2(
            &self,
            _request: Request<pb::EmptyMessage>,
        ) -> Result<Response<pb::BlockExtention>, Status> {
            counted(&self.shared, "Wallet/GetNowBlock2", now_block(&self.shared, View::Head).await)
        }

        async fn get_block_by_num2(
            &self,
            request: Request<pb::NumberMessage>,
        ) -> Result<Response<pb::BlockExtention>, Status> {
            counted(&self.shared, "Wallet/GetBlockByNum2", block_by_num(&self.shared, View::Head, request.into_inner().num).await)
        }

        async fn get_block_by_limit_next2(
            &self,
            request: Request<pb::BlockLimit>,
        ) -> Result<Response<pb::BlockListExtention>, Status> {
            counted(&self.shared, "Wallet/GetBlockByLimitNext2", block_range(&self.shared, request.into_inner()).await)
        }

        async fn get_transaction_info_by_block_num(
            &self,
            request: Request<pb::NumberMessage>,
        ) -> Result<Response<pb::TransactionInfoList>, Status> {
            counted(&self.shared, "Wallet/GetTransactionInfoByBlockNum", infos_by_num(&self.shared, View::Head, request.into_inner().num).await)
        }

        async fn get_transaction_by_id(
            &self,
            request: Request<pb::BytesMessage>,
        ) -> Result<Response<pb::Transaction>, Status> {
            counted(&self.shared, "Wallet/GetTransactionById", tx_by_id(&self.shared, View::Head, &request.into_inner().value).await)
        }

        async fn get_transaction_info_by_id(
            &self,
            request: Request<pb::BytesMessage>,
        ) -> Result<Response<pb::TransactionInfo>, Status> {
            counted(&self.shared, "Wallet/GetTransactionInfoById", info_by_id(&self.shared, View::Head, &request.into_inner().value).await)
        }
    }
    unimplemented {
            get_account_by_id(pb::Account) -> pb::Account;
            get_account_balance(pb::AccountBalanceRequest) -> pb::AccountBalanceResponse;
            get_block_balance_trace(pb::block_balance_trace::BlockIdentifier) -> pb::BlockBalanceTrace;
            create_transaction(pb::TransferContract) -> pb::Transaction;
            create_transaction2(pb::TransferContract) -> pb::TransactionExtention;
            broadcast_transaction(pb::Transaction) -> pb::Return;
            update_account(pb::AccountUpdateContract) -> pb::Transaction;
            set_account_id(pb::SetAccountIdContract) -> pb::Transaction;
            update_account2(pb::AccountUpdateContract) -> pb::TransactionExtention;
            vote_witness_account(pb::VoteWitnessContract) -> pb::Transaction;
            update_setting(pb::UpdateSettingContract) -> pb::TransactionExtention;
            update_energy_limit(pb::UpdateEnergyLimitContract) -> pb::TransactionExtention;
            vote_witness_account2(pb::VoteWitnessContract) -> pb::TransactionExtention;
            create_asset_issue(pb::AssetIssueContract) -> pb::Transaction;
            create_asset_issue2(pb::AssetIssueContract) -> pb::TransactionExtention;
            update_witness(pb::WitnessUpdateContract) -> pb::Transaction;
            update_witness2(pb::WitnessUpdateContract) -> pb::TransactionExtention;
            create_account(pb::AccountCreateContract) -> pb::Transaction;
            create_account2(pb::AccountCreateContract) -> pb::TransactionExtention;
            create_witness(pb::WitnessCreateContract) -> pb::Transaction;
            create_witness2(pb::WitnessCreateContract) -> pb::TransactionExtention;
            transfer_asset(pb::TransferAssetContract) -> pb::Transaction;
            transfer_asset2(pb::TransferAssetContract) -> pb::TransactionExtention;
            participate_asset_issue(pb::ParticipateAssetIssueContract) -> pb::Transaction;
            participate_asset_issue2(pb::ParticipateAssetIssueContract) -> pb::TransactionExtention;
            freeze_balance(pb::FreezeBalanceContract) -> pb::Transaction;
            freeze_balance2(pb::FreezeBalanceContract) -> pb::TransactionExtention;
            freeze_balance_v2(pb::FreezeBalanceV2Contract) -> pb::TransactionExtention;
            unfreeze_balance(pb::UnfreezeBalanceContract) -> pb::Transaction;
            unfreeze_balance2(pb::UnfreezeBalanceContract) -> pb::TransactionExtention;
            unfreeze_balance_v2(pb::UnfreezeBalanceV2Contract) -> pb::TransactionExtention;
            unfreeze_asset(pb::UnfreezeAssetContract) -> pb::Transaction;
            unfreeze_asset2(pb::UnfreezeAssetContract) -> pb::TransactionExtention;
            withdraw_balance(pb::WithdrawBalanceContract) -> pb::Transaction;
            withdraw_balance2(pb::WithdrawBalanceContract) -> pb::TransactionExtention;
            withdraw_expire_unfreeze(pb::WithdrawExpireUnfreezeContract) -> pb::TransactionExtention;
            delegate_resource(pb::DelegateResourceContract) -> pb::TransactionExtention;
            un_delegate_resource(pb::UnDelegateResourceContract) -> pb::TransactionExtention;
            cancel_all_unfreeze_v2(pb::CancelAllUnfreezeV2Contract) -> pb::TransactionExtention;
            update_asset(pb::UpdateAssetContract) -> pb::Transaction;
            update_asset2(pb::UpdateAssetContract) -> pb::TransactionExtention;
            proposal_create(pb::ProposalCreateContract) -> pb::TransactionExtention;
            proposal_approve(pb::ProposalApproveContract) -> pb::TransactionExtention;
            proposal_delete(pb::ProposalDeleteContract) -> pb::TransactionExtention;
            buy_storage(pb::BuyStorageContract) -> pb::TransactionExtention;
            buy_storage_bytes(pb::BuyStorageBytesContract) -> pb::TransactionExtention;
            sell_storage(pb::SellStorageContract) -> pb::TransactionExtention;
            exchange_create(pb::ExchangeCreateContract) -> pb::TransactionExtention;
            exchange_inject(pb::ExchangeInjectContract) -> pb::TransactionExtention;
            exchange_withdraw(pb::ExchangeWithdrawContract) -> pb::TransactionExtention;
            exchange_transaction(pb::ExchangeTransactionContract) -> pb::TransactionExtention;
            market_sell_asset(pb::MarketSellAssetContract) -> pb::TransactionExtention;
            market_cancel_order(pb::MarketCancelOrderContract) -> pb::TransactionExtention;
            get_market_order_by_id(pb::BytesMessage) -> pb::MarketOrder;
            get_market_order_by_account(pb::BytesMessage) -> pb::MarketOrderList;
            get_market_price_by_pair(pb::MarketOrderPair) -> pb::MarketPriceList;
            get_market_order_list_by_pair(pb::MarketOrderPair) -> pb::MarketOrderList;
            get_market_pair_list(pb::EmptyMessage) -> pb::MarketOrderPairList;
            list_nodes(pb::EmptyMessage) -> pb::NodeList;
            get_asset_issue_by_account(pb::Account) -> pb::AssetIssueList;
            get_account_net(pb::Account) -> pb::AccountNetMessage;
            get_account_resource(pb::Account) -> pb::AccountResourceMessage;
            get_asset_issue_by_name(pb::BytesMessage) -> pb::AssetIssueContract;
            get_asset_issue_list_by_name(pb::BytesMessage) -> pb::AssetIssueList;
            get_asset_issue_by_id(pb::BytesMessage) -> pb::AssetIssueContract;
            get_now_block(pb::EmptyMessage) -> pb::Block;
            get_block_by_num(pb::NumberMessage) -> pb::Block;
            get_transaction_count_by_block_num(pb::NumberMessage) -> pb::NumberMessage;
            get_block_by_id(pb::BytesMessage) -> pb::Block;
            get_block_by_limit_next(pb::BlockLimit) -> pb::BlockList;
            get_block_by_latest_num(pb::NumberMessage) -> pb::BlockList;
            get_block_by_latest_num2(pb::NumberMessage) -> pb::BlockListExtention;
            deploy_contract(pb::CreateSmartContract) -> pb::TransactionExtention;
            get_contract(pb::BytesMessage) -> pb::SmartContract;
            get_contract_info(pb::BytesMessage) -> pb::SmartContractDataWrapper;
            trigger_contract(pb::TriggerSmartContract) -> pb::TransactionExtention;
            trigger_constant_contract(pb::TriggerSmartContract) -> pb::TransactionExtention;
            estimate_energy(pb::TriggerSmartContract) -> pb::EstimateEnergyMessage;
            clear_contract_abi(pb::ClearAbiContract) -> pb::TransactionExtention;
            list_witnesses(pb::EmptyMessage) -> pb::WitnessList;
            get_delegated_resource(pb::DelegatedResourceMessage) -> pb::DelegatedResourceList;
            get_delegated_resource_v2(pb::DelegatedResourceMessage) -> pb::DelegatedResourceList;
            get_delegated_resource_account_index(pb::BytesMessage) -> pb::DelegatedResourceAccountIndex;
            get_delegated_resource_account_index_v2(pb::BytesMessage) -> pb::DelegatedResourceAccountIndex;
            get_can_delegated_max_size(pb::CanDelegatedMaxSizeRequestMessage) -> pb::CanDelegatedMaxSizeResponseMessage;
            get_available_unfreeze_count(pb::GetAvailableUnfreezeCountRequestMessage) -> pb::GetAvailableUnfreezeCountResponseMessage;
            get_can_withdraw_unfreeze_amount(pb::CanWithdrawUnfreezeAmountRequestMessage) -> pb::CanWithdrawUnfreezeAmountResponseMessage;
            list_proposals(pb::EmptyMessage) -> pb::ProposalList;
            get_paginated_proposal_list(pb::PaginatedMessage) -> pb::ProposalList;
            get_proposal_by_id(pb::BytesMessage) -> pb::Proposal;
            list_exchanges(pb::EmptyMessage) -> pb::ExchangeList;
            get_paginated_exchange_list(pb::PaginatedMessage) -> pb::ExchangeList;
            get_exchange_by_id(pb::BytesMessage) -> pb::Exchange;
            get_chain_parameters(pb::EmptyMessage) -> pb::ChainParameters;
            get_asset_issue_list(pb::EmptyMessage) -> pb::AssetIssueList;
            get_paginated_asset_issue_list(pb::PaginatedMessage) -> pb::AssetIssueList;
            total_transaction(pb::EmptyMessage) -> pb::NumberMessage;
            get_next_maintenance_time(pb::EmptyMessage) -> pb::NumberMessage;
            account_permission_update(pb::AccountPermissionUpdateContract) -> pb::TransactionExtention;
            get_transaction_sign_weight(pb::Transaction) -> pb::TransactionSignWeight;
            get_transaction_approved_list(pb::Transaction) -> pb::TransactionApprovedList;
            get_node_info(pb::EmptyMessage) -> pb::NodeInfo;
            get_reward_info(pb::BytesMessage) -> pb::NumberMessage;
            get_brokerage_info(pb::BytesMessage) -> pb::NumberMessage;
            update_brokerage(pb::UpdateBrokerageContract) -> pb::TransactionExtention;
            create_shielded_transaction(pb::PrivateParameters) -> pb::TransactionExtention;
            get_merkle_tree_voucher_info(pb::OutputPointInfo) -> pb::IncrementalMerkleVoucherInfo;
            scan_note_by_ivk(pb::IvkDecryptParameters) -> pb::DecryptNotes;
            scan_and_mark_note_by_ivk(pb::IvkDecryptAndMarkParameters) -> pb::DecryptNotesMarked;
            scan_note_by_ovk(pb::OvkDecryptParameters) -> pb::DecryptNotes;
            get_spending_key(pb::EmptyMessage) -> pb::BytesMessage;
            get_expanded_spending_key(pb::BytesMessage) -> pb::ExpandedSpendingKeyMessage;
            get_ak_from_ask(pb::BytesMessage) -> pb::BytesMessage;
            get_nk_from_nsk(pb::BytesMessage) -> pb::BytesMessage;
            get_incoming_viewing_key(pb::ViewingKeyMessage) -> pb::IncomingViewingKeyMessage;
            get_diversifier(pb::EmptyMessage) -> pb::DiversifierMessage;
            get_new_shielded_address(pb::EmptyMessage) -> pb::ShieldedAddressInfo;
            get_zen_payment_address(pb::IncomingViewingKeyDiversifierMessage) -> pb::PaymentAddressMessage;
            get_rcm(pb::EmptyMessage) -> pb::BytesMessage;
            is_spend(pb::NoteParameters) -> pb::SpendResult;
            create_shielded_transaction_without_spend_auth_sig(pb::PrivateParametersWithoutAsk) -> pb::TransactionExtention;
            get_shield_transaction_hash(pb::Transaction) -> pb::BytesMessage;
            create_spend_auth_sig(pb::SpendAuthSigParameters) -> pb::BytesMessage;
            create_shield_nullifier(pb::NfParameters) -> pb::BytesMessage;
            create_shielded_contract_parameters(pb::PrivateShieldedTrc20Parameters) -> pb::ShieldedTrc20Parameters;
            create_shielded_contract_parameters_without_ask(pb::PrivateShieldedTrc20ParametersWithoutAsk) -> pb::ShieldedTrc20Parameters;
            scan_shielded_trc20_notes_by_ivk(pb::IvkDecryptTrc20Parameters) -> pb::DecryptNotesTrc20;
            scan_shielded_trc20_notes_by_ovk(pb::OvkDecryptTrc20Parameters) -> pb::DecryptNotesTrc20;
            is_shielded_trc20_contract_note_spent(pb::NfTrc20Parameters) -> pb::NullifierResult;
            get_trigger_input_for_shielded_trc20_contract(pb::ShieldedTrc20TriggerContractParameters) -> pb::BytesMessage;
            create_common_transaction(pb::Transaction) -> pb::TransactionExtention;
            get_burn_trx(pb::EmptyMessage) -> pb::NumberMessage;
            get_transaction_from_pending(pb::BytesMessage) -> pb::Transaction;
            get_transaction_list_from_pending(pb::EmptyMessage) -> pb::TransactionIdList;
            get_pending_size(pb::EmptyMessage) -> pb::NumberMessage;
            get_block(pb::BlockReq) -> pb::BlockExtention;
            get_bandwidth_prices(pb::EmptyMessage) -> pb::PricesResponseMessage;
            get_energy_prices(pb::EmptyMessage) -> pb::PricesResponseMessage;
            get_memo_fee(pb::EmptyMessage) -> pb::PricesResponseMessage;
    }
}

grpc_service! {
    impl WalletSolidity for SolidityApi {
        async fn get_account(
            &self,
            request: Request<pb::Account>,
        ) -> Result<Response<pb::Account>, Status> {
            counted(&self.shared, "WalletSolidity/GetAccount", account(&self.shared, View::Solidified, &request.into_inner().address).await)
        }

        async fn get_now_block2(
            &self,
            _request: Request<pb::EmptyMessage>,
        ) -> Result<Response<pb::BlockExtention>, Status> {
            counted(&self.shared, "WalletSolidity/GetNowBlock2", now_block(&self.shared, View::Solidified).await)
        }

        async fn get_block_by_num2(
            &self,
            request: Request<pb::NumberMessage>,
        ) -> Result<Response<pb::BlockExtention>, Status> {
            counted(&self.shared, "WalletSolidity/GetBlockByNum2", block_by_num(&self.shared, View::Solidified, request.into_inner().num).await)
        }

        async fn get_transaction_info_by_block_num(
            &self,
            request: Request<pb::NumberMessage>,
        ) -> Result<Response<pb::TransactionInfoList>, Status> {
            counted(&self.shared, "WalletSolidity/GetTransactionInfoByBlockNum", infos_by_num(&self.shared, View::Solidified, request.into_inner().num).await)
        }

        async fn get_transaction_by_id(
            &self,
            request: Request<pb::BytesMessage>,
        ) -> Result<Response<pb::Transaction>, Status> {
            counted(&self.shared, "WalletSolidity/GetTransactionById", tx_by_id(&self.shared, View::Solidified, &request.into_inner().value).await)
        }

        async fn get_transaction_info_by_id(
            &self,
            request: Request<pb::BytesMessage>,
        ) -> Result<Response<pb::TransactionInfo>, Status> {
            counted(&self.shared, "WalletSolidity/GetTransactionInfoById", info_by_id(&self.shared, View::Solidified, &request.into_inner().value).await)
        }
    }
    unimplemented {
            get_account_by_id(pb::Account) -> pb::Account;
            list_witnesses(pb::EmptyMessage) -> pb::WitnessList;
            get_asset_issue_list(pb::EmptyMessage) -> pb::AssetIssueList;
            get_paginated_asset_issue_list(pb::PaginatedMessage) -> pb::AssetIssueList;
            get_asset_issue_by_name(pb::BytesMessage) -> pb::AssetIssueContract;
            get_asset_issue_list_by_name(pb::BytesMessage) -> pb::AssetIssueList;
            get_asset_issue_by_id(pb::BytesMessage) -> pb::AssetIssueContract;
            get_now_block(pb::EmptyMessage) -> pb::Block;
            get_block_by_num(pb::NumberMessage) -> pb::Block;
            get_transaction_count_by_block_num(pb::NumberMessage) -> pb::NumberMessage;
            get_delegated_resource(pb::DelegatedResourceMessage) -> pb::DelegatedResourceList;
            get_delegated_resource_v2(pb::DelegatedResourceMessage) -> pb::DelegatedResourceList;
            get_delegated_resource_account_index(pb::BytesMessage) -> pb::DelegatedResourceAccountIndex;
            get_delegated_resource_account_index_v2(pb::BytesMessage) -> pb::DelegatedResourceAccountIndex;
            get_can_delegated_max_size(pb::CanDelegatedMaxSizeRequestMessage) -> pb::CanDelegatedMaxSizeResponseMessage;
            get_available_unfreeze_count(pb::GetAvailableUnfreezeCountRequestMessage) -> pb::GetAvailableUnfreezeCountResponseMessage;
            get_can_withdraw_unfreeze_amount(pb::CanWithdrawUnfreezeAmountRequestMessage) -> pb::CanWithdrawUnfreezeAmountResponseMessage;
            get_exchange_by_id(pb::BytesMessage) -> pb::Exchange;
            list_exchanges(pb::EmptyMessage) -> pb::ExchangeList;
            get_merkle_tree_voucher_info(pb::OutputPointInfo) -> pb::IncrementalMerkleVoucherInfo;
            scan_note_by_ivk(pb::IvkDecryptParameters) -> pb::DecryptNotes;
            scan_and_mark_note_by_ivk(pb::IvkDecryptAndMarkParameters) -> pb::DecryptNotesMarked;
            scan_note_by_ovk(pb::OvkDecryptParameters) -> pb::DecryptNotes;
            is_spend(pb::NoteParameters) -> pb::SpendResult;
            scan_shielded_trc20_notes_by_ivk(pb::IvkDecryptTrc20Parameters) -> pb::DecryptNotesTrc20;
            scan_shielded_trc20_notes_by_ovk(pb::OvkDecryptTrc20Parameters) -> pb::DecryptNotesTrc20;
            is_shielded_trc20_contract_note_spent(pb::NfTrc20Parameters) -> pb::NullifierResult;
            get_reward_info(pb::BytesMessage) -> pb::NumberMessage;
            get_brokerage_info(pb::BytesMessage) -> pb::NumberMessage;
            trigger_constant_contract(pb::TriggerSmartContract) -> pb::TransactionExtention;
            estimate_energy(pb::TriggerSmartContract) -> pb::EstimateEnergyMessage;
            get_market_order_by_id(pb::BytesMessage) -> pb::MarketOrder;
            get_market_order_by_account(pb::BytesMessage) -> pb::MarketOrderList;
            get_market_price_by_pair(pb::MarketOrderPair) -> pb::MarketPriceList;
            get_market_order_list_by_pair(pb::MarketOrderPair) -> pb::MarketOrderList;
            get_market_pair_list(pb::EmptyMessage) -> pb::MarketOrderPairList;
            get_burn_trx(pb::EmptyMessage) -> pb::NumberMessage;
            get_block(pb::BlockReq) -> pb::BlockExtention;
            get_bandwidth_prices(pb::EmptyMessage) -> pb::PricesResponseMessage;
            get_energy_prices(pb::EmptyMessage) -> pb::PricesResponseMessage;
    }
}

/// Counts an answered rpc and its encoded size, for budgets.
// The rpcs' own answer type, as tonic has it.
#[allow(clippy::result_large_err)]
fn counted<T: prost::Message>(
    shared: &Shared,
    rpc: &'static str,
    answer: Result<Response<T>, Status>,
) -> Result<Response<T>, Status> {
    if let Ok(r) = &answer {
        shared.count_served(rpc, r.get_ref().encoded_len());
    }
    answer
}

/// Applies the injected fault before an answer: fails, waits, or lets the
/// answer through (a `Disconnected` answer is spoilt by the caller).
async fn gate(shared: &Shared) -> Result<Fault, Status> {
    let fault = shared.read().fault();
    match fault {
        Fault::Unavailable => Err(Status::unavailable(
            "paywatch-testkit Tron node: injected fault: unavailable",
        )),
        Fault::Slow(delay) => {
            tokio::time::sleep(delay).await;
            Ok(fault)
        }
        Fault::None | Fault::Disconnected | Fault::LiteFullNode | Fault::NoTransactionHistory => {
            Ok(fault)
        }
    }
}

/// The gate of a history query (by number or range), which a Lite FullNode
/// closes.
async fn history_gate(shared: &Shared) -> Result<Fault, Status> {
    let fault = gate(shared).await?;
    if fault == Fault::LiteFullNode {
        return Err(Status::unavailable(
            "this API is closed because this node is a lite fullnode",
        ));
    }
    Ok(fault)
}

/// The highest block `view` shows.
fn upto(chain: &Chain, view: View) -> u64 {
    match view {
        View::Head => chain.tip().number,
        View::Solidified => chain.solidified(),
    }
}

fn corrupt(e: prost::DecodeError) -> Status {
    Status::internal(format!("paywatch-testkit Tron node: stored block: {e}"))
}

/// The answer for a block: empty if there is none; with a parent hash that
/// does not link to the previous block (and the id that header hashes to)
/// under [`Fault::Disconnected`].
fn block_answer(
    block: Option<&StoredBlock>,
    fault: Fault,
) -> Result<pb::BlockExtention, prost::DecodeError> {
    let Some(block) = block else {
        return Ok(pb::BlockExtention::default());
    };
    let mut ext = block.extention()?;
    if fault == Fault::Disconnected {
        if let Some(raw) = ext.block_header.as_mut().and_then(|h| h.raw_data.as_mut()) {
            // Still shaped like a block id (number − 1 in front), but of no
            // block on this chain.
            let mut fake = sha256(&[raw.parent_hash.as_slice(), b"disconnected"].concat());
            fake[..8].copy_from_slice(&(block.number.saturating_sub(1)).to_be_bytes());
            raw.parent_hash = fake.to_vec();
            ext.blockid = block_id(raw).0.to_vec();
        }
    }
    Ok(ext)
}

/// The account as of the view's block: its TRX and the mark of the last
/// transaction it signed.
async fn account(
    shared: &Shared,
    view: View,
    address: &[u8],
) -> Result<Response<pb::Account>, Status> {
    gate(shared).await?;
    let address: [u8; 21] = address
        .try_into()
        .map_err(|_| Status::invalid_argument("Invalid address"))?;
    let chain = shared.read();
    Ok(Response::new(chain.account(address, upto(&chain, view))))
}

async fn now_block(shared: &Shared, view: View) -> Result<Response<pb::BlockExtention>, Status> {
    let fault = gate(shared).await?;
    let block = {
        let chain = shared.read();
        let top = upto(&chain, view);
        chain.block(top as i64, top).cloned()
    };
    block_answer(block.as_deref(), fault)
        .map(Response::new)
        .map_err(corrupt)
}

async fn block_by_num(
    shared: &Shared,
    view: View,
    num: i64,
) -> Result<Response<pb::BlockExtention>, Status> {
    let fault = history_gate(shared).await?;
    let block = {
        let chain = shared.read();
        chain.block(num, upto(&chain, view)).cloned()
    };
    block_answer(block.as_deref(), fault)
        .map(Response::new)
        .map_err(corrupt)
}

/// `GetBlockByLimitNext2`: the blocks in [start, end) that exist, if the
/// range is non-empty and at most [`BLOCK_LIMIT`] long; else, as java-tron
/// does, an empty list.
async fn block_range(
    shared: &Shared,
    limit: pb::BlockLimit,
) -> Result<Response<pb::BlockListExtention>, Status> {
    let fault = history_gate(shared).await?;
    let (start, end) = (limit.start_num, limit.end_num);
    let valid =
        end > 0 && end > start && i128::from(end) - i128::from(start) <= i128::from(BLOCK_LIMIT);
    if !valid {
        return Ok(Response::new(pb::BlockListExtention::default()));
    }
    let blocks: Vec<Arc<StoredBlock>> = {
        let chain = shared.read();
        let top = upto(&chain, View::Head);
        (start.max(0)..end)
            .filter_map(|n| chain.block(n, top).cloned())
            .collect()
    };
    let block = blocks
        .iter()
        .map(|b| block_answer(Some(b), fault))
        .collect::<Result<Vec<_>, _>>()
        .map_err(corrupt)?;
    Ok(Response::new(pb::BlockListExtention { block }))
}

/// The infos of block `num`, in its order; under [`Fault::Disconnected`]
/// those of block `num − 1`.
async fn infos_by_num(
    shared: &Shared,
    view: View,
    num: i64,
) -> Result<Response<pb::TransactionInfoList>, Status> {
    let fault = history_gate(shared).await?;
    if fault == Fault::NoTransactionHistory {
        return Ok(Response::new(pb::TransactionInfoList::default()));
    }
    let num = if fault == Fault::Disconnected {
        num - 1
    } else {
        num
    };
    let block = {
        let chain = shared.read();
        chain.block(num, upto(&chain, view)).cloned()
    };
    match block {
        Some(b) => b.info_list().map(Response::new).map_err(corrupt),
        None => Ok(Response::new(pb::TransactionInfoList::default())),
    }
}

fn find(shared: &Shared, view: View, txid: &[u8]) -> Option<(Arc<StoredBlock>, usize)> {
    let chain = shared.read();
    chain.find_tx(txid, upto(&chain, view))
}

async fn tx_by_id(
    shared: &Shared,
    view: View,
    txid: &[u8],
) -> Result<Response<pb::Transaction>, Status> {
    gate(shared).await?;
    let Some((block, i)) = find(shared, view, txid) else {
        return Ok(Response::new(pb::Transaction::default()));
    };
    let mut ext = block.extention().map_err(corrupt)?;
    let tx = ext
        .transactions
        .get_mut(i)
        .and_then(|t| t.transaction.take())
        .unwrap_or_default();
    Ok(Response::new(tx))
}

async fn info_by_id(
    shared: &Shared,
    view: View,
    txid: &[u8],
) -> Result<Response<pb::TransactionInfo>, Status> {
    // GetTransactionInfoById is one of the history queries a Lite FullNode
    // closes; without transaction history it finds nothing either.
    if history_gate(shared).await? == Fault::NoTransactionHistory {
        return Ok(Response::new(pb::TransactionInfo::default()));
    }
    let Some((block, i)) = find(shared, view, txid) else {
        return Ok(Response::new(pb::TransactionInfo::default()));
    };
    let mut infos = block.info_list().map_err(corrupt)?;
    let info = if i < infos.transaction_info.len() {
        infos.transaction_info.swap_remove(i)
    } else {
        pb::TransactionInfo::default()
    };
    Ok(Response::new(info))
}

//! Settings → the chain crates: each network's watch set, block source and
//! address deriver. The one place that knows which crate serves which network.

use std::sync::Arc;

use paywatch_core::{Asset, BlockSource, Method, Network, WatchSet};
use paywatch_evm as evm;
use paywatch_solana as solana;
use paywatch_tron as tron;
use paywatch_utxo as utxo;

use crate::intents::AddressDeriver;
use crate::settings::NetworkSettings;

/// Public Solana endpoints allow 40 requests per 10 s per method and IP.
const SOLANA_REQUESTS_PER_SECOND: u32 = 10;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainSetupError {
    #[error("networks.{network}.{key}: {why}")]
    Invalid {
        network: Network,
        key: &'static str,
        why: String,
    },
    #[error(
        "networks.{network}.source = '{kind}' is not available for {network}; available: {available}"
    )]
    UnknownSource {
        network: Network,
        kind: String,
        available: &'static str,
    },
}

/// The watch set `network`'s source reads: keyed by scriptPubKey for the
/// UTXO chains, and listing its addresses for sources that ask per address.
pub fn watch_set(network: Network, ns: Option<&NetworkSettings>) -> WatchSet {
    let mut set = WatchSet::new(network);
    if utxo::Params::serves(network) {
        set = set.keyed(utxo::watch_key(network));
    }
    if network == Network::Ethereum {
        set = set.keyed(evm::watch_key());
    }
    if network == Network::Tron {
        set = set.keyed(tron::watch_key());
    }
    if network == Network::Solana {
        set = set.keyed(solana::watch_key());
    }
    // Electrum subscribes to each address, and a mempool wallet imports
    // each: both need the addresses as text.
    if ns.is_some_and(|n| n.source == "electrum" || mempool_wallet_name(n).is_some()) {
        set = set.listing();
    }
    set
}

fn utxo_params(network: Network, ns: &NetworkSettings) -> Result<utxo::Params, ChainSetupError> {
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    let chain: utxo::Chain = ns
        .chain
        .parse()
        .map_err(|e: utxo::UnknownChain| invalid("chain", e.to_string()))?;
    utxo::Params::new(network, chain)
        .ok_or_else(|| invalid("chain", "not a Bitcoin or Litecoin network".into()))
}

/// A node backend for `network`, or `None` for the in-process dev chain.
pub fn source(
    network: Network,
    ns: &NetworkSettings,
    watch: Arc<WatchSet>,
) -> Result<Option<Arc<dyn BlockSource>>, ChainSetupError> {
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    let confirmations = u32::try_from(ns.confirmations)
        .map_err(|_| invalid("confirmations", "too large".into()))?;
    match (ns.source.as_str(), utxo::Params::serves(network)) {
        ("devchain", _) => Ok(None),
        ("node", true) => {
            let params = utxo_params(network, ns)?;
            let cfg = utxo::NodeConfig {
                params,
                confirmations,
                blocks_per_request: ns.rpc.blocks_per_request.max(1),
                mempool: ns.mempool,
                mempool_wallet: mempool_wallet(network, ns)?,
            };
            let source = utxo::NodeSource::new(node_rpc(network, ns)?, cfg, watch);
            let source = match ns.rpc.p2p.as_deref().map(str::trim) {
                Some("off") => source,
                Some("") => {
                    return Err(invalid(
                        "rpc.p2p",
                        "empty: give the node's P2P host:port, or \"off\" to poll only".into(),
                    ))
                }
                address => source.with_p2p(address.map(str::to_owned)),
            };
            Ok(Some(Arc::new(source)))
        }
        ("electrum", true) => {
            let params = utxo_params(network, ns)?;
            let e = &ns.electrum;
            if e.url.is_empty() {
                return Err(invalid(
                    "electrum.url",
                    "required for source = \"electrum\"".into(),
                ));
            }
            let cfg = utxo::ElectrumConfig {
                params,
                url: e.url.clone(),
                confirmations,
                batch_size: e.batch_size.max(1),
                max_subscriptions: e.max_subscriptions,
                mempool: ns.mempool,
            };
            let source = utxo::ElectrumSource::new(cfg, watch)
                .map_err(|err| invalid("electrum", err.to_string()))?;
            Ok(Some(Arc::new(source)))
        }
        ("node", false) if network == Network::Ethereum => {
            Ok(Some(Arc::new(evm_source(ns, watch)?)))
        }
        ("node", false) if network == Network::Tron => Ok(Some(Arc::new(tron_source(ns, watch)?))),
        ("node", false) if network == Network::Solana => {
            Ok(Some(Arc::new(solana_source(ns, watch)?)))
        }
        (kind, false) if matches!(network, Network::Ethereum | Network::Tron | Network::Solana) => {
            Err(ChainSetupError::UnknownSource {
                network,
                kind: kind.to_owned(),
                available: "devchain, node",
            })
        }
        (kind, true) => Err(ChainSetupError::UnknownSource {
            network,
            kind: kind.to_owned(),
            available: "devchain, node, electrum",
        }),
        (kind, false) => Err(ChainSetupError::UnknownSource {
            network,
            kind: kind.to_owned(),
            available: "devchain",
        }),
    }
}

/// An Ethereum node as `[networks.ethereum]` describes it.
fn evm_source(
    ns: &NetworkSettings,
    watch: Arc<WatchSet>,
) -> Result<evm::EvmSource, ChainSetupError> {
    let network = Network::Ethereum;
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    if ns.rpc.url.is_empty() {
        return Err(invalid("rpc.url", "required for source = \"node\"".into()));
    }
    let finality = match ns.finality.as_str() {
        "finalized" => evm::Finality::FinalizedTag,
        "confirmations" => evm::Finality::Confirmations(
            u32::try_from(ns.confirmations)
                .map_err(|_| invalid("confirmations", "too large".into()))?,
        ),
        other => {
            return Err(invalid(
                "finality",
                format!("'{other}' is neither \"finalized\" nor \"confirmations\""),
            ))
        }
    };
    let cfg = evm::EvmConfig {
        url: ns.rpc.url.clone(),
        ws_url: ns.rpc.ws_url.clone().filter(|u| !u.is_empty()),
        chain_id: ns.chain_id,
        finality,
        tokens: evm_tokens(ns)?,
        traces: ns.traces,
        blocks_per_request: ns.rpc.blocks_per_request.max(1),
        batches_in_flight: ns.rpc.batches_in_flight.max(1),
        request_timeout: std::time::Duration::from_secs(ns.rpc.timeout_secs.max(1)),
        requests_per_second: ns.rpc.requests_per_second.unwrap_or(0),
        traces_per_request: ns
            .rpc
            .traces_per_request
            .unwrap_or(evm::EvmConfig::default().traces_per_request)
            .max(1),
        trace_timeout: ns
            .rpc
            .trace_timeout_secs
            .map_or(evm::EvmConfig::default().trace_timeout, |s| {
                std::time::Duration::from_secs(s.max(1))
            }),
        trace_retry_for: ns.rpc.trace_retry_secs.map_or(
            evm::EvmConfig::default().trace_retry_for,
            std::time::Duration::from_secs,
        ),
    };
    evm::EvmSource::new(cfg, watch).map_err(|e| match e {
        evm::EvmSetupError::Url(why) => invalid("rpc.url", why),
        evm::EvmSetupError::WsUrl(why) => invalid("rpc.ws_url", why),
        other => invalid("rpc", other.to_string()),
    })
}

/// A java-tron node as `[networks.tron]` describes it.
fn tron_source(
    ns: &NetworkSettings,
    watch: Arc<WatchSet>,
) -> Result<tron::TronSource, ChainSetupError> {
    let network = Network::Tron;
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    if ns.rpc.url.is_empty() {
        return Err(invalid("rpc.url", "required for source = \"node\"".into()));
    }
    if ns.finality != "finalized" && ns.finality != "solidified" {
        return Err(invalid(
            "finality",
            format!(
                "'{}': Tron payments are final when solidified, and only then",
                ns.finality
            ),
        ));
    }
    let Some(solidity_url) = ns.rpc.solidity_url.clone().filter(|u| !u.is_empty()) else {
        return Err(invalid(
            "rpc.solidity_url",
            "required for source = \"node\": java-tron serves WalletSolidity, the solidified \
             height payments settle on, on its solidity port (50061 by default), not on the \
             FullNode's (50051); without it every payment would stay confirming. Give the same \
             URL as rpc.url only if that endpoint serves both"
                .into(),
        ));
    };
    let cfg = tron::TronConfig {
        url: ns.rpc.url.clone(),
        solidity_url: Some(solidity_url),
        tokens: tron_tokens(ns)?,
        blocks_per_request: ns
            .rpc
            .blocks_per_request
            .clamp(1, tron::MAX_BLOCKS_PER_REQUEST),
        batches_in_flight: ns.rpc.batches_in_flight.max(1),
        request_timeout: std::time::Duration::from_secs(ns.rpc.timeout_secs.max(1)),
        metadata: ns
            .rpc
            .metadata
            .iter()
            .map(|(name, value)| (name.clone(), value.0.clone()))
            .collect(),
        requests_per_second: ns.rpc.requests_per_second.unwrap_or(0),
        ca_pem: ns
            .rpc
            .ca_file
            .as_deref()
            .map(|path| {
                std::fs::read_to_string(path)
                    .map_err(|e| invalid("rpc.ca_file", format!("reading {path}: {e}")))
            })
            .transpose()?,
        ..tron::TronConfig::default()
    };
    tron::TronSource::new(cfg, watch).map_err(|e| match e {
        tron::TronSetupError::Url(why) => invalid("rpc.url", why),
        tron::TronSetupError::SolidityUrl(why) => invalid("rpc.solidity_url", why),
        tron::TronSetupError::Metadata(why) => invalid("rpc.metadata", why),
        other => invalid("rpc", other.to_string()),
    })
}

/// A Solana RPC node as `[networks.solana]` describes it. Finality is the
/// `finalized` commitment; `confirmed` blocks show payments as confirming.
fn solana_source(
    ns: &NetworkSettings,
    watch: Arc<WatchSet>,
) -> Result<solana::SolanaSource, ChainSetupError> {
    let network = Network::Solana;
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    if ns.rpc.url.is_empty() {
        return Err(invalid("rpc.url", "required for source = \"node\"".into()));
    }
    if ns.finality != "finalized" {
        return Err(invalid(
            "finality",
            format!(
                "'{}': Solana payments are final at the finalized commitment, and only then",
                ns.finality
            ),
        ));
    }
    let cfg = solana::SolanaConfig {
        url: ns.rpc.url.clone(),
        genesis_hash: ns.rpc.genesis_hash.clone().filter(|h| !h.is_empty()),
        max_requests_per_second: ns
            .rpc
            .requests_per_second
            .unwrap_or(SOLANA_REQUESTS_PER_SECOND),
        blocks_per_request: ns
            .rpc
            .blocks_per_request
            .clamp(1, solana::MAX_BLOCKS_PER_REQUEST),
        batches_in_flight: ns.rpc.batches_in_flight.max(1),
        request_timeout: std::time::Duration::from_secs(ns.rpc.timeout_secs.max(1)),
        ..solana::SolanaConfig::default()
    };
    solana::SolanaSource::new(cfg, watch).map_err(|e| invalid("rpc.url", e.to_string()))
}

/// The TRC-20 USDT contract, and the recognised USDC one: configured, else
/// mainnet's.
pub(crate) fn tron_tokens(ns: &NetworkSettings) -> Result<tron::Tokens, ChainSetupError> {
    let method = Method::new(Asset::Usdt, Network::Tron).expect("a Tron method");
    let mut tokens = Vec::new();
    if let Some(contract) = ns.contract(method) {
        let body = tron::parse_address(&contract).map_err(|e| ChainSetupError::Invalid {
            network: Network::Tron,
            key: "contracts",
            why: format!("USDT: {e}"),
        })?;
        tokens.push((Asset::Usdt, body));
    }
    // Other methods' assets, recognised so real money sent by mistake is
    // a wrong asset for a person, never spam: configured (a dev chain's
    // own deployment), else the issuer's mainnet contract.
    for (asset, mainnet) in paywatch_core::recognised_tokens(Network::Tron) {
        let configured = ns
            .contracts
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(asset.as_str()))
            .map(|(_, v)| v.as_str());
        let contract = configured.unwrap_or(mainnet);
        let body = tron::parse_address(contract).map_err(|e| ChainSetupError::Invalid {
            network: Network::Tron,
            key: "contracts",
            why: format!("{asset}: {e}"),
        })?;
        tokens.push((*asset, body));
    }
    Ok(tron::Tokens::new(tokens))
}

/// USDT and USDC contracts: configured, else mainnet's. A contract that
/// does not parse is a setup error, never a token silently not watched.
pub(crate) fn evm_tokens(ns: &NetworkSettings) -> Result<evm::Tokens, ChainSetupError> {
    let mut tokens = Vec::new();
    for asset in [Asset::Usdt, Asset::Usdc] {
        let method = Method::new(asset, Network::Ethereum).expect("an Ethereum method");
        if let Some(contract) = ns.contract(method) {
            let address = evm::parse_address(&contract).map_err(|e| ChainSetupError::Invalid {
                network: Network::Ethereum,
                key: "contracts",
                why: format!("{asset}: {e}"),
            })?;
            tokens.push((asset, address));
        }
    }
    Ok(evm::Tokens::new(tokens))
}

/// The watch-only wallet a node source follows the mempool through, when
/// it follows the mempool at all.
fn mempool_wallet_name(ns: &NetworkSettings) -> Option<&String> {
    let node = ns.source == "node" && ns.mempool;
    ns.rpc.mempool_wallet.as_ref().filter(|_| node)
}

/// The mempool wallet's name, refused unless it is a plain file name: it
/// goes into the node's RPC path and names a directory on the node.
fn mempool_wallet(
    network: Network,
    ns: &NetworkSettings,
) -> Result<Option<String>, ChainSetupError> {
    let Some(name) = mempool_wallet_name(ns) else {
        return Ok(None);
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.starts_with('.') || !name.chars().all(plain) {
        return Err(ChainSetupError::Invalid {
            network,
            key: "rpc.mempool_wallet",
            why: format!(
                "'{name}' is not a plain wallet name (letters, digits, '-', '_' and '.', not \
                 starting with '.')"
            ),
        });
    }
    Ok(Some(name.clone()))
}

/// The RPC client `[networks.X.rpc]` describes: its URL, and either a user
/// and password or the node's cookie file.
pub(crate) fn node_rpc(
    network: Network,
    ns: &NetworkSettings,
) -> Result<utxo::NodeRpc, ChainSetupError> {
    let invalid = |key, why: String| ChainSetupError::Invalid { network, key, why };
    let rpc = &ns.rpc;
    if rpc.url.is_empty() {
        return Err(invalid("rpc.url", "required for source = \"node\"".into()));
    }
    let auth = match (&rpc.user, &rpc.password, &rpc.cookie_file) {
        (Some(user), Some(password), _) => utxo::RpcAuth::UserPassword {
            user: user.clone(),
            password: password.0.clone(),
        },
        (None, None, Some(cookie)) => utxo::RpcAuth::CookieFile(cookie.into()),
        _ => {
            return Err(invalid(
                "rpc",
                "set either user and password, or cookie_file".into(),
            ))
        }
    };
    Ok(utxo::NodeRpc::new(&rpc.url, auth))
}

/// The deriver for `network`'s account key, when one is configured.
pub fn deriver(
    network: Network,
    ns: &NetworkSettings,
) -> Result<Option<Arc<dyn AddressDeriver>>, ChainSetupError> {
    let Some(key) = &ns.account_key else {
        return Ok(None);
    };
    if network == Network::Ethereum {
        let account = evm::AccountKey::parse(&key.0).map_err(|e| ChainSetupError::Invalid {
            network,
            key: "account_key",
            why: e.to_string(),
        })?;
        return Ok(Some(Arc::new(Bip44Ethereum(account))));
    }
    if network == Network::Tron {
        let account = tron::AccountKey::parse(&key.0).map_err(|e| ChainSetupError::Invalid {
            network,
            key: "account_key",
            why: e.to_string(),
        })?;
        return Ok(Some(Arc::new(Bip44Tron(account))));
    }
    if !utxo::Params::serves(network) {
        return Err(ChainSetupError::Invalid {
            network,
            key: "account_key",
            why: format!("deriving {network} addresses is not available yet; import a pool"),
        });
    }
    let params = utxo_params(network, ns)?;
    let account = utxo::AccountKey::parse(network, params.chain, &key.0).map_err(|e| {
        ChainSetupError::Invalid {
            network,
            key: "account_key",
            why: e.to_string(),
        }
    })?;
    Ok(Some(Arc::new(Bip84(account))))
}

#[derive(Debug)]
struct Bip84(utxo::AccountKey);

impl AddressDeriver for Bip84 {
    fn network(&self) -> Network {
        self.0.network()
    }

    fn derive(&self, index: u32) -> Result<String, String> {
        self.0.receive_address(index).map_err(|e| e.to_string())
    }
}

#[derive(Debug)]
struct Bip44Ethereum(evm::AccountKey);

impl AddressDeriver for Bip44Ethereum {
    fn network(&self) -> Network {
        Network::Ethereum
    }

    /// The stored spelling is lowercase (addresses compare as text); the
    /// EIP-55 spelling is for showing to customers.
    fn derive(&self, index: u32) -> Result<String, String> {
        self.0
            .receive_address(index)
            .map(|a| evm::storage_form(&a))
            .map_err(|e| e.to_string())
    }
}

#[derive(Debug)]
struct Bip44Tron(tron::AccountKey);

impl AddressDeriver for Bip44Tron {
    fn network(&self) -> Network {
        Network::Tron
    }

    fn derive(&self, index: u32) -> Result<String, String> {
        self.0.receive_address(index).map_err(|e| e.to_string())
    }
}

/// What building each enabled network's source and address deriver finds
/// wrong in `settings`, without connecting to anything: the mistakes
/// `paywatch run` would stop on (a malformed URL, a missing solidity
/// endpoint, a bad contract address or account key), for `config check`.
pub(crate) fn setup_problems(settings: &crate::settings::Settings) -> Vec<String> {
    let mut problems = Vec::new();
    for network in settings.enabled_networks() {
        let Some(ns) = settings.network(network) else {
            continue;
        };
        // An empty source is reported by the settings' own checks.
        if !ns.source.is_empty() {
            let watch = Arc::new(watch_set(network, Some(ns)));
            if let Err(e) = source(network, ns, watch) {
                problems.push(e.to_string());
            }
        }
        if let Err(e) = deriver(network, ns) {
            problems.push(e.to_string());
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn litecoin_node(wallet: Option<&str>) -> NetworkSettings {
        let mut s = Settings::load(None).expect("defaults load");
        let ns = s.networks.get_mut("litecoin").expect("litecoin settings");
        ns.source = "node".into();
        ns.chain = "regtest".into();
        ns.rpc.url = "http://127.0.0.1:1".into();
        ns.rpc.user = Some("u".into());
        ns.rpc.password = Some(crate::settings::Secret("p".into()));
        ns.rpc.mempool_wallet = wallet.map(str::to_owned);
        ns.clone()
    }

    /// The name goes into the node's RPC path and names a directory there.
    #[test]
    fn a_mempool_wallet_name_that_is_not_plain_is_refused_naming_the_key() {
        for bad in ["", "../w", "a/b", ".hidden", "w?x=1"] {
            let ns = litecoin_node(Some(bad));
            let watch = Arc::new(watch_set(Network::Litecoin, Some(&ns)));
            let e = source(Network::Litecoin, &ns, watch)
                .err()
                .unwrap_or_else(|| panic!("'{bad}' refused"));
            assert!(e.to_string().contains("rpc.mempool_wallet"), "{e}");
        }
        let ns = litecoin_node(Some("paywatch-mempool"));
        let watch = Arc::new(watch_set(Network::Litecoin, Some(&ns)));
        assert!(watch.is_listing(), "the wallet imports addresses as text");
        assert!(source(Network::Litecoin, &ns, watch).is_ok());
        let plain = litecoin_node(None);
        assert!(!watch_set(Network::Litecoin, Some(&plain)).is_listing());
    }
}

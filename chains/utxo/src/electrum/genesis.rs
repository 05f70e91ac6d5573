//! Which chain a server serves, told by its genesis block.

use paywatch_core::Network;
use tracing::warn;

use super::{ElectrumError, Inner};
use crate::params::Chain;

/// The genesis blocks of the chains paywatch knows, as servers report them
/// (`server.features`): a server on another of these is a misconfiguration.
pub(super) const GENESIS: &[(Network, Chain, &str, &str)] = &[
    (
        Network::Bitcoin,
        Chain::Main,
        "Bitcoin mainnet",
        "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin testnet3",
        "000000000933ea01ad0ee984209779baaec3ced90fa3f408719526f8d77f4943",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin testnet4",
        "00000000da84f2bafbbc53dee25a72ae507ff4914b867c565be350b0da8bf043",
    ),
    (
        Network::Bitcoin,
        Chain::Test,
        "Bitcoin signet",
        "00000008819873e925422c1ff0f99f7cc9bbb232af63a077a480a3633bee1ef6",
    ),
    (
        Network::Bitcoin,
        Chain::Regtest,
        "Bitcoin regtest",
        "0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206",
    ),
    (
        Network::Litecoin,
        Chain::Main,
        "Litecoin mainnet",
        "12a765e31ffd4059bada1e25190f6e98c99d9714d334efa41a195a7e7e04bfe2",
    ),
    (
        Network::Litecoin,
        Chain::Test,
        "Litecoin testnet4",
        "4966625a4b2851d9fdee139e56211a0d88575f59ed816ff5e6a63deb4e3e29a0",
    ),
    (
        Network::Litecoin,
        Chain::Regtest,
        "Litecoin regtest",
        "530827f38f93b43ed12af0b3ad25a288dc02ed74d6d7857862df51fc56c416f9",
    ),
];

impl Inner {
    /// A server on another known chain is refused; an unknown one (a custom
    /// signet, say) is let through with a warning.
    pub(super) fn check_genesis(&self, genesis: &str) -> Result<(), ElectrumError> {
        let genesis = genesis.trim().to_ascii_lowercase();
        let params = &self.cfg.params;
        let mine = |(n, c, _, _): &&(Network, Chain, &str, &str)| {
            *n == params.network && *c == params.chain
        };
        match GENESIS.iter().find(|g| g.3 == genesis) {
            Some(g) if mine(&g) => Ok(()),
            Some((_, _, theirs, _)) => Err(ElectrumError::WrongChain {
                url: self.url.clone(),
                theirs: (*theirs).to_owned(),
                genesis,
                network: params.network,
                chain: params.chain,
            }),
            None => {
                warn!(url = %self.url, %genesis, network = %params.network, chain = %params.chain,
                    "the Electrum server's genesis block is none paywatch knows; assuming it serves the configured chain");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_genesis_table_matches_the_bitcoin_crate() {
        use bitcoin::blockdata::constants::genesis_block;
        for (network, hash) in [
            (bitcoin::Network::Bitcoin, GENESIS[0].3),
            (bitcoin::Network::Testnet, GENESIS[1].3),
            (bitcoin::Network::Testnet4, GENESIS[2].3),
            (bitcoin::Network::Signet, GENESIS[3].3),
            (bitcoin::Network::Regtest, GENESIS[4].3),
        ] {
            assert_eq!(
                genesis_block(network).block_hash().to_string(),
                hash,
                "{network}"
            );
        }
    }
}

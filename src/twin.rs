//! Address twins across networks. An Ethereum address and a Tron address are
//! two spellings of the same 20-byte key hash, and the same private key
//! spends both. A customer who sends USDT on Tron to the Tron spelling of an
//! Ethereum intent's address (or the other way round) has not lost the money,
//! but paid on the wrong network: each watcher also watches the twins of the
//! other network's issued addresses, and reconcile files what arrives there
//! against the intent as `wrong_network`, so support can see and recover it.

use paywatch_core::Network;

/// The network whose addresses share the key space of `network`'s.
pub fn twin_network(network: Network) -> Option<Network> {
    match network {
        Network::Ethereum => Some(Network::Tron),
        Network::Tron => Some(Network::Ethereum),
        _ => None,
    }
}

/// The same key's address on the twin network, in that network's stored
/// form (Ethereum lowercase 0x, Tron base58check). `None` for networks
/// without a twin and for addresses that do not parse.
pub fn twin(network: Network, address: &str) -> Option<(Network, String)> {
    match network {
        Network::Ethereum => {
            let a = paywatch_evm::parse_address(address).ok()?;
            let body: [u8; 20] = a.into();
            Some((Network::Tron, paywatch_tron::encode_address(&body)))
        }
        Network::Tron => {
            let body = paywatch_tron::parse_address(address).ok()?;
            let a = paywatch_evm::Address::from(body);
            Some((Network::Ethereum, paywatch_evm::storage_form(&a)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usdt_contract_is_the_same_key_on_both_networks() {
        // TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t is 41a614f803b6fd780986a42c78ec9c7f77e6ded13c.
        let eth = "0xa614f803b6fd780986a42c78ec9c7f77e6ded13c";
        let tron = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
        assert_eq!(
            twin(Network::Ethereum, eth),
            Some((Network::Tron, tron.to_owned()))
        );
        assert_eq!(
            twin(Network::Tron, tron),
            Some((Network::Ethereum, eth.to_owned()))
        );
    }

    #[test]
    fn only_ethereum_and_tron_have_twins() {
        assert_eq!(
            twin(
                Network::Bitcoin,
                "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq"
            ),
            None
        );
        assert_eq!(twin_network(Network::Solana), None);
        assert_eq!(twin(Network::Tron, "not an address"), None);
    }
}

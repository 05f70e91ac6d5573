//! Where fresh addresses come from: imported pools for any network, and
//! derivation from an account xpub for the networks whose chain crate
//! provides an [`AddressDeriver`].

use std::fmt::Debug;

use paywatch_core::Network;

/// Derives the address at a child index of an account key. Chain crates
/// implement this (BIP84 for Bitcoin and Litecoin, BIP44 for Ethereum and
/// Tron); the store hands out each index once, atomically.
pub trait AddressDeriver: Send + Sync + Debug {
    fn network(&self) -> Network;
    fn derive(&self, index: u32) -> Result<String, String>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: '{address}' is not a {network} address: {why}")]
pub struct PoolLineError {
    pub file: String,
    pub line: usize,
    pub address: String,
    pub network: Network,
    pub why: String,
}

/// Reads an address pool file: one address a line; blank lines and lines
/// starting with '#' are skipped. Every line is checked before anything is
/// imported, so a bad file imports nothing.
pub fn parse_pool(
    file: &str,
    text: &str,
    network: Network,
) -> Result<Vec<String>, Vec<PoolLineError>> {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match check_shape(network, line) {
            Ok(()) if paywatch_utxo::Params::serves(network) => good.push(
                paywatch_utxo::canonical_address(network, line).expect("check_shape accepted it"),
            ),
            Ok(()) => good.push(network.normalize_address(line).into_owned()),
            Err(why) => bad.push(PoolLineError {
                file: file.to_owned(),
                line: n + 1,
                address: line.to_owned(),
                network,
                why,
            }),
        }
    }
    if bad.is_empty() {
        Ok(good)
    } else {
        Err(bad)
    }
}

/// The shape each network's addresses must have. Where a chain crate owns
/// the encoding, it checks the whole address, checksum included.
pub fn check_shape(network: Network, address: &str) -> Result<(), String> {
    if paywatch_utxo::Params::serves(network) {
        use paywatch_utxo::AddressError as E;
        return paywatch_utxo::script_for_address(network, address)
            .map(|_| ())
            .map_err(|e| match e {
                E::Invalid { problem, .. } => problem.to_string(),
                E::WrongNetwork { other, .. } => format!("it is a {other} address"),
                other => other.to_string(),
            });
    }
    match network {
        Network::Ethereum => {
            return paywatch_evm::parse_address(address)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        Network::Tron => {
            return paywatch_tron::parse_address(address)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        _ => {}
    }
    const BASE58: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let base58 = |s: &str| s.chars().all(|c| BASE58.contains(c));
    let bech32 = |s: &str, hrps: &[&str]| {
        let lower = s.to_ascii_lowercase();
        let is_one_case = s == lower || s == s.to_ascii_uppercase();
        is_one_case
            && hrps.iter().any(|h| {
                lower
                    .strip_prefix(h)
                    .and_then(|r| r.strip_prefix('1'))
                    .is_some_and(|data| {
                        (6..=90).contains(&data.len())
                            && data
                                .chars()
                                .all(|c| "qpzry9x8gf2tvdw0s3jn54khce6mua7l".contains(c))
                    })
            })
    };
    let ok = match network {
        Network::Solana => (32..=44).contains(&address.len()) && base58(address),
        Network::Bitcoin => {
            bech32(address, &["bc", "tb", "bcrt"])
                || ((26..=35).contains(&address.len()) && base58(address))
        }
        Network::Litecoin => {
            bech32(address, &["ltc", "tltc", "rltc"])
                || ((26..=35).contains(&address.len()) && base58(address))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(match network {
            Network::Solana => "expected a base58 public key of 32 to 44 characters".to_owned(),
            _ => "expected a bech32 (segwit) or base58 address".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_file_with_one_bad_line_imports_nothing_and_names_the_line() {
        let text = "# pool\n0x52908400098527886E0F7030069857D2E4169EE7\n\n0x12\n";
        let errors = parse_pool("eth.txt", text, Network::Ethereum).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 4);
        assert!(
            errors[0]
                .to_string()
                .starts_with("eth.txt:4: '0x12' is not a ethereum address"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_litecoin_legacy_p2sh_address_is_stored_in_its_modern_spelling() {
        // 3… and M… are the same script: one address, one spelling.
        let legacy = "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3";
        let stored = parse_pool("ltc.txt", legacy, Network::Litecoin).unwrap();
        assert_eq!(stored.len(), 1);
        assert!(stored[0].starts_with('M'), "{stored:?}");
        assert_eq!(
            parse_pool("ltc.txt", &stored[0], Network::Litecoin).unwrap(),
            stored
        );
        let upper = parse_pool(
            "btc.txt",
            "BC1QXP53JP0P75CFGRRYT4M8QYLEX8XF0J9MUM8GPL",
            Network::Bitcoin,
        )
        .unwrap();
        assert_eq!(upper, ["bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl"]);
    }

    #[test]
    fn accepts_each_networks_shapes() {
        assert!(check_shape(
            Network::Bitcoin,
            "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq"
        )
        .is_ok());
        assert!(check_shape(
            Network::Litecoin,
            "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a"
        )
        .is_ok());
        // Bitcoin and Litecoin addresses are checked whole, checksum included.
        let bad = check_shape(
            Network::Litecoin,
            "rltc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
        )
        .unwrap_err();
        assert!(bad.contains("checksum"), "{bad}");
        assert!(check_shape(Network::Tron, "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t").is_ok());
        assert!(check_shape(
            Network::Solana,
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
        )
        .is_ok());
        assert!(check_shape(Network::Tron, "0xdAC17F958D2ee523a2206206994597C13D831ec7").is_err());
        assert!(check_shape(
            Network::Bitcoin,
            "bc1qAr0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq"
        )
        .is_err());
    }
}

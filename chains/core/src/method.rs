use std::fmt;
use std::str::FromStr;

use crate::Network;

/// An asset as customers name it. USDT on Ethereum and USDT on Tron share
/// this name but are different [`Method`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Asset {
    Btc,
    Ltc,
    Eth,
    Usdt,
    Usdc,
    Trx,
    Sol,
}

impl Asset {
    pub const ALL: [Asset; 7] = [
        Asset::Btc,
        Asset::Ltc,
        Asset::Eth,
        Asset::Usdt,
        Asset::Usdc,
        Asset::Trx,
        Asset::Sol,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Asset::Btc => "BTC",
            Asset::Ltc => "LTC",
            Asset::Eth => "ETH",
            Asset::Usdt => "USDT",
            Asset::Usdc => "USDC",
            Asset::Trx => "TRX",
            Asset::Sol => "SOL",
        }
    }

    /// Base units per coin, as a power of ten: the same on every network
    /// (USDC is 6 on Ethereum, Tron and Solana alike).
    pub fn decimals(self) -> u32 {
        match self {
            Asset::Btc | Asset::Ltc => 8,
            Asset::Eth => 18,
            Asset::Usdt | Asset::Usdc | Asset::Trx => 6,
            Asset::Sol => 9,
        }
    }

    /// Stablecoins are quoted 1:1 with USD unless the rates config says otherwise.
    pub fn is_usd_stablecoin(self) -> bool {
        matches!(self, Asset::Usdt | Asset::Usdc)
    }
}

impl fmt::Display for Asset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Asset {
    type Err = MethodError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Asset::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| MethodError::UnknownAsset(s.to_owned()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MethodError {
    #[error("unknown asset '{0}' (expected one of BTC, LTC, ETH, USDT, USDC, TRX, SOL)")]
    UnknownAsset(String),
    #[error(
        "{asset} is not a payment method on {network}; the methods are: {}",
        Method::list()
    )]
    NotAMethod { asset: Asset, network: Network },
}

/// One of the payment methods: an exact asset on an exact network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Method {
    asset: Asset,
    network: Network,
}

impl Method {
    /// Every method paywatch accepts, and no other.
    pub const ALL: [Method; 8] = [
        Method::at(Asset::Btc, Network::Bitcoin),
        Method::at(Asset::Ltc, Network::Litecoin),
        Method::at(Asset::Eth, Network::Ethereum),
        Method::at(Asset::Usdt, Network::Ethereum),
        Method::at(Asset::Usdc, Network::Ethereum),
        Method::at(Asset::Trx, Network::Tron),
        Method::at(Asset::Usdt, Network::Tron),
        Method::at(Asset::Sol, Network::Solana),
    ];

    const fn at(asset: Asset, network: Network) -> Method {
        Method { asset, network }
    }

    pub fn new(asset: Asset, network: Network) -> Result<Method, MethodError> {
        Method::ALL
            .into_iter()
            .find(|m| m.asset == asset && m.network == network)
            .ok_or(MethodError::NotAMethod { asset, network })
    }

    pub fn asset(self) -> Asset {
        self.asset
    }

    pub fn network(self) -> Network {
        self.network
    }

    /// Base units per coin, as a power of ten.
    pub fn decimals(self) -> u32 {
        self.asset.decimals()
    }

    /// The mainnet token contract; dev chains override it in config.
    pub fn default_contract(self) -> Option<&'static str> {
        match (self.asset, self.network) {
            (Asset::Usdt, Network::Ethereum) => Some("0xdAC17F958D2ee523a2206206994597C13D831ec7"),
            (Asset::Usdc, Network::Ethereum) => Some("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
            (Asset::Usdt, Network::Tron) => Some("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"),
            _ => None,
        }
    }

    /// The coin native to the network, paid without a contract.
    pub fn is_native(self) -> bool {
        self.default_contract().is_none()
    }

    fn list() -> String {
        Method::ALL
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The mainnet contracts (mints, on Solana) of a method's asset on a
/// network where that asset is no method: USDC on Tron, USDT and USDC on
/// Solana. Real money a payer sent there by mistake is recognised by its
/// issuer's contract, so it goes before a person as `wrong_asset` (the key
/// is held; it can be returned); any other token is address-poisoning
/// spam, recorded and moving nothing. Look-alike contracts are spam.
pub fn recognised_tokens(network: Network) -> &'static [(Asset, &'static str)] {
    match network {
        Network::Tron => &[(Asset::Usdc, "TEkxiTehnzSmSe2XqrBj4w32RUN966rdz8")],
        Network::Solana => &[
            (Asset::Usdt, "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB"),
            (Asset::Usdc, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"),
        ],
        Network::Bitcoin | Network::Litecoin | Network::Ethereum => &[],
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.asset, self.network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_method_table_is_exact() {
        let table: Vec<(String, u32, Option<&str>)> = Method::ALL
            .iter()
            .map(|m| (m.to_string(), m.decimals(), m.default_contract()))
            .collect();
        assert_eq!(
            table,
            vec![
                ("BTC on bitcoin".into(), 8, None),
                ("LTC on litecoin".into(), 8, None),
                ("ETH on ethereum".into(), 18, None),
                (
                    "USDT on ethereum".into(),
                    6,
                    Some("0xdAC17F958D2ee523a2206206994597C13D831ec7")
                ),
                (
                    "USDC on ethereum".into(),
                    6,
                    Some("0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48")
                ),
                ("TRX on tron".into(), 6, None),
                (
                    "USDT on tron".into(),
                    6,
                    Some("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t")
                ),
                ("SOL on solana".into(), 9, None),
            ]
        );
    }

    #[test]
    fn an_asset_on_a_foreign_network_is_not_a_method() {
        let err = Method::new(Asset::Usdc, Network::Tron).unwrap_err();
        assert!(
            err.to_string()
                .contains("USDC is not a payment method on tron"),
            "{err}"
        );
        assert!(Method::new(Asset::Usdt, Network::Tron).is_ok());
    }
}

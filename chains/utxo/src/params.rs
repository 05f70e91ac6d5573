//! What tells Bitcoin from Litecoin, and mainnet from its test chains: the
//! address encodings. Everything else in this crate is shared.

use std::fmt;
use std::str::FromStr;

use paywatch_core::Network;

/// Which of a network's chains a node or key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Chain {
    Main,
    Test,
    Regtest,
}

impl Chain {
    pub const ALL: [Chain; 3] = [Chain::Main, Chain::Test, Chain::Regtest];

    pub fn as_str(self) -> &'static str {
        match self {
            Chain::Main => "main",
            Chain::Test => "test",
            Chain::Regtest => "regtest",
        }
    }
}

impl fmt::Display for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown chain '{0}' (expected main, test or regtest)")]
pub struct UnknownChain(pub String);

impl FromStr for Chain {
    type Err = UnknownChain;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "main" | "mainnet" => Ok(Chain::Main),
            "test" | "testnet" | "testnet3" | "testnet4" | "signet" => Ok(Chain::Test),
            "regtest" => Ok(Chain::Regtest),
            _ => Err(UnknownChain(s.to_owned())),
        }
    }
}

/// The address encodings of one chain of one network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub network: Network,
    pub chain: Chain,
    /// bech32 human-readable part of segwit addresses.
    pub hrp: &'static str,
    pub p2pkh_version: u8,
    /// The version new P2SH addresses are written with.
    pub p2sh_version: u8,
    /// Litecoin first shared Bitcoin's P2SH version and still accepts it.
    pub p2sh_legacy_version: Option<u8>,
    /// BIP32 version bytes of account public keys this chain's keys use
    /// (xpub/zpub, tpub/vpub, and Litecoin's Ltub/Mtub).
    pub xpub_versions: &'static [[u8; 4]],
    /// SLIP-44 coin type for the BIP84 path m/84'/coin'/account'.
    pub coin_type: u32,
}

const XPUB: [u8; 4] = [0x04, 0x88, 0xb2, 0x1e];
const ZPUB: [u8; 4] = [0x04, 0xb2, 0x47, 0x46];
const TPUB: [u8; 4] = [0x04, 0x35, 0x87, 0xcf];
const VPUB: [u8; 4] = [0x04, 0x5f, 0x1c, 0xf6];
const LTUB: [u8; 4] = [0x01, 0x9d, 0xa4, 0x62];
const MTUB: [u8; 4] = [0x01, 0xb2, 0x6e, 0xf6];
const TTUB: [u8; 4] = [0x04, 0x36, 0xf6, 0xe1];

impl Params {
    pub fn new(network: Network, chain: Chain) -> Option<Params> {
        let p = match (network, chain) {
            (Network::Bitcoin, Chain::Main) => Params {
                network,
                chain,
                hrp: "bc",
                p2pkh_version: 0x00,
                p2sh_version: 0x05,
                p2sh_legacy_version: None,
                xpub_versions: &[XPUB, ZPUB],
                coin_type: 0,
            },
            (Network::Bitcoin, Chain::Test | Chain::Regtest) => Params {
                network,
                chain,
                hrp: if chain == Chain::Test { "tb" } else { "bcrt" },
                p2pkh_version: 0x6f,
                p2sh_version: 0xc4,
                p2sh_legacy_version: None,
                xpub_versions: &[TPUB, VPUB],
                coin_type: 1,
            },
            (Network::Litecoin, Chain::Main) => Params {
                network,
                chain,
                hrp: "ltc",
                p2pkh_version: 0x30,
                p2sh_version: 0x32,
                p2sh_legacy_version: Some(0x05),
                xpub_versions: &[XPUB, ZPUB, LTUB, MTUB],
                coin_type: 2,
            },
            (Network::Litecoin, Chain::Test | Chain::Regtest) => Params {
                network,
                chain,
                hrp: if chain == Chain::Test { "tltc" } else { "rltc" },
                p2pkh_version: 0x6f,
                p2sh_version: 0x3a,
                p2sh_legacy_version: Some(0xc4),
                xpub_versions: &[TPUB, VPUB, TTUB],
                coin_type: 1,
            },
            _ => return None,
        };
        Some(p)
    }

    /// Every chain of `network`, mainnet first.
    pub fn all(network: Network) -> impl Iterator<Item = Params> {
        Chain::ALL
            .into_iter()
            .filter_map(move |c| Params::new(network, c))
    }

    /// Whether this crate serves `network`.
    pub fn serves(network: Network) -> bool {
        matches!(network, Network::Bitcoin | Network::Litecoin)
    }
}

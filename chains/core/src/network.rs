use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// A chain paywatch watches. The same asset on two networks is two methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Network {
    Bitcoin,
    Litecoin,
    Ethereum,
    Tron,
    Solana,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network '{0}' (expected one of bitcoin, litecoin, ethereum, tron, solana)")]
pub struct UnknownNetwork(pub String);

impl Network {
    pub const ALL: [Network; 5] = [
        Network::Bitcoin,
        Network::Litecoin,
        Network::Ethereum,
        Network::Tron,
        Network::Solana,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Network::Bitcoin => "bitcoin",
            Network::Litecoin => "litecoin",
            Network::Ethereum => "ethereum",
            Network::Tron => "tron",
            Network::Solana => "solana",
        }
    }

    /// The one spelling of an address that paywatch stores and compares.
    ///
    /// Hex and bech32 addresses are case-insensitive on the wire, so a
    /// customer's wallet may show them in either case; base58 is
    /// case-sensitive and kept as given.
    pub fn normalize_address(self, address: &str) -> Cow<'_, str> {
        let address = address.trim();
        let case_insensitive = match self {
            Network::Ethereum => true,
            Network::Bitcoin | Network::Litecoin => is_bech32_like(address),
            Network::Tron | Network::Solana => false,
        };
        if case_insensitive && address.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(address.to_ascii_lowercase())
        } else {
            Cow::Borrowed(address)
        }
    }
}

fn is_bech32_like(address: &str) -> bool {
    const HRPS: [&str; 6] = ["bc1", "tb1", "bcrt1", "ltc1", "tltc1", "rltc1"];
    let lower = address.get(..5).unwrap_or(address).to_ascii_lowercase();
    HRPS.iter().any(|hrp| lower.starts_with(hrp))
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Network {
    type Err = UnknownNetwork;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Network::ALL
            .into_iter()
            .find(|n| n.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownNetwork(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_network_by_name() {
        for n in Network::ALL {
            assert_eq!(n.as_str().parse::<Network>().unwrap(), n);
        }
        assert!("dogecoin".parse::<Network>().is_err());
    }

    #[test]
    fn normalizes_case_only_where_the_encoding_is_case_insensitive() {
        assert_eq!(
            Network::Ethereum.normalize_address("0xAbC0000000000000000000000000000000000001"),
            "0xabc0000000000000000000000000000000000001"
        );
        assert_eq!(Network::Bitcoin.normalize_address("BC1QXYZ"), "bc1qxyz");
        assert_eq!(
            Network::Bitcoin.normalize_address("1BoatSLRHtKNngkdXEeobR76b53LETtpyT"),
            "1BoatSLRHtKNngkdXEeobR76b53LETtpyT"
        );
        assert_eq!(Network::Solana.normalize_address("So1Abc"), "So1Abc");
    }
}

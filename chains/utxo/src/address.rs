//! Addresses to scriptPubKeys and back, for every chain of Bitcoin and
//! Litecoin.
//!
//! Matching is done on scripts, never on address strings: a customer may
//! write the same script as upper- or lower-case bech32, or (on Litecoin) as
//! a legacy `3...` or a modern `M...` P2SH address. [`script_for_address`]
//! turns whatever was given into the one script, and [`address_for_script`]
//! turns a matched output back into the one spelling paywatch shows.

use std::fmt;
use std::fmt::Write as _;

use bitcoin::bech32::primitives::decode::{CharError, UncheckedHrpstring, UncheckedHrpstringError};
use bitcoin::bech32::{Bech32, Bech32m, Fe32, Hrp};
use bitcoin::hashes::Hash as _;
use bitcoin::{PubkeyHash, Script, ScriptBuf, ScriptHash, WitnessProgram, WitnessVersion};
use paywatch_core::Network;

use crate::params::{Chain, Params};

/// Longest string looked at; longer input is rejected before decoding (the
/// longest valid address, a 40-byte bech32 program under the `tltc` prefix,
/// is 76 characters; BIP173 caps the format at 90).
const MAX_ADDRESS_LEN: usize = 90;
/// How much of a rejected address an error message quotes.
const MAX_QUOTED_LEN: usize = 100;
/// Characters of a bech32 checksum.
const BECH32_CHECKSUM_LEN: usize = 6;
/// Length of a base58 address payload: version byte and a HASH160.
const BASE58_PAYLOAD_LEN: usize = 21;
const BASE58_ALPHABET: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Why an address was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    /// `network` is not one this crate serves (only Bitcoin and Litecoin).
    #[error("'{address}' is not a {network} address: {network} is not a UTXO network paywatch-utxo serves")]
    UnsupportedNetwork { address: String, network: Network },
    /// A well-formed prefix or version of another network.
    #[error("'{address}' is not a {network} address: it is a {other} address")]
    WrongNetwork {
        address: String,
        network: Network,
        other: Network,
    },
    /// Malformed, or of no chain of `network`.
    #[error("'{address}' is not a {network} address: {problem}")]
    Invalid {
        address: String,
        network: Network,
        problem: AddressProblem,
    },
}

/// What exactly is wrong with an [`AddressError::Invalid`] address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressProblem {
    #[error("it is empty")]
    Empty,
    #[error("too long ({0} characters)")]
    TooLong(usize),
    #[error("invalid base58 character {0:?}")]
    Base58Char(char),
    #[error("bad base58 checksum")]
    Base58Checksum,
    #[error("base58 payload is {0} bytes, expected 21")]
    Base58Length(usize),
    #[error("unknown base58 version byte 0x{0:02x}")]
    UnknownVersion(u8),
    /// Neither base58 nor bech32 with one of the network's prefixes.
    #[error("unknown bech32 prefix '{0}'")]
    UnknownPrefix(String),
    #[error("bech32 mixes upper and lower case")]
    MixedCase,
    #[error("invalid bech32 character {0:?}")]
    Bech32Char(char),
    #[error("bad bech32 checksum")]
    Bech32Checksum,
    /// Witness version 0 must use the BIP173 bech32 checksum.
    #[error("witness version 0 needs a bech32 checksum but has a bech32m one")]
    Bech32mForVersion0,
    /// Witness versions 1 to 16 must use the BIP350 bech32m checksum.
    #[error("witness version {0} needs a bech32m checksum but has a bech32 one")]
    Bech32ForVersion(u8),
    #[error("no witness version or program")]
    NoWitnessProgram,
    #[error("invalid witness version {0} (must be 0 to 16)")]
    WitnessVersion(u8),
    #[error("invalid bech32 padding")]
    Padding,
    #[error("witness version 0 program is {0} bytes (must be 20 or 32)")]
    Version0ProgramLength(usize),
    #[error("witness program is {0} bytes (must be 2 to 40)")]
    ProgramLength(usize),
}

/// Parses any standard address of `network` on any of its chains
/// (main/test/regtest): P2PKH, P2SH (incl. Litecoin's legacy 3.../2... P2SH
/// versions), and segwit witness programs of every version 0..=16 (bech32
/// for v0, bech32m for v1+; v0 must be 20 or 32 bytes; program 2..=40
/// bytes). Accepts either all-lower or all-upper case for bech32. Returns the
/// chain it belongs to and the script.
///
/// Surrounding whitespace is ignored.
///
/// Base58 addresses do not tell a test chain from regtest: Bitcoin's test
/// and regtest chains share versions 0x6f/0xc4, Litecoin's share 0x6f/0x3a
/// (and legacy 0xc4). Those come back as [`Chain::Test`]; only bech32
/// addresses (`bcrt1`/`rltc1`) are recognised as [`Chain::Regtest`].
///
/// Bitcoin and Litecoin share the test chains' P2PKH version 0x6f, and
/// Litecoin still accepts Bitcoin's P2SH versions, so those base58 addresses
/// parse for either network; only the network asked for is reported.
pub fn script_for_address(
    network: Network,
    address: &str,
) -> Result<(Chain, ScriptBuf), AddressError> {
    let address = address.trim();
    let invalid = |problem| AddressError::Invalid {
        address: quote(address),
        network,
        problem,
    };
    if !Params::serves(network) {
        return Err(AddressError::UnsupportedNetwork {
            address: quote(address),
            network,
        });
    }
    if address.is_empty() {
        return Err(invalid(AddressProblem::Empty));
    }
    if address.len() > MAX_ADDRESS_LEN {
        return Err(invalid(AddressProblem::TooLong(address.chars().count())));
    }

    // A bech32 prefix is everything before the last '1'. No base58 address
    // of either network starts with a bech32 prefix, so the prefix decides.
    if let Some(sep) = address.rfind('1') {
        let hrp = &address[..sep];
        if let Some(params) = Params::all(network).find(|p| p.hrp.eq_ignore_ascii_case(hrp)) {
            return decode_segwit(address)
                .map(|script| (params.chain, script))
                .map_err(invalid);
        }
        if let Some(other) = other_network(network, |p| p.hrp.eq_ignore_ascii_case(hrp)) {
            return Err(AddressError::WrongNetwork {
                address: quote(address),
                network,
                other,
            });
        }
    }

    match decode_base58(network, address) {
        Ok(found) => Ok(found),
        Err(Base58Failure::OtherNetwork(other)) => Err(AddressError::WrongNetwork {
            address: quote(address),
            network,
            other,
        }),
        // Not base58 at all, but shaped like bech32: say which prefix was
        // not recognised rather than which character is not base58.
        Err(Base58Failure::Invalid(AddressProblem::Base58Char(_)))
            if UncheckedHrpstring::new(address).is_ok() =>
        {
            let sep = address.rfind('1').unwrap_or(0);
            Err(invalid(AddressProblem::UnknownPrefix(
                address[..sep].to_ascii_lowercase(),
            )))
        }
        Err(Base58Failure::Invalid(problem)) => Err(invalid(problem)),
    }
}

/// The one spelling paywatch stores for an address: the form the watcher
/// writes for the script it pays (lower-case bech32, Litecoin's modern P2SH
/// version). Litecoin's legacy `3…` P2SH and its `M…` twin are one script,
/// so they must be one address, or a payment found by script would be
/// recorded under a spelling no intent holds.
pub fn canonical_address(network: Network, address: &str) -> Result<String, AddressError> {
    let (chain, script) = script_for_address(network, address)?;
    let params = Params::new(network, chain).expect("script_for_address serves only known chains");
    Ok(address_for_script(&params, &script).unwrap_or_else(|| address.trim().to_owned()))
}

/// The address a scriptPubKey pays, in `params`' encoding (bech32
/// lower-case, modern P2SH version); None for scripts with no address (P2PK,
/// bare multisig, OP_RETURN, nonstandard).
///
/// Every witness version 1 to 16 is written as bech32m, including
/// Litecoin's MWEB outputs (version 8 HogAddr, version 9 peg-in).
pub fn address_for_script(params: &Params, script: &Script) -> Option<String> {
    let b = script.as_bytes();
    match b {
        // OP_DUP OP_HASH160 <20> OP_EQUALVERIFY OP_CHECKSIG
        [0x76, 0xa9, 0x14, hash @ .., 0x88, 0xac] if hash.len() == 20 => {
            Some(base58_address(params.p2pkh_version, hash))
        }
        // OP_HASH160 <20> OP_EQUAL
        [0xa9, 0x14, hash @ .., 0x87] if hash.len() == 20 => {
            Some(base58_address(params.p2sh_version, hash))
        }
        // OP_0 or OP_1..OP_16, then one direct push of 2 to 40 bytes.
        [op, push, program @ ..]
            if usize::from(*push) == program.len() && (2..=40).contains(&program.len()) =>
        {
            let version = match *op {
                0x00 => 0,
                0x51..=0x60 => op - 0x50,
                _ => return None,
            };
            if version == 0 && program.len() != 20 && program.len() != 32 {
                return None;
            }
            let version = Fe32::try_from(version).ok()?;
            let hrp = Hrp::parse(params.hrp).ok()?;
            let mut out = String::with_capacity(
                params.hrp.len() + 1 + 1 + (program.len() * 8).div_ceil(5) + 6,
            );
            bitcoin::bech32::segwit::encode_lower_to_fmt_unchecked(&mut out, hrp, version, program)
                .ok()?;
            Some(out)
        }
        _ => None,
    }
}

/// Base58check of `version || hash`, with no heap use beyond the result.
fn base58_address(version: u8, hash: &[u8]) -> String {
    struct Payload<'a>(&'a [u8]);
    impl fmt::Display for Payload<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            bitcoin::base58::encode_check_to_fmt(f, self.0)
        }
    }
    let mut payload = [0u8; BASE58_PAYLOAD_LEN];
    payload[0] = version;
    payload[1..].copy_from_slice(hash);
    let mut out = String::with_capacity(36);
    // Writing to a String cannot fail.
    let _ = write!(out, "{}", Payload(&payload));
    out
}

/// Decodes a segwit address whose prefix is already known to be one of the
/// network's, checking everything BIP173/BIP350 require.
fn decode_segwit(address: &str) -> Result<ScriptBuf, AddressProblem> {
    let unchecked = UncheckedHrpstring::new(address).map_err(|e| match e {
        UncheckedHrpstringError::Char(CharError::MixedCase) => AddressProblem::MixedCase,
        UncheckedHrpstringError::Char(CharError::InvalidChar(c)) => AddressProblem::Bech32Char(c),
        UncheckedHrpstringError::Char(_) => AddressProblem::NoWitnessProgram,
        // Cannot happen: the prefix was matched against a known one.
        _ => AddressProblem::Bech32Checksum,
    })?;

    let is_bech32 = unchecked.has_valid_checksum::<Bech32>();
    let is_bech32m = !is_bech32 && unchecked.has_valid_checksum::<Bech32m>();
    if !is_bech32 && !is_bech32m {
        return Err(AddressProblem::Bech32Checksum);
    }
    let data = unchecked.data_part_ascii();
    if data.len() <= BECH32_CHECKSUM_LEN {
        return Err(AddressProblem::NoWitnessProgram);
    }
    let version = Fe32::from_char(char::from(data[0]))
        .map_err(|_| AddressProblem::Bech32Char(char::from(data[0])))?
        .to_u8();
    if version > 16 {
        return Err(AddressProblem::WitnessVersion(version));
    }
    match (version, is_bech32) {
        (0, false) => return Err(AddressProblem::Bech32mForVersion0),
        (1.., true) => return Err(AddressProblem::Bech32ForVersion(version)),
        _ => {}
    }

    let mut checked = if is_bech32 {
        unchecked.remove_checksum::<Bech32>()
    } else {
        unchecked.remove_checksum::<Bech32m>()
    };
    checked.remove_witness_version();
    checked
        .validate_segwit_padding()
        .map_err(|_| AddressProblem::Padding)?;
    let len = checked.byte_iter().len();
    if !(2..=40).contains(&len) {
        return Err(AddressProblem::ProgramLength(len));
    }
    if version == 0 && len != 20 && len != 32 {
        return Err(AddressProblem::Version0ProgramLength(len));
    }
    let mut program = [0u8; 40];
    for (dst, src) in program.iter_mut().zip(checked.byte_iter()) {
        *dst = src;
    }
    let version =
        WitnessVersion::try_from(version).map_err(|_| AddressProblem::WitnessVersion(version))?;
    let program = WitnessProgram::new(version, &program[..len])
        .map_err(|_| AddressProblem::ProgramLength(len))?;
    Ok(ScriptBuf::new_witness_program(&program))
}

enum Base58Failure {
    Invalid(AddressProblem),
    OtherNetwork(Network),
}

fn decode_base58(network: Network, address: &str) -> Result<(Chain, ScriptBuf), Base58Failure> {
    use bitcoin::base58::Error;

    let payload = bitcoin::base58::decode_check(address).map_err(|e| {
        Base58Failure::Invalid(match e {
            Error::Decode(_) => AddressProblem::Base58Char(
                address
                    .chars()
                    .find(|c| !BASE58_ALPHABET.contains(*c))
                    .unwrap_or('?'),
            ),
            Error::TooShort(_) => AddressProblem::Base58Length(0),
            _ => AddressProblem::Base58Checksum,
        })
    })?;
    let Ok(payload) = <[u8; BASE58_PAYLOAD_LEN]>::try_from(payload.as_slice()) else {
        return Err(Base58Failure::Invalid(AddressProblem::Base58Length(
            payload.len(),
        )));
    };
    let version = payload[0];
    let mut hash = [0u8; 20];
    hash.copy_from_slice(&payload[1..]);

    // Chains in order main, test, regtest: a version shared by test and
    // regtest is reported as test.
    for params in Params::all(network) {
        if version == params.p2pkh_version {
            return Ok((
                params.chain,
                ScriptBuf::new_p2pkh(&PubkeyHash::from_byte_array(hash)),
            ));
        }
        if version == params.p2sh_version || Some(version) == params.p2sh_legacy_version {
            return Ok((
                params.chain,
                ScriptBuf::new_p2sh(&ScriptHash::from_byte_array(hash)),
            ));
        }
    }
    match other_network(network, |p| {
        version == p.p2pkh_version
            || version == p.p2sh_version
            || Some(version) == p.p2sh_legacy_version
    }) {
        Some(other) => Err(Base58Failure::OtherNetwork(other)),
        None => Err(Base58Failure::Invalid(AddressProblem::UnknownVersion(
            version,
        ))),
    }
}

/// Another served network that has a chain matching `pred`.
fn other_network(network: Network, pred: impl Fn(&Params) -> bool) -> Option<Network> {
    Network::ALL
        .into_iter()
        .filter(|&n| n != network && Params::serves(n))
        .find(|&n| Params::all(n).any(|p| pred(&p)))
}

/// The address as quoted in an error: control characters escaped, and cut
/// short if it is long.
fn quote(address: &str) -> String {
    let mut out = String::with_capacity(address.len().min(MAX_QUOTED_LEN + 3));
    for (i, c) in address.chars().enumerate() {
        if i == MAX_QUOTED_LEN {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(network: Network, chain: Chain) -> Params {
        Params::new(network, chain).unwrap()
    }

    fn script_hex(script: &Script) -> String {
        script
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Parses, checks the chain, and re-encodes to exactly the same string
    /// (lower-cased for bech32).
    fn round_trip(network: Network, address: &str, chain: Chain) -> ScriptBuf {
        let (got_chain, script) =
            script_for_address(network, address).unwrap_or_else(|e| panic!("{address}: {e}"));
        assert_eq!(got_chain, chain, "{address}");
        let back = address_for_script(&params(network, chain), &script)
            .unwrap_or_else(|| panic!("{address}: no address for its own script"));
        // Only bech32 can be all upper case; it comes back lower case.
        let expected = if !address.bytes().any(|b| b.is_ascii_lowercase()) {
            address.to_ascii_lowercase()
        } else {
            address.to_owned()
        };
        assert_eq!(back, expected);
        script
    }

    fn problem(network: Network, address: &str) -> AddressProblem {
        match script_for_address(network, address) {
            Err(AddressError::Invalid { problem, .. }) => problem,
            other => panic!("{address}: expected an invalid-address error, got {other:?}"),
        }
    }

    #[test]
    fn bitcoin_mainnet_addresses_round_trip() {
        let n = Network::Bitcoin;
        let s = round_trip(
            n,
            "bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge",
            Chain::Main,
        );
        assert!(s.is_p2wsh());
        let s = round_trip(n, "bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl", Chain::Main);
        assert!(s.is_p2wpkh());
        let s = round_trip(n, "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3", Chain::Main);
        assert!(s.is_p2sh());
        let s = round_trip(n, "1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1T", Chain::Main);
        assert!(s.is_p2pkh());
        // BIP86 first receive address for the "abandon ... about" mnemonic.
        let s = round_trip(
            n,
            "bc1p5cyxnuxmeuwuvkwfem96lqzszd02n6xdcjrs20cac6yqjjwudpxqkedrcr",
            Chain::Main,
        );
        assert!(s.is_p2tr());
        assert_eq!(
            script_hex(&s),
            "5120a60869f0dbcf1dc659c9cecbaf8050135ea9e8cdc487053f1dc6880949dc684c"
        );
    }

    #[test]
    fn bip350_valid_vectors_give_their_scripts() {
        let vectors = [
            (
                "BC1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KV8F3T4",
                Chain::Main,
                "0014751e76e8199196d454941c45d1b3a323f1433bd6",
            ),
            (
                "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sl5k7",
                Chain::Test,
                "00201863143c14c5166804bd19203356da136c985678cd4d27a1b8c6329604903262",
            ),
            (
                "bc1pw508d6qejxtdg4y5r3zarvary0c5xw7kw508d6qejxtdg4y5r3zarvary0c5xw7kt5nd6y",
                Chain::Main,
                "5128751e76e8199196d454941c45d1b3a323f1433bd6751e76e8199196d454941c45d1b3a323f1433bd6",
            ),
            ("BC1SW50QGDZ25J", Chain::Main, "6002751e"),
            (
                "bc1zw508d6qejxtdg4y5r3zarvaryvaxxpcs",
                Chain::Main,
                "5210751e76e8199196d454941c45d1b3a323",
            ),
            (
                "tb1qqqqqp399et2xygdj5xreqhjjvcmzhxw4aywxecjdzew6hylgvsesrxh6hy",
                Chain::Test,
                "0020000000c4a5cad46221b2a187905e5266362b99d5e91c6ce24d165dab93e86433",
            ),
            (
                "tb1pqqqqp399et2xygdj5xreqhjjvcmzhxw4aywxecjdzew6hylgvsesf3hn0c",
                Chain::Test,
                "5120000000c4a5cad46221b2a187905e5266362b99d5e91c6ce24d165dab93e86433",
            ),
            (
                "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0",
                Chain::Main,
                "512079be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798",
            ),
        ];
        for (address, chain, hex) in vectors {
            let script = round_trip(Network::Bitcoin, address, chain);
            assert_eq!(script_hex(&script), hex, "{address}");
        }
    }

    #[test]
    fn litecoin_mainnet_addresses_round_trip() {
        let n = Network::Litecoin;
        let s = round_trip(n, "LdgG1wAKE341qyvRtR8Tvw7jp5veonokHL", Chain::Main);
        assert!(s.is_p2pkh());
        let s = round_trip(n, "MW44Zj2phDHuThDfChhfT3AobxVT5GtujH", Chain::Main);
        assert!(s.is_p2sh());
        let s = round_trip(
            n,
            "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
            Chain::Main,
        );
        assert!(s.is_p2wpkh());
    }

    #[test]
    fn litecoin_mweb_witness_versions_8_and_9_round_trip_as_bech32m() {
        let n = Network::Litecoin;
        let hog = round_trip(
            n,
            "ltc1gxr529607w908ccru6uguk6pay5ugmvk5mdh6jj4w5dw3jj6e2dcqkulphy",
            Chain::Main,
        );
        assert_eq!(hog.witness_version(), Some(WitnessVersion::V8));
        assert_eq!(
            script_hex(&hog),
            "582030e8a2e9fe715e7c607cd711cb683d25388db2d4db6fa94aaea35d194b595370"
        );
        let pegin = round_trip(
            n,
            "ltc1frmjteyhd56nsta6sggullrjmdgzhgcncl2nddeq2l4wf0pqxpxusc95llu",
            Chain::Main,
        );
        assert_eq!(pegin.witness_version(), Some(WitnessVersion::V9));
        assert_eq!(
            script_hex(&pegin),
            "59201ee4bc92eda6a705f7504239ff8e5b6a05746278faa6d6e40afd5c97840609b9"
        );
    }

    #[test]
    fn litecoin_legacy_p2sh_is_accepted_and_written_in_the_modern_version() {
        let (chain, legacy) =
            script_for_address(Network::Litecoin, "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3").unwrap();
        assert_eq!(chain, Chain::Main);
        let (_, bitcoin) =
            script_for_address(Network::Bitcoin, "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3").unwrap();
        assert_eq!(legacy, bitcoin);
        let modern = address_for_script(&params(Network::Litecoin, Chain::Main), &legacy).unwrap();
        assert!(modern.starts_with('M'), "{modern}");
        assert_eq!(
            script_for_address(Network::Litecoin, &modern).unwrap(),
            (Chain::Main, legacy)
        );

        // The same on the test chain: legacy 0xc4 ("2...") reads, 0x3a ("Q...") is written.
        let p = params(Network::Bitcoin, Chain::Test);
        let script = ScriptBuf::new_p2sh(&ScriptHash::from_byte_array([7; 20]));
        let legacy = address_for_script(&p, &script).unwrap();
        assert!(legacy.starts_with('2'), "{legacy}");
        assert_eq!(
            script_for_address(Network::Litecoin, &legacy).unwrap(),
            (Chain::Test, script.clone())
        );
        let modern = address_for_script(&params(Network::Litecoin, Chain::Test), &script).unwrap();
        assert!(modern.starts_with('Q'), "{modern}");
        assert_eq!(
            script_for_address(Network::Litecoin, &modern).unwrap(),
            (Chain::Test, script)
        );
    }

    #[test]
    fn every_chain_round_trips_every_script_kind() {
        let scripts = [
            ScriptBuf::new_p2pkh(&PubkeyHash::from_byte_array([1; 20])),
            ScriptBuf::new_p2sh(&ScriptHash::from_byte_array([2; 20])),
            ScriptBuf::new_witness_program(
                &WitnessProgram::new(WitnessVersion::V0, &[3; 20]).unwrap(),
            ),
            ScriptBuf::new_witness_program(
                &WitnessProgram::new(WitnessVersion::V0, &[4; 32]).unwrap(),
            ),
            ScriptBuf::new_witness_program(
                &WitnessProgram::new(WitnessVersion::V1, &[5; 32]).unwrap(),
            ),
            ScriptBuf::new_witness_program(
                &WitnessProgram::new(WitnessVersion::V16, &[6; 2]).unwrap(),
            ),
            ScriptBuf::new_witness_program(
                &WitnessProgram::new(WitnessVersion::V2, &[7; 40]).unwrap(),
            ),
        ];
        for network in [Network::Bitcoin, Network::Litecoin] {
            for p in Params::all(network) {
                for script in &scripts {
                    let address = address_for_script(&p, script).unwrap();
                    let (chain, back) = script_for_address(network, &address)
                        .unwrap_or_else(|e| panic!("{network} {}: {e}", p.chain));
                    assert_eq!(&back, script, "{address}");
                    let base58 = script.is_p2pkh() || script.is_p2sh();
                    let expected_chain = if base58 && p.chain == Chain::Regtest {
                        Chain::Test
                    } else {
                        p.chain
                    };
                    assert_eq!(chain, expected_chain, "{address}");
                    if !base58 {
                        assert!(address.starts_with(&format!("{}1", p.hrp)), "{address}");
                        let upper = address.to_ascii_uppercase();
                        assert_eq!(
                            script_for_address(network, &upper).unwrap(),
                            (chain, script.clone())
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn regtest_bech32_is_told_from_test() {
        let script = ScriptBuf::new_witness_program(
            &WitnessProgram::new(WitnessVersion::V0, &[9; 20]).unwrap(),
        );
        for (network, hrp) in [(Network::Bitcoin, "bcrt1q"), (Network::Litecoin, "rltc1q")] {
            let address = address_for_script(&params(network, Chain::Regtest), &script).unwrap();
            assert!(address.starts_with(hrp), "{address}");
            assert_eq!(
                script_for_address(network, &address).unwrap(),
                (Chain::Regtest, script.clone())
            );
        }
    }

    #[test]
    fn scripts_without_an_address_give_none() {
        let p = params(Network::Bitcoin, Chain::Main);
        let pubkey = [2u8; 33];
        let mut p2pk = vec![33u8];
        p2pk.extend_from_slice(&pubkey);
        p2pk.push(0xac);
        let mut multisig = vec![0x51, 33];
        multisig.extend_from_slice(&pubkey);
        multisig.extend_from_slice(&[0x51, 0xae]);
        let cases: [(&str, Vec<u8>); 8] = [
            ("p2pk", p2pk),
            ("bare multisig", multisig),
            ("op_return", vec![0x6a, 0x04, 1, 2, 3, 4]),
            ("empty", vec![]),
            ("v0 of 25 bytes", [vec![0x00, 25], vec![0; 25]].concat()),
            ("v1 of 1 byte", vec![0x51, 0x01, 0x00]),
            ("v1 of 41 bytes", [vec![0x51, 41], vec![0; 41]].concat()),
            (
                "push length mismatch",
                [vec![0x00, 0x14], vec![0; 21]].concat(),
            ),
        ];
        for (what, bytes) in cases {
            assert_eq!(
                address_for_script(&p, Script::from_bytes(&bytes)),
                None,
                "{what}"
            );
        }
    }

    #[test]
    fn bip173_and_bip350_invalid_vectors_name_the_problem() {
        use AddressProblem::*;
        let n = Network::Bitcoin;
        let cases = [
            (
                "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqh2y7hd",
                Bech32ForVersion(1),
            ),
            (
                "tb1z0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqglt7rf",
                Bech32ForVersion(2),
            ),
            (
                "BC1S0XLXVLHEMJA6C4DQV22UAPCTQUPFHLXM9H8Z3K2E72Q4K9HCZ7VQ54WELL",
                Bech32ForVersion(16),
            ),
            (
                "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kemeawh",
                Bech32mForVersion0,
            ),
            (
                "tb1q0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vq24jc47",
                Bech32mForVersion0,
            ),
            (
                "bc1p38j9r5y49hruaue7wxjce0updqjuyyx0kh56v8s25huc6995vvpql3jow4",
                Bech32Char('o'),
            ),
            (
                "BC130XLXVLHEMJA6C4DQV22UAPCTQUPFHLXM9H8Z3K2E72Q4K9HCZ7VQ7ZWS8R",
                WitnessVersion(17),
            ),
            ("bc1pw5dgrnzv", ProgramLength(1)),
            (
                "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7v8n0nx0muaewav253zgeav",
                ProgramLength(41),
            ),
            (
                "BC1QR508D6QEJXTDG4Y5R3ZARVARYV98GJ9P",
                Version0ProgramLength(16),
            ),
            (
                "tb1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vq47Zagq",
                MixedCase,
            ),
            (
                "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7v07qwwzcrf",
                Padding,
            ),
            (
                "tb1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vpggkg4j",
                Padding,
            ),
            ("bc1gmk9yu", NoWitnessProgram),
            // BIP173's invalid addresses; those with witness version 1+ now
            // fail BIP350's checksum rule first.
            ("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t5", Bech32Checksum),
            (
                "BC13W508D6QEJXTDG4Y5R3ZARVARY0C5XW7KN40WF2",
                WitnessVersion(17),
            ),
            ("bc1rw5uspcuh", Bech32ForVersion(3)),
            (
                "bc10w508d6qejxtdg4y5r3zarvary0c5xw7kw508d6qejxtdg4y5r3zarvary0c5xw7kw5rljs90",
                Bech32ForVersion(15),
            ),
            (
                "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sL5k7",
                MixedCase,
            ),
            ("bc1zw508d6qejxtdg4y5r3zarvaryvqyzf3du", Bech32ForVersion(2)),
            (
                "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3pjxtptv",
                Padding,
            ),
        ];
        for (address, expected) in cases {
            assert_eq!(problem(n, address), expected, "{address}");
        }
        // BIP173's and BIP350's invalid-prefix vectors: a prefix of neither network.
        for address in [
            "tc1qw508d6qejxtdg4y5r3zarvary0c5xw7kg3g4ty",
            "tc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vq5zuyut",
        ] {
            assert_eq!(problem(n, address), UnknownPrefix("tc".into()), "{address}");
        }
    }

    #[test]
    fn error_messages_quote_the_address_and_name_the_problem() {
        let e = script_for_address(Network::Litecoin, "ltc1qxyz").unwrap_err();
        assert_eq!(
            e.to_string(),
            "'ltc1qxyz' is not a litecoin address: bad bech32 checksum"
        );
        let e = script_for_address(
            Network::Bitcoin,
            "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kemeawh",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "'bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kemeawh' is not a bitcoin address: \
             witness version 0 needs a bech32 checksum but has a bech32m one"
        );
        let e = script_for_address(Network::Bitcoin, "BC1QR508D6QEJXTDG4Y5R3ZARVARYV98GJ9P")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("witness version 0 program is 16 bytes"),
            "{e}"
        );
        let e =
            script_for_address(Network::Bitcoin, "1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1U").unwrap_err();
        assert_eq!(
            e.to_string(),
            "'1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1U' is not a bitcoin address: bad base58 checksum"
        );
        let e = script_for_address(Network::Bitcoin, "").unwrap_err();
        assert_eq!(e.to_string(), "'' is not a bitcoin address: it is empty");
        let long = "1".repeat(500);
        let e = script_for_address(Network::Bitcoin, &long).unwrap_err();
        assert!(e.to_string().len() < 200, "{e}");
        let e = script_for_address(Network::Ethereum, "0xabc").unwrap_err();
        assert!(matches!(e, AddressError::UnsupportedNetwork { .. }), "{e}");
    }

    #[test]
    fn addresses_of_the_other_network_are_rejected_naming_it() {
        for address in [
            "bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl",
            "1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1T",
            "tb1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3q0sl5k7",
        ] {
            let e = script_for_address(Network::Litecoin, address).unwrap_err();
            assert_eq!(
                e,
                AddressError::WrongNetwork {
                    address: address.into(),
                    network: Network::Litecoin,
                    other: Network::Bitcoin
                }
            );
            assert_eq!(
                e.to_string(),
                format!("'{address}' is not a litecoin address: it is a bitcoin address")
            );
        }
        for address in [
            "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
            "LdgG1wAKE341qyvRtR8Tvw7jp5veonokHL",
            "MW44Zj2phDHuThDfChhfT3AobxVT5GtujH",
        ] {
            let e = script_for_address(Network::Bitcoin, address).unwrap_err();
            assert!(
                matches!(
                    e,
                    AddressError::WrongNetwork {
                        other: Network::Litecoin,
                        ..
                    }
                ),
                "{address}: {e}"
            );
            assert!(
                e.to_string()
                    .contains("not a bitcoin address: it is a litecoin address"),
                "{e}"
            );
        }
    }

    #[test]
    fn base58_test_and_regtest_are_reported_as_test() {
        for network in [Network::Bitcoin, Network::Litecoin] {
            let script = ScriptBuf::new_p2pkh(&PubkeyHash::from_byte_array([8; 20]));
            let address = address_for_script(&params(network, Chain::Regtest), &script).unwrap();
            assert_eq!(
                address,
                address_for_script(&params(network, Chain::Test), &script).unwrap()
            );
            assert_eq!(
                script_for_address(network, &address).unwrap(),
                (Chain::Test, script)
            );
        }
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        let (chain, _) = script_for_address(
            Network::Bitcoin,
            "  bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl\n",
        )
        .unwrap();
        assert_eq!(chain, Chain::Main);
    }
}

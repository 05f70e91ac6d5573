//! BIP84 receive addresses (native segwit P2WPKH) from an account extended
//! public key, so paywatch can hand out fresh addresses without ever holding
//! a private key.

use std::fmt;
use std::sync::OnceLock;

use bitcoin::bech32::Hrp;
use bitcoin::bip32::{ChildNumber, Xpub};
use bitcoin::secp256k1::{Secp256k1, VerifyOnly};
use paywatch_core::Network;

use crate::params::{Chain, Params};

/// The BIP32 version bytes bitcoin's decoder understands.
const XPUB: [u8; 4] = [0x04, 0x88, 0xb2, 0x1e];
const TPUB: [u8; 4] = [0x04, 0x35, 0x87, 0xcf];
/// Length of a serialized BIP32 extended key.
const EXTENDED_KEY_LEN: usize = 78;
/// Depth of an account node, m/84'/coin'/account'.
const ACCOUNT_DEPTH: u8 = 3;
/// First hardened child index.
const HARDENED: u32 = 1 << 31;

/// Names of BIP32/SLIP-132 version bytes, for error messages. Private key
/// versions are listed so that a pasted private key is called one.
const VERSION_NAMES: &[([u8; 4], &str, bool)] = &[
    ([0x04, 0x88, 0xb2, 0x1e], "xpub", false),
    ([0x04, 0x9d, 0x7c, 0xb2], "ypub", false),
    ([0x04, 0xb2, 0x47, 0x46], "zpub", false),
    ([0x04, 0x35, 0x87, 0xcf], "tpub", false),
    ([0x04, 0x4a, 0x52, 0x62], "upub", false),
    ([0x04, 0x5f, 0x1c, 0xf6], "vpub", false),
    ([0x01, 0x9d, 0xa4, 0x62], "Ltub", false),
    ([0x01, 0xb2, 0x6e, 0xf6], "Mtub", false),
    ([0x04, 0x36, 0xf6, 0xe1], "ttub", false),
    ([0x04, 0x88, 0xad, 0xe4], "xprv", true),
    ([0x04, 0x9d, 0x78, 0x78], "yprv", true),
    ([0x04, 0xb2, 0x43, 0x0c], "zprv", true),
    ([0x04, 0x35, 0x83, 0x94], "tprv", true),
    ([0x04, 0x4a, 0x4e, 0x28], "uprv", true),
    ([0x04, 0x5f, 0x18, 0xbc], "vprv", true),
    ([0x01, 0x9d, 0x9c, 0xfe], "Ltpv", true),
    ([0x01, 0xb2, 0x67, 0x92], "Mtpv", true),
    ([0x04, 0x36, 0xef, 0x7d], "ttpv", true),
];

fn version_name(version: [u8; 4]) -> Option<(&'static str, bool)> {
    VERSION_NAMES
        .iter()
        .find(|(v, _, _)| *v == version)
        .map(|&(_, name, private)| (name, private))
}

fn describe_version(version: [u8; 4]) -> String {
    match version_name(version) {
        Some((name, _)) => name.to_owned(),
        None => format!(
            "unknown version 0x{}",
            version
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        ),
    }
}

fn secp() -> &'static Secp256k1<VerifyOnly> {
    static SECP: OnceLock<Secp256k1<VerifyOnly>> = OnceLock::new();
    SECP.get_or_init(Secp256k1::verification_only)
}

/// Why an account key was rejected or an address could not be derived.
/// Never contains key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveError {
    #[error("{network} is not a UTXO network paywatch-utxo serves")]
    UnsupportedNetwork { network: Network },
    #[error("the {network} {chain} account key is not a base58check extended key (mistyped or truncated?)")]
    Encoding { network: Network, chain: Chain },
    #[error("the {network} {chain} account key decodes to {length} bytes, expected 78")]
    Length {
        network: Network,
        chain: Chain,
        length: usize,
    },
    #[error(
        "the {network} {chain} account key is an extended private key ({kind}); \
         give the account's extended public key instead, and treat this private key as exposed"
    )]
    PrivateKey {
        network: Network,
        chain: Chain,
        kind: &'static str,
    },
    #[error("the {network} {chain} account key is a {found} key; expected one of {expected}")]
    WrongVersion {
        network: Network,
        chain: Chain,
        found: String,
        expected: String,
    },
    #[error("the {network} {chain} account key holds an invalid public key")]
    InvalidKey { network: Network, chain: Chain },
    #[error(
        "the {network} {chain} account key has depth {depth}; expected an account-level key \
         (depth 3, m/84'/coin'/account')"
    )]
    WrongDepth {
        network: Network,
        chain: Chain,
        depth: u8,
    },
    #[error(
        "the {network} {chain} account key is not a hardened account node \
         (its child number is {child}, expected account' of m/84'/coin'/account')"
    )]
    NotHardened {
        network: Network,
        chain: Chain,
        child: u32,
    },
    #[error("address index {index} is a hardened index; receive addresses need an index below 2147483648")]
    HardenedIndex { index: u32 },
    #[error("key derivation failed at address index {index}; skip to the next index")]
    Derivation { index: u32 },
}

/// An account-level extended public key (the m/84'/coin'/account' node)
/// for one network and chain.
#[derive(Clone)]
pub struct AccountKey {
    params: Params,
    hrp: Hrp,
    /// The account node m/84'/coin'/account'.
    account: Xpub,
    /// Its external (receive) chain m/84'/coin'/account'/0.
    external: Xpub,
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountKey")
            .field("network", &self.params.network)
            .field("chain", &self.params.chain)
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl AccountKey {
    /// Accepts xpub/zpub (and Litecoin's Ltub/Mtub) for mainnet, tpub/vpub
    /// (and Litecoin ttub) for test/regtest, by their version bytes from
    /// [`Params::xpub_versions`]; `chain` picks the HRP (regtest uses
    /// bcrt/rltc with the test-chain keys). Must be depth 3 (account level,
    /// a hardened child): other depths are rejected with a clear error.
    /// Surrounding whitespace is ignored.
    pub fn parse(network: Network, chain: Chain, text: &str) -> Result<AccountKey, DeriveError> {
        let params =
            Params::new(network, chain).ok_or(DeriveError::UnsupportedNetwork { network })?;
        let hrp =
            Hrp::parse(params.hrp).map_err(|_| DeriveError::UnsupportedNetwork { network })?;

        let mut data = bitcoin::base58::decode_check(text.trim())
            .map_err(|_| DeriveError::Encoding { network, chain })?;
        if data.len() != EXTENDED_KEY_LEN {
            return Err(DeriveError::Length {
                network,
                chain,
                length: data.len(),
            });
        }
        let mut version = [0u8; 4];
        version.copy_from_slice(&data[..4]);
        if !params.xpub_versions.contains(&version) {
            if let Some((kind, true)) = version_name(version) {
                return Err(DeriveError::PrivateKey {
                    network,
                    chain,
                    kind,
                });
            }
            return Err(DeriveError::WrongVersion {
                network,
                chain,
                found: describe_version(version),
                expected: params
                    .xpub_versions
                    .iter()
                    .map(|v| describe_version(*v))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        // bitcoin's decoder knows only xpub and tpub; the version has been
        // checked, so present the key as one of those.
        data[..4].copy_from_slice(if chain == Chain::Main { &XPUB } else { &TPUB });
        let account =
            Xpub::decode(&data).map_err(|_| DeriveError::InvalidKey { network, chain })?;
        if account.depth != ACCOUNT_DEPTH {
            return Err(DeriveError::WrongDepth {
                network,
                chain,
                depth: account.depth,
            });
        }
        if !account.child_number.is_hardened() {
            return Err(DeriveError::NotHardened {
                network,
                chain,
                child: u32::from(account.child_number),
            });
        }
        let external = account
            .ckd_pub(secp(), ChildNumber::Normal { index: 0 })
            .map_err(|_| DeriveError::InvalidKey { network, chain })?;
        Ok(AccountKey {
            params,
            hrp,
            account,
            external,
        })
    }

    /// The receive address at m/84'/coin'/account'/0/index (external chain
    /// 0), bech32 P2WPKH with the chain's HRP.
    pub fn receive_address(&self, index: u32) -> Result<String, DeriveError> {
        if index >= HARDENED {
            return Err(DeriveError::HardenedIndex { index });
        }
        let child = self
            .external
            .ckd_pub(secp(), ChildNumber::Normal { index })
            .map_err(|_| DeriveError::Derivation { index })?;
        let hash = child.to_pub().wpubkey_hash();
        bitcoin::bech32::segwit::encode_v0(self.hrp, hash.as_ref())
            .map_err(|_| DeriveError::Derivation { index })
    }

    /// A short stable fingerprint of the key (hex of the BIP32 fingerprint),
    /// safe to log and to store, so a changed key is noticed.
    pub fn fingerprint(&self) -> String {
        format!("{:x}", self.account.fingerprint())
    }

    pub fn network(&self) -> Network {
        self.params.network
    }

    pub fn chain(&self) -> Chain {
        self.params.chain
    }
}

#[cfg(test)]
mod tests {
    use bitcoin::bip32::{DerivationPath, Xpriv};
    use bitcoin::hashes::Hash as _;
    use bitcoin::NetworkKind;

    use super::*;

    /// BIP39 seed of "abandon abandon ... about" with an empty passphrase.
    const SEED: &str = "5eb00bbddcf069084889a8ab9155568165f5c453ccb85e70811aaed6f6da5fc1\
                        9a5ac40b389cd370d086206dec8aa6c43daea6690f20ad3d8d48b2d2ce9e38e4";
    /// BIP84's published account 0 key for that mnemonic.
    const BIP84_ZPUB: &str =
        "zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs";

    const ZPUB: [u8; 4] = [0x04, 0xb2, 0x47, 0x46];
    const VPUB: [u8; 4] = [0x04, 0x5f, 0x1c, 0xf6];
    const LTUB: [u8; 4] = [0x01, 0x9d, 0xa4, 0x62];
    const MTUB: [u8; 4] = [0x01, 0xb2, 0x6e, 0xf6];
    const TTUB: [u8; 4] = [0x04, 0x36, 0xf6, 0xe1];
    const ZPRV: [u8; 4] = [0x04, 0xb2, 0x43, 0x0c];

    fn seed() -> Vec<u8> {
        (0..SEED.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&SEED[i..i + 2], 16).unwrap())
            .collect()
    }

    fn master(kind: NetworkKind) -> Xpriv {
        Xpriv::new_master(kind, &seed()).unwrap()
    }

    fn xpriv_at(kind: NetworkKind, path: &str) -> Xpriv {
        let path: DerivationPath = path.parse().unwrap();
        master(kind).derive_priv(&Secp256k1::new(), &path).unwrap()
    }

    fn xpub_at(kind: NetworkKind, path: &str) -> Xpub {
        Xpub::from_priv(&Secp256k1::new(), &xpriv_at(kind, path))
    }

    /// `key` serialized with other version bytes.
    fn with_version(encoded: [u8; 78], version: [u8; 4]) -> String {
        let mut data = encoded;
        data[..4].copy_from_slice(&version);
        bitcoin::base58::encode_check(&data)
    }

    /// The P2WPKH address at `path`, computed from the private key side.
    fn address_from_xpriv(kind: NetworkKind, path: &str, hrp: &str) -> String {
        let xpub = xpub_at(kind, path);
        let hash = bitcoin::hashes::hash160::Hash::hash(&xpub.public_key.serialize());
        bitcoin::bech32::segwit::encode_v0(Hrp::parse(hrp).unwrap(), hash.as_byte_array()).unwrap()
    }

    #[test]
    fn bip84_published_vectors() {
        let key = AccountKey::parse(Network::Bitcoin, Chain::Main, BIP84_ZPUB).unwrap();
        assert_eq!(key.network(), Network::Bitcoin);
        assert_eq!(key.chain(), Chain::Main);
        assert_eq!(
            key.receive_address(0).unwrap(),
            "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"
        );
        assert_eq!(
            key.receive_address(1).unwrap(),
            "bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g"
        );
    }

    #[test]
    fn the_seed_derives_the_published_zpub_and_addresses() {
        let account = xpub_at(NetworkKind::Main, "m/84'/0'/0'");
        assert_eq!(with_version(account.encode(), ZPUB), BIP84_ZPUB);
        // And the same key given as a plain xpub parses to the same addresses.
        let key = AccountKey::parse(Network::Bitcoin, Chain::Main, &account.to_string()).unwrap();
        for index in [0, 1, 7] {
            assert_eq!(
                key.receive_address(index).unwrap(),
                address_from_xpriv(NetworkKind::Main, &format!("m/84'/0'/0'/0/{index}"), "bc")
            );
        }
        assert_eq!(key.fingerprint(), format!("{:x}", account.fingerprint()));
    }

    /// Litecoin's BIP84 account (coin type 2) for the same mnemonic, given
    /// as xpub, zpub, Ltub and Mtub. The addresses are derived here from the
    /// private key side, and pinned to values computed by a separate
    /// pure-Python BIP32/bech32 implementation.
    #[test]
    fn litecoin_bip84_addresses_from_the_seed() {
        let account = xpub_at(NetworkKind::Main, "m/84'/2'/0'");
        assert_eq!(with_version(account.encode(), ZPUB), LITECOIN_ZPUB);
        assert_eq!(with_version(account.encode(), LTUB), LITECOIN_LTUB);
        let expected: Vec<String> = (0..3)
            .map(|i| address_from_xpriv(NetworkKind::Main, &format!("m/84'/2'/0'/0/{i}"), "ltc"))
            .collect();
        assert_eq!(expected, LITECOIN_ADDRESSES);
        for version in [XPUB, ZPUB, LTUB, MTUB] {
            let text = with_version(account.encode(), version);
            let key = AccountKey::parse(Network::Litecoin, Chain::Main, &text).unwrap();
            for (i, want) in expected.iter().enumerate() {
                let got = key.receive_address(i as u32).unwrap();
                assert!(got.starts_with("ltc1q"), "{got}");
                assert_eq!(&got, want);
            }
        }
    }

    const LITECOIN_ZPUB: &str =
        "zpub6rPo5mF47z5coVm5rvWv7fv181awb7Vckn5Cf3xQXBVKu18kuBHDhNi1Jrb4br6vVD3ZbrnXemEsWJoR18mZwkUdzwD8TQnHDUCGxqZ6swA";
    const LITECOIN_LTUB: &str =
        "Ltub2ZANw57Fi4JfMGenngwfZMqDrsccTf2m3qEjvLuk8faGXB973sSqGttAdKBvGSCLG9DXh2yxaUB9qpwQUe2zCCtrZPhjxGuMAWqL6F7Xrpd";
    const LITECOIN_ADDRESSES: [&str; 3] = [
        "ltc1qjmxnz78nmc8nq77wuxh25n2es7rzm5c2rkk4wh",
        "ltc1qwlezpr3890hcp6vva9twqh27mr6edadreqvhnn",
        "ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s",
    ];

    /// m/84'/1'/0'/0/0 of the same mnemonic under each test-chain prefix
    /// (computed by the same separate Python implementation).
    const TEST_CHAIN_FIRST_ADDRESSES: [(&str, &str); 4] = [
        ("tb", "tb1q6rz28mcfaxtmd6v789l9rrlrusdprr9pqcpvkl"),
        ("bcrt", "bcrt1q6rz28mcfaxtmd6v789l9rrlrusdprr9pz3cppk"),
        ("tltc", "tltc1q6rz28mcfaxtmd6v789l9rrlrusdprr9pesrjxk"),
        ("rltc", "rltc1q6rz28mcfaxtmd6v789l9rrlrusdprr9puuzgkg"),
    ];
    const BIP84_TEST_VPUB: &str =
        "vpub5Y6cjg78GGuNLsaPhmYsiw4gYX3HoQiRBiSwDaBXKUafCt9bNwWQiitDk5VZ5BVxYnQdwoTyXSs2JHRPAgjAvtbBrf8ZhDYe2jWAqvZVnsc";

    #[test]
    fn test_chain_keys_give_regtest_and_testnet_addresses() {
        let account = xpub_at(NetworkKind::Test, "m/84'/1'/0'");
        assert_eq!(with_version(account.encode(), VPUB), BIP84_TEST_VPUB);
        let cases = [
            (Network::Bitcoin, Chain::Regtest, TPUB, "bcrt"),
            (Network::Bitcoin, Chain::Regtest, VPUB, "bcrt"),
            (Network::Bitcoin, Chain::Test, VPUB, "tb"),
            (Network::Litecoin, Chain::Regtest, TPUB, "rltc"),
            (Network::Litecoin, Chain::Regtest, VPUB, "rltc"),
            (Network::Litecoin, Chain::Regtest, TTUB, "rltc"),
            (Network::Litecoin, Chain::Test, TTUB, "tltc"),
        ];
        for (network, chain, version, hrp) in cases {
            let text = with_version(account.encode(), version);
            let key = AccountKey::parse(network, chain, &text).unwrap();
            let got = key.receive_address(0).unwrap();
            assert!(got.starts_with(&format!("{hrp}1q")), "{got}");
            assert_eq!(
                got,
                address_from_xpriv(NetworkKind::Test, "m/84'/1'/0'/0/0", hrp)
            );
            let pinned = TEST_CHAIN_FIRST_ADDRESSES
                .iter()
                .find(|(h, _)| *h == hrp)
                .unwrap()
                .1;
            assert_eq!(got, pinned);
            // And the address is one the address module reads back on that chain.
            let (parsed_chain, _) = crate::address::script_for_address(network, &got).unwrap();
            assert_eq!(parsed_chain, chain);
        }
    }

    #[test]
    fn keys_of_another_chain_are_rejected() {
        let main = xpub_at(NetworkKind::Main, "m/84'/0'/0'");
        let test = xpub_at(NetworkKind::Test, "m/84'/1'/0'");
        let e = AccountKey::parse(Network::Bitcoin, Chain::Regtest, BIP84_ZPUB).unwrap_err();
        assert_eq!(
            e,
            DeriveError::WrongVersion {
                network: Network::Bitcoin,
                chain: Chain::Regtest,
                found: "zpub".into(),
                expected: "tpub, vpub".into()
            }
        );
        let e = AccountKey::parse(Network::Bitcoin, Chain::Main, &test.to_string()).unwrap_err();
        assert!(matches!(e, DeriveError::WrongVersion { .. }), "{e}");
        // Litecoin's own versions are not Bitcoin's.
        let ltub = with_version(main.encode(), LTUB);
        let e = AccountKey::parse(Network::Bitcoin, Chain::Main, &ltub).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the bitcoin main account key is a Ltub key; expected one of xpub, zpub"
        );
        // ypub (BIP49) is not a BIP84 key.
        let ypub = with_version(main.encode(), [0x04, 0x9d, 0x7c, 0xb2]);
        assert!(matches!(
            AccountKey::parse(Network::Bitcoin, Chain::Main, &ypub),
            Err(DeriveError::WrongVersion { .. })
        ));
    }

    #[test]
    fn keys_not_at_account_depth_are_rejected() {
        let master = Xpub::from_priv(&Secp256k1::new(), &master(NetworkKind::Main));
        assert_eq!(master.depth, 0);
        let e = AccountKey::parse(Network::Bitcoin, Chain::Main, &master.to_string()).unwrap_err();
        assert_eq!(
            e,
            DeriveError::WrongDepth {
                network: Network::Bitcoin,
                chain: Chain::Main,
                depth: 0
            }
        );
        assert!(e.to_string().contains("depth 0"), "{e}");
        let receive_chain = xpub_at(NetworkKind::Main, "m/84'/0'/0'/0");
        let e = AccountKey::parse(Network::Bitcoin, Chain::Main, &receive_chain.to_string())
            .unwrap_err();
        assert!(matches!(e, DeriveError::WrongDepth { depth: 4, .. }), "{e}");
        let unhardened = xpub_at(NetworkKind::Main, "m/84'/0'/0");
        let e =
            AccountKey::parse(Network::Bitcoin, Chain::Main, &unhardened.to_string()).unwrap_err();
        assert!(
            matches!(e, DeriveError::NotHardened { child: 0, .. }),
            "{e}"
        );
    }

    #[test]
    fn private_keys_and_garbage_are_rejected_without_echoing_them() {
        let xprv = xpriv_at(NetworkKind::Main, "m/84'/0'/0'");
        let zprv = with_version(xprv.encode(), ZPRV);
        let mut truncated = BIP84_ZPUB.to_owned();
        truncated.pop();
        let cases = [
            xprv.to_string(),
            zprv.clone(),
            truncated,
            "hello".to_owned(),
            String::new(),
        ];
        for text in &cases {
            let e = AccountKey::parse(Network::Bitcoin, Chain::Main, text).unwrap_err();
            let shown = format!("{e} {e:?}");
            if text.len() > 8 {
                assert!(!shown.contains(&text[4..12]), "{shown}");
            }
        }
        let e = AccountKey::parse(Network::Bitcoin, Chain::Main, &zprv).unwrap_err();
        assert!(
            matches!(e, DeriveError::PrivateKey { kind: "zprv", .. }),
            "{e}"
        );
        assert!(e.to_string().contains("private key"), "{e}");
    }

    #[test]
    fn hardened_indexes_are_rejected() {
        let key = AccountKey::parse(Network::Bitcoin, Chain::Main, BIP84_ZPUB).unwrap();
        assert!(key.receive_address(HARDENED - 1).is_ok());
        for index in [HARDENED, u32::MAX] {
            let e = key.receive_address(index).unwrap_err();
            assert_eq!(e, DeriveError::HardenedIndex { index });
            assert!(e.to_string().contains("hardened"), "{e}");
        }
    }

    #[test]
    fn debug_shows_no_key_material() {
        let key = AccountKey::parse(Network::Bitcoin, Chain::Main, BIP84_ZPUB).unwrap();
        let debug = format!("{key:?}");
        let fingerprint = key.fingerprint();
        assert_eq!(fingerprint.len(), 8);
        assert!(fingerprint
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(debug.contains(&fingerprint), "{debug}");
        assert!(
            debug.contains("Bitcoin") && debug.contains("Main"),
            "{debug}"
        );
        assert!(!debug.contains(&BIP84_ZPUB[4..20]), "{debug}");
        let account = xpub_at(NetworkKind::Main, "m/84'/0'/0'");
        let pubkey: String = account
            .public_key
            .serialize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(!debug.contains(&pubkey[2..20]), "{debug}");
        assert!(
            !debug.contains("chain_code") && !debug.contains("public_key"),
            "{debug}"
        );
    }

    #[test]
    fn fingerprint_is_stable_and_tells_keys_apart() {
        let a = AccountKey::parse(Network::Bitcoin, Chain::Main, BIP84_ZPUB).unwrap();
        let xpub = xpub_at(NetworkKind::Main, "m/84'/0'/0'").to_string();
        let same = AccountKey::parse(Network::Bitcoin, Chain::Main, &xpub).unwrap();
        assert_eq!(a.fingerprint(), same.fingerprint());
        let other = xpub_at(NetworkKind::Main, "m/84'/0'/1'").to_string();
        let other = AccountKey::parse(Network::Bitcoin, Chain::Main, &other).unwrap();
        assert_ne!(a.fingerprint(), other.fingerprint());
    }

    #[test]
    fn unsupported_networks_are_rejected() {
        let e = AccountKey::parse(Network::Ethereum, Chain::Main, BIP84_ZPUB).unwrap_err();
        assert_eq!(
            e,
            DeriveError::UnsupportedNetwork {
                network: Network::Ethereum
            }
        );
    }
}

//! BIP44 receive addresses for Ethereum-family chains
//! (m/44'/coin'/account'/0/index) from an account-level extended public
//! key, so paywatch can hand out fresh addresses without ever holding a
//! private key. Ethereum (coin type 60) is the default; other chains whose
//! addresses are Ethereum key hashes, such as Tron (195), pass their own
//! [`Bip44Coin`] and encode the 20-byte key hash themselves.

use std::fmt;
use std::sync::OnceLock;

use alloy_primitives::{keccak256, Address};
use bitcoin::base58;
use bitcoin::bip32::{ChildNumber, Xpub};
use bitcoin::secp256k1::{Secp256k1, VerifyOnly};

/// A BIP44 coin whose addresses are keccak256 key hashes: its name, for
/// error messages, and its SLIP-44 coin type, the `coin'` of
/// m/44'/coin'/account'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bip44Coin {
    /// The chain's name as error messages show it, e.g. "Ethereum".
    pub chain: &'static str,
    /// The SLIP-44 coin type, e.g. 60 for Ethereum.
    pub coin_type: u32,
}

/// Ethereum, m/44'/60'/account'.
pub const ETHEREUM: Bip44Coin = Bip44Coin {
    chain: "Ethereum",
    coin_type: 60,
};

/// BIP32 version bytes bitcoin's decoder understands; wallets export the
/// account key as an xpub, and either derives the same addresses.
const XPUB: [u8; 4] = [0x04, 0x88, 0xb2, 0x1e];
const TPUB: [u8; 4] = [0x04, 0x35, 0x87, 0xcf];
/// Length of a serialized BIP32 extended key.
const EXTENDED_KEY_LEN: usize = 78;
/// Depth of an account node, m/44'/coin'/account'.
const ACCOUNT_DEPTH: u8 = 3;
/// First hardened child index.
const HARDENED: u32 = 1 << 31;
/// How much of a key is echoed in an error message.
const KEY_PREFIX_CHARS: usize = 8;

/// Names of other BIP32/SLIP-132 version bytes, for error messages.
/// `true` marks private key versions, so a pasted private key is called one.
const OTHER_VERSIONS: &[([u8; 4], &str, bool)] = &[
    ([0x04, 0x9d, 0x7c, 0xb2], "ypub", false),
    ([0x04, 0xb2, 0x47, 0x46], "zpub", false),
    ([0x04, 0x4a, 0x52, 0x62], "upub", false),
    ([0x04, 0x5f, 0x1c, 0xf6], "vpub", false),
    ([0x01, 0x9d, 0xa4, 0x62], "Ltub", false),
    ([0x01, 0xb2, 0x6e, 0xf6], "Mtub", false),
    ([0x04, 0x88, 0xad, 0xe4], "xprv", true),
    ([0x04, 0x35, 0x83, 0x94], "tprv", true),
    ([0x04, 0x9d, 0x78, 0x78], "yprv", true),
    ([0x04, 0xb2, 0x43, 0x0c], "zprv", true),
    ([0x04, 0x4a, 0x4e, 0x28], "uprv", true),
    ([0x04, 0x5f, 0x18, 0xbc], "vprv", true),
    ([0x01, 0x9d, 0x9c, 0xfe], "Ltpv", true),
    ([0x01, 0xb2, 0x67, 0x92], "Mtpv", true),
];

fn describe_version(version: [u8; 4]) -> (String, bool) {
    match OTHER_VERSIONS.iter().find(|(v, _, _)| *v == version) {
        Some(&(_, name, private)) => (name.to_owned(), private),
        None => (
            format!(
                "unknown version 0x{}",
                version
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
            false,
        ),
    }
}

/// The first few characters of a key, safe to show in an error message.
fn key_prefix(text: &str) -> String {
    let prefix: String = text.chars().take(KEY_PREFIX_CHARS).collect();
    if text.chars().count() > KEY_PREFIX_CHARS {
        format!("{prefix}…")
    } else {
        prefix
    }
}

fn secp() -> &'static Secp256k1<VerifyOnly> {
    static SECP: OnceLock<Secp256k1<VerifyOnly>> = OnceLock::new();
    SECP.get_or_init(Secp256k1::verification_only)
}

/// Why an account key was rejected or an address could not be derived.
/// Shows at most the first 8 characters of the key. Errors about the key
/// carry the [`Bip44Coin`] it was parsed for, to name the chain and path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveError {
    #[error(
        "the {chain} account key is empty; expected an xpub of m/44'/{coin_type}'/account'",
        chain = .coin.chain,
        coin_type = .coin.coin_type
    )]
    Empty { coin: Bip44Coin },
    #[error(
        "the {chain} account key {key} is not base58: {found:?} is not a base58 character \
         (mistyped?)",
        chain = .coin.chain
    )]
    Base58Character {
        coin: Bip44Coin,
        key: String,
        found: char,
    },
    #[error(
        "the {chain} account key {key} has a bad base58check checksum (mistyped or truncated?)",
        chain = .coin.chain
    )]
    Checksum { coin: Bip44Coin, key: String },
    #[error(
        "the {chain} account key {key} decodes to {length} bytes, expected 78 (truncated?)",
        chain = .coin.chain
    )]
    Length {
        coin: Bip44Coin,
        key: String,
        length: usize,
    },
    #[error(
        "the {chain} account key {key} is an extended private key ({kind}); give the account's \
         extended public key (xpub) instead, and treat this private key as exposed",
        chain = .coin.chain
    )]
    PrivateKey {
        coin: Bip44Coin,
        key: String,
        kind: String,
    },
    #[error(
        "the {chain} account key {key} is a {found} key; expected an xpub or tpub",
        chain = .coin.chain
    )]
    WrongVersion {
        coin: Bip44Coin,
        key: String,
        found: String,
    },
    #[error(
        "the {chain} account key {key} holds an invalid public key",
        chain = .coin.chain
    )]
    InvalidKey { coin: Bip44Coin, key: String },
    #[error(
        "the {chain} account key {key} has depth {depth}; expected depth 3, the account-level \
         key of m/44'/{coin_type}'/account'",
        chain = .coin.chain,
        coin_type = .coin.coin_type
    )]
    WrongDepth {
        coin: Bip44Coin,
        key: String,
        depth: u8,
    },
    #[error(
        "the {chain} account key {key} is not a hardened account node (its child number is \
         {child}, expected account' of m/44'/{coin_type}'/account')",
        chain = .coin.chain,
        coin_type = .coin.coin_type
    )]
    NotHardened {
        coin: Bip44Coin,
        key: String,
        child: u32,
    },
    #[error(
        "address index {index} is a hardened index; receive addresses need an index below 2147483648"
    )]
    HardenedIndex { index: u32 },
    #[error("key derivation failed at address index {index}; skip to the next index")]
    Derivation { index: u32 },
}

/// An account-level extended public key, the m/44'/coin'/account' node of
/// a BIP44 wallet (Ethereum's unless parsed with [`AccountKey::parse_for`]),
/// from which receive addresses are derived.
#[derive(Clone)]
pub struct AccountKey {
    /// The account node m/44'/coin'/account'.
    account: Xpub,
    /// Its external (receive) chain m/44'/coin'/account'/0.
    external: Xpub,
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountKey")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl AccountKey {
    /// Parses an Ethereum account-level extended public key
    /// (m/44'/60'/account'); see [`AccountKey::parse_for`].
    pub fn parse(s: &str) -> Result<AccountKey, DeriveError> {
        Self::parse_for(s, ETHEREUM)
    }

    /// Parses an account-level extended public key (m/44'/coin'/account')
    /// of `coin`, given with xpub (mainnet) or tpub (testnet) version bytes;
    /// both derive the same addresses. The key must have depth 3 and a
    /// hardened child number. Surrounding whitespace is ignored. Errors
    /// name `coin`'s chain and coin type.
    pub fn parse_for(s: &str, coin: Bip44Coin) -> Result<AccountKey, DeriveError> {
        let text = s.trim();
        if text.is_empty() {
            return Err(DeriveError::Empty { coin });
        }
        let key = || key_prefix(text);

        let mut data = base58::decode_check(text).map_err(|e| match e {
            base58::Error::Decode(c) => DeriveError::Base58Character {
                coin,
                key: key(),
                found: char::from(c.invalid_base58_character()),
            },
            base58::Error::TooShort(t) => DeriveError::Length {
                coin,
                key: key(),
                length: t.invalid_base58_length(),
            },
            _ => DeriveError::Checksum { coin, key: key() },
        })?;
        if data.len() != EXTENDED_KEY_LEN {
            return Err(DeriveError::Length {
                coin,
                key: key(),
                length: data.len(),
            });
        }
        let mut version = [0u8; 4];
        version.copy_from_slice(&data[..4]);
        if version == TPUB {
            // Present it as an xpub: the network byte plays no part in
            // key-hash addresses.
            data[..4].copy_from_slice(&XPUB);
        } else if version != XPUB {
            let (found, private) = describe_version(version);
            return Err(if private {
                DeriveError::PrivateKey {
                    coin,
                    key: key(),
                    kind: found,
                }
            } else {
                DeriveError::WrongVersion {
                    coin,
                    key: key(),
                    found,
                }
            });
        }
        let invalid = || DeriveError::InvalidKey { coin, key: key() };
        let account = Xpub::decode(&data).map_err(|_| invalid())?;
        if account.depth != ACCOUNT_DEPTH {
            return Err(DeriveError::WrongDepth {
                coin,
                key: key(),
                depth: account.depth,
            });
        }
        if !account.child_number.is_hardened() {
            return Err(DeriveError::NotHardened {
                coin,
                key: key(),
                child: u32::from(account.child_number),
            });
        }
        let external = account
            .ckd_pub(secp(), ChildNumber::Normal { index: 0 })
            .map_err(|_| invalid())?;
        Ok(AccountKey { account, external })
    }

    /// The key hash of the receive address at m/44'/coin'/account'/0/index:
    /// keccak256 of the uncompressed public key (without its 0x04 prefix),
    /// last 20 bytes. This is the whole Ethereum address, and the body of
    /// a Tron one.
    pub fn receive_key_hash(&self, index: u32) -> Result<[u8; 20], DeriveError> {
        if index >= HARDENED {
            return Err(DeriveError::HardenedIndex { index });
        }
        let child = self
            .external
            .ckd_pub(secp(), ChildNumber::Normal { index })
            .map_err(|_| DeriveError::Derivation { index })?;
        let uncompressed = child.public_key.serialize_uncompressed();
        let hash = keccak256(&uncompressed[1..]);
        let mut body = [0u8; 20];
        body.copy_from_slice(&hash[12..]);
        Ok(body)
    }

    /// The Ethereum receive address at m/44'/coin'/account'/0/index, the
    /// [`AccountKey::receive_key_hash`] as an [`Address`].
    pub fn receive_address(&self, index: u32) -> Result<Address, DeriveError> {
        self.receive_key_hash(index).map(Address::from)
    }

    /// [`AccountKey::receive_address`] in its EIP-55 checksummed spelling.
    pub fn receive_address_checksummed(&self, index: u32) -> Result<String, DeriveError> {
        self.receive_address(index)
            .map(|a| crate::address::checksummed(&a))
    }

    /// A short stable fingerprint of the key (hex of the BIP32 fingerprint),
    /// safe to log and to store, so a changed key is noticed.
    pub fn fingerprint(&self) -> String {
        format!("{:x}", self.account.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use bitcoin::bip32::{DerivationPath, Xpriv};
    use bitcoin::secp256k1::All;
    use bitcoin::NetworkKind;

    use super::*;

    /// BIP39 seed of the Hardhat/anvil mnemonic "test test test test test
    /// test test test test test test junk" with an empty passphrase
    /// (PBKDF2-HMAC-SHA512, salt "mnemonic", 2048 rounds).
    const ANVIL_SEED: &str = "9dfc3c64c2f8bede1533b6a79f8570e5943e0b8fd1cf77107adf7b72cef42185\
                              d564a3aee24cab43f80e3c4538087d70fc824eabbad596a23c97b6ee8322ccc0";

    /// The account key m/44'/60'/0' of the anvil mnemonic.
    const ANVIL_ACCOUNT_XPUB: &str =
        "xpub6Ce9NcJvTk36xtLSrJLZqE7wtgA5deCeYs7rSQtreh4cj6ByPtrg9sD7V2FNFLPnf8heNP3FGkeV9qwfzvZNSd54JoNXVsXFYSYwHsnJxqP";

    /// anvil's default accounts, m/44'/60'/0'/0/i.
    const ANVIL_ADDRESSES: [&str; 5] = [
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    ];

    fn seed() -> Vec<u8> {
        (0..ANVIL_SEED.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&ANVIL_SEED[i..i + 2], 16).unwrap())
            .collect()
    }

    fn ctx() -> Secp256k1<All> {
        Secp256k1::new()
    }

    fn xpriv_at(kind: NetworkKind, path: &str) -> Xpriv {
        let path: DerivationPath = path.parse().unwrap();
        Xpriv::new_master(kind, &seed())
            .unwrap()
            .derive_priv(&ctx(), &path)
            .unwrap()
    }

    fn xpub_at(kind: NetworkKind, path: &str) -> Xpub {
        Xpub::from_priv(&ctx(), &xpriv_at(kind, path))
    }

    fn with_version(encoded: [u8; 78], version: [u8; 4]) -> String {
        let mut data = encoded;
        data[..4].copy_from_slice(&version);
        base58::encode_check(&data)
    }

    #[test]
    fn the_anvil_seed_gives_the_pinned_account_xpub() {
        let account = xpub_at(NetworkKind::Main, "m/44'/60'/0'").to_string();
        println!("anvil account xpub m/44'/60'/0': {account}");
        assert_eq!(account, ANVIL_ACCOUNT_XPUB);
    }

    #[test]
    fn anvil_default_accounts() {
        let key = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        for (i, want) in ANVIL_ADDRESSES.iter().enumerate() {
            let index = u32::try_from(i).unwrap();
            assert_eq!(key.receive_address_checksummed(index).unwrap(), *want);
            assert_eq!(
                key.receive_address(index).unwrap(),
                crate::address::parse_address(want).unwrap()
            );
        }
    }

    #[test]
    fn addresses_match_the_private_key_side() {
        let key = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        for index in [0u32, 5, 1000, HARDENED - 1] {
            let xpriv = xpriv_at(NetworkKind::Main, &format!("m/44'/60'/0'/0/{index}"));
            let public = xpriv.private_key.public_key(&ctx());
            let expected = Address::from_raw_public_key(&public.serialize_uncompressed()[1..]);
            assert_eq!(key.receive_address(index).unwrap(), expected, "{index}");
        }
    }

    #[test]
    fn tpub_and_whitespace_derive_the_same_addresses() {
        let test = xpub_at(NetworkKind::Test, "m/44'/60'/0'").to_string();
        assert!(test.starts_with("tpub"), "{test}");
        let key = AccountKey::parse(&format!("  {test}\n")).unwrap();
        assert_eq!(
            key.receive_address_checksummed(0).unwrap(),
            ANVIL_ADDRESSES[0]
        );
        assert_eq!(
            key.receive_address_checksummed(4).unwrap(),
            ANVIL_ADDRESSES[4]
        );
        let main = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        assert_eq!(key.fingerprint(), main.fingerprint());
    }

    #[test]
    fn another_account_gives_other_addresses() {
        let other = xpub_at(NetworkKind::Main, "m/44'/60'/1'").to_string();
        let key = AccountKey::parse(&other).unwrap();
        let got = key.receive_address_checksummed(0).unwrap();
        assert!(!ANVIL_ADDRESSES.contains(&got.as_str()), "{got}");
    }

    #[test]
    fn keys_not_at_account_depth_are_rejected() {
        let chain = xpub_at(NetworkKind::Main, "m/44'/60'/0'/0").to_string();
        let e = AccountKey::parse(&chain).unwrap_err();
        assert!(
            matches!(e, DeriveError::WrongDepth { depth: 4, .. }),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("depth 4") && msg.contains("expected depth 3"),
            "{msg}"
        );
        assert!(
            msg.contains(&chain[..8]) && !msg.contains(&chain[..9]),
            "{msg}"
        );

        let master = Xpub::from_priv(
            &ctx(),
            &Xpriv::new_master(NetworkKind::Main, &seed()).unwrap(),
        );
        let e = AccountKey::parse(&master.to_string()).unwrap_err();
        assert!(
            matches!(e, DeriveError::WrongDepth { depth: 0, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("depth 0"), "{e}");

        let coin = xpub_at(NetworkKind::Main, "m/44'/60'").to_string();
        let e = AccountKey::parse(&coin).unwrap_err();
        assert!(
            matches!(e, DeriveError::WrongDepth { depth: 2, .. }),
            "{e:?}"
        );

        let unhardened = xpub_at(NetworkKind::Main, "m/44'/60'/0").to_string();
        let e = AccountKey::parse(&unhardened).unwrap_err();
        assert!(
            matches!(e, DeriveError::NotHardened { child: 0, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("hardened"), "{e}");
    }

    #[test]
    fn a_corrupted_checksum_is_rejected() {
        // Change one character: the base58check checksum no longer matches.
        let mut corrupted: Vec<char> = ANVIL_ACCOUNT_XPUB.chars().collect();
        let last = corrupted.len() - 1;
        corrupted[last] = if corrupted[last] == 'A' { 'B' } else { 'A' };
        let corrupted: String = corrupted.into_iter().collect();
        let e = AccountKey::parse(&corrupted).unwrap_err();
        assert_eq!(
            e,
            DeriveError::Checksum {
                coin: ETHEREUM,
                key: format!("{}…", &ANVIL_ACCOUNT_XPUB[..8])
            }
        );
        assert!(e.to_string().contains("checksum"), "{e}");

        let mut middle = ANVIL_ACCOUNT_XPUB.to_owned();
        let c = if &middle[50..51] == "z" { "y" } else { "z" };
        middle.replace_range(50..51, c);
        assert!(matches!(
            AccountKey::parse(&middle),
            Err(DeriveError::Checksum { .. })
        ));
    }

    #[test]
    fn bad_base58_truncation_and_wrong_versions_are_named() {
        let e = AccountKey::parse("xpub6C0O").unwrap_err();
        assert_eq!(
            e,
            DeriveError::Base58Character {
                coin: ETHEREUM,
                key: "xpub6C0O".into(),
                found: '0'
            }
        );
        assert!(e.to_string().contains("not a base58 character"), "{e}");

        let e = AccountKey::parse("xpub").unwrap_err();
        assert!(matches!(e, DeriveError::Length { length: 3, .. }), "{e:?}");

        let truncated = &ANVIL_ACCOUNT_XPUB[..ANVIL_ACCOUNT_XPUB.len() - 1];
        assert!(matches!(
            AccountKey::parse(truncated),
            Err(DeriveError::Checksum { .. })
        ));
        let short = base58::encode_check(&[0x04, 0x88, 0xb2, 0x1e, 0, 0]);
        let e = AccountKey::parse(&short).unwrap_err();
        assert!(matches!(e, DeriveError::Length { length: 6, .. }), "{e:?}");
        assert!(e.to_string().contains("expected 78"), "{e}");

        assert_eq!(
            AccountKey::parse("  ").unwrap_err(),
            DeriveError::Empty { coin: ETHEREUM }
        );

        let account = xpub_at(NetworkKind::Main, "m/44'/60'/0'");
        let zpub = with_version(account.encode(), [0x04, 0xb2, 0x47, 0x46]);
        let e = AccountKey::parse(&zpub).unwrap_err();
        assert!(
            matches!(&e, DeriveError::WrongVersion { found, .. } if found == "zpub"),
            "{e:?}"
        );
        let odd = with_version(account.encode(), [1, 2, 3, 4]);
        let e = AccountKey::parse(&odd).unwrap_err();
        assert!(e.to_string().contains("unknown version 0x01020304"), "{e}");
    }

    #[test]
    fn private_keys_are_rejected_without_echoing_them() {
        let xprv = xpriv_at(NetworkKind::Main, "m/44'/60'/0'").to_string();
        let tprv = xpriv_at(NetworkKind::Test, "m/44'/60'/0'").to_string();
        for (text, kind) in [(&xprv, "xprv"), (&tprv, "tprv")] {
            let e = AccountKey::parse(text).unwrap_err();
            assert!(
                matches!(&e, DeriveError::PrivateKey { kind: k, .. } if k == kind),
                "{e:?}"
            );
            let shown = format!("{e} {e:?}");
            assert!(shown.contains("private key"), "{shown}");
            assert!(!shown.contains(&text[..9]), "{shown}");
        }
    }

    #[test]
    fn hardened_indexes_are_rejected() {
        let key = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        assert!(key.receive_address(HARDENED - 1).is_ok());
        for index in [HARDENED, u32::MAX] {
            let e = key.receive_address(index).unwrap_err();
            assert_eq!(e, DeriveError::HardenedIndex { index });
            assert!(e.to_string().contains("hardened"), "{e}");
            assert_eq!(
                key.receive_address_checksummed(index).unwrap_err(),
                DeriveError::HardenedIndex { index }
            );
        }
    }

    #[test]
    fn debug_is_short() {
        let key = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.len() < 60, "{debug}");
        assert!(debug.contains(&key.fingerprint()), "{debug}");
        assert!(!debug.contains(&ANVIL_ACCOUNT_XPUB[4..20]), "{debug}");
    }

    #[test]
    fn key_hashes_are_the_addresses_bytes() {
        let key = AccountKey::parse(ANVIL_ACCOUNT_XPUB).unwrap();
        for index in [0u32, 3, HARDENED - 1] {
            let hash = key.receive_key_hash(index).unwrap();
            assert_eq!(Address::from(hash), key.receive_address(index).unwrap());
        }
        assert_eq!(
            key.receive_key_hash(HARDENED).unwrap_err(),
            DeriveError::HardenedIndex { index: HARDENED }
        );
    }

    #[test]
    fn errors_name_ethereum_and_coin_type_60() {
        let unhardened = xpub_at(NetworkKind::Main, "m/44'/60'/0").to_string();
        let chain = xpub_at(NetworkKind::Main, "m/44'/60'/0'/0").to_string();
        for text in ["", "xpub6C0O", unhardened.as_str(), chain.as_str()] {
            let msg = AccountKey::parse(text).unwrap_err().to_string();
            assert!(msg.starts_with("the Ethereum account key"), "{msg}");
        }
        let msg = AccountKey::parse(&chain).unwrap_err().to_string();
        assert!(msg.contains("key of m/44'/60'/account'"), "{msg}");
        assert_eq!(
            AccountKey::parse("").unwrap_err().to_string(),
            "the Ethereum account key is empty; expected an xpub of m/44'/60'/account'"
        );
    }

    #[test]
    fn parse_for_names_the_given_coin() {
        const OTHER: Bip44Coin = Bip44Coin {
            chain: "Other",
            coin_type: 9,
        };
        let e = AccountKey::parse_for(" ", OTHER).unwrap_err();
        assert_eq!(e, DeriveError::Empty { coin: OTHER });
        assert_eq!(
            e.to_string(),
            "the Other account key is empty; expected an xpub of m/44'/9'/account'"
        );
        let unhardened = xpub_at(NetworkKind::Main, "m/44'/60'/0").to_string();
        let msg = AccountKey::parse_for(&unhardened, OTHER)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("the Other account key") && msg.contains("m/44'/9'/account')"),
            "{msg}"
        );
        // The coin only names errors: any account node derives the same.
        let key = AccountKey::parse_for(ANVIL_ACCOUNT_XPUB, OTHER).unwrap();
        assert_eq!(
            key.receive_address_checksummed(0).unwrap(),
            ANVIL_ADDRESSES[0]
        );
    }
}

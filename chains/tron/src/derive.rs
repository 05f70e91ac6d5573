//! BIP44 Tron receive addresses (m/44'/195'/account'/0/index) from an
//! account-level extended public key, so paywatch can hand out fresh
//! addresses without ever holding a private key.

use std::fmt;
use std::sync::OnceLock;

use alloy_primitives::keccak256;
use bitcoin::base58;
use bitcoin::bip32::{ChildNumber, Xpub};
use bitcoin::secp256k1::{Secp256k1, VerifyOnly};

/// BIP32 version bytes bitcoin's decoder understands; Tron wallets
/// export the account key as an xpub, and either derives the same addresses.
const XPUB: [u8; 4] = [0x04, 0x88, 0xb2, 0x1e];
const TPUB: [u8; 4] = [0x04, 0x35, 0x87, 0xcf];
/// Length of a serialized BIP32 extended key.
const EXTENDED_KEY_LEN: usize = 78;
/// Depth of an account node, m/44'/195'/account'.
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
/// Shows at most the first 8 characters of the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeriveError {
    #[error("the Tron account key is empty; expected an xpub of m/44'/195'/account'")]
    Empty,
    #[error(
        "the Tron account key {key} is not base58: {found:?} is not a base58 character \
         (mistyped?)"
    )]
    Base58Character { key: String, found: char },
    #[error("the Tron account key {key} has a bad base58check checksum (mistyped or truncated?)")]
    Checksum { key: String },
    #[error("the Tron account key {key} decodes to {length} bytes, expected 78 (truncated?)")]
    Length { key: String, length: usize },
    #[error(
        "the Tron account key {key} is an extended private key ({kind}); give the account's \
         extended public key (xpub) instead, and treat this private key as exposed"
    )]
    PrivateKey { key: String, kind: String },
    #[error("the Tron account key {key} is a {found} key; expected an xpub or tpub")]
    WrongVersion { key: String, found: String },
    #[error("the Tron account key {key} holds an invalid public key")]
    InvalidKey { key: String },
    #[error(
        "the Tron account key {key} has depth {depth}; expected depth 3, the account-level \
         key of m/44'/195'/account'"
    )]
    WrongDepth { key: String, depth: u8 },
    #[error(
        "the Tron account key {key} is not a hardened account node (its child number is \
         {child}, expected account' of m/44'/195'/account')"
    )]
    NotHardened { key: String, child: u32 },
    #[error(
        "address index {index} is a hardened index; receive addresses need an index below 2147483648"
    )]
    HardenedIndex { index: u32 },
    #[error("key derivation failed at address index {index}; skip to the next index")]
    Derivation { index: u32 },
}

/// An account-level extended public key, the m/44'/195'/account' node of a
/// BIP44 Tron wallet, from which receive addresses are derived.
#[derive(Clone)]
pub struct AccountKey {
    /// The account node m/44'/195'/account'.
    account: Xpub,
    /// Its external (receive) chain m/44'/195'/account'/0.
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
    /// Parses an account-level extended public key (m/44'/195'/account'),
    /// given with xpub (mainnet) or tpub (testnet) version bytes; both
    /// derive the same Tron addresses. The key must have depth 3 and a
    /// hardened child number. Surrounding whitespace is ignored.
    pub fn parse(s: &str) -> Result<AccountKey, DeriveError> {
        let text = s.trim();
        if text.is_empty() {
            return Err(DeriveError::Empty);
        }
        let key = || key_prefix(text);

        let mut data = base58::decode_check(text).map_err(|e| match e {
            base58::Error::Decode(c) => DeriveError::Base58Character {
                key: key(),
                found: char::from(c.invalid_base58_character()),
            },
            base58::Error::TooShort(t) => DeriveError::Length {
                key: key(),
                length: t.invalid_base58_length(),
            },
            _ => DeriveError::Checksum { key: key() },
        })?;
        if data.len() != EXTENDED_KEY_LEN {
            return Err(DeriveError::Length {
                key: key(),
                length: data.len(),
            });
        }
        let mut version = [0u8; 4];
        version.copy_from_slice(&data[..4]);
        if version == TPUB {
            // Present it as an xpub: the network byte plays no part in
            // Tron addresses.
            data[..4].copy_from_slice(&XPUB);
        } else if version != XPUB {
            let (found, private) = describe_version(version);
            return Err(if private {
                DeriveError::PrivateKey {
                    key: key(),
                    kind: found,
                }
            } else {
                DeriveError::WrongVersion { key: key(), found }
            });
        }
        let account = Xpub::decode(&data).map_err(|_| DeriveError::InvalidKey { key: key() })?;
        if account.depth != ACCOUNT_DEPTH {
            return Err(DeriveError::WrongDepth {
                key: key(),
                depth: account.depth,
            });
        }
        if !account.child_number.is_hardened() {
            return Err(DeriveError::NotHardened {
                key: key(),
                child: u32::from(account.child_number),
            });
        }
        let external = account
            .ckd_pub(secp(), ChildNumber::Normal { index: 0 })
            .map_err(|_| DeriveError::InvalidKey { key: key() })?;
        Ok(AccountKey { account, external })
    }

    /// The body of the receive address at m/44'/195'/account'/0/index:
    /// keccak256 of the uncompressed public key (without its 0x04 prefix),
    /// last 20 bytes, as for Ethereum.
    pub fn receive_body(&self, index: u32) -> Result<[u8; 20], DeriveError> {
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

    /// The receive address at m/44'/195'/account'/0/index as a T-address.
    pub fn receive_address(&self, index: u32) -> Result<String, DeriveError> {
        self.receive_body(index)
            .map(|body| crate::address::encode_address(&body))
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
    use crate::address::parse_address;

    /// BIP39 seed of the standard test mnemonic "abandon abandon abandon
    /// abandon abandon abandon abandon abandon abandon abandon abandon
    /// about" with an empty passphrase (PBKDF2-HMAC-SHA512, salt
    /// "mnemonic", 2048 rounds).
    const ABANDON_SEED: &str = "5eb00bbddcf069084889a8ab9155568165f5c453ccb85e70811aaed6f6da5fc1\
                                9a5ac40b389cd370d086206dec8aa6c43daea6690f20ad3d8d48b2d2ce9e38e4";

    /// m/44'/195'/0'/0/0 of that mnemonic, as Tron wallets (TronLink,
    /// Trust, Ledger) show it.
    const ABANDON_FIRST_ADDRESS: &str = "TUEZSdKsoDHQMeZwihtdoBiN46zxhGWYdH";

    const ABANDON_MNEMONIC: &str = "abandon abandon abandon abandon abandon abandon abandon \
                                    abandon abandon abandon abandon about";

    fn seed() -> Vec<u8> {
        alloy_primitives::hex::decode(ABANDON_SEED).unwrap()
    }

    /// BIP39's PBKDF2-HMAC-SHA512 with one output block (64 bytes).
    fn bip39_seed(mnemonic: &str, passphrase: &str) -> [u8; 64] {
        use bitcoin::hashes::{hmac, sha512, Hash, HashEngine};
        let prf = |data: &[u8]| {
            let mut e = hmac::HmacEngine::<sha512::Hash>::new(mnemonic.as_bytes());
            e.input(data);
            hmac::Hmac::<sha512::Hash>::from_engine(e).to_byte_array()
        };
        let mut salt = format!("mnemonic{passphrase}").into_bytes();
        salt.extend_from_slice(&1u32.to_be_bytes());
        let mut u = prf(&salt);
        let mut out = u;
        for _ in 1..2048 {
            u = prf(&u);
            out.iter_mut().zip(u).for_each(|(o, b)| *o ^= b);
        }
        out
    }

    #[test]
    fn the_seed_is_the_abandon_mnemonics() {
        assert_eq!(
            bip39_seed(ABANDON_MNEMONIC, "").as_slice(),
            seed().as_slice()
        );
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

    fn account_xpub() -> String {
        xpub_at(NetworkKind::Main, "m/44'/195'/0'").to_string()
    }

    fn with_version(encoded: [u8; 78], version: [u8; 4]) -> String {
        let mut data = encoded;
        data[..4].copy_from_slice(&version);
        base58::encode_check(&data)
    }

    /// The address of a private key the way Tron's own tools compute it.
    fn address_of_private(xpriv: &Xpriv) -> String {
        let public = xpriv.private_key.public_key(&ctx());
        let hash = keccak256(&public.serialize_uncompressed()[1..]);
        let mut data = vec![0x41];
        data.extend_from_slice(&hash[12..]);
        base58::encode_check(&data)
    }

    #[test]
    fn the_abandon_mnemonic_gives_the_wallets_first_address() {
        let key = AccountKey::parse(&account_xpub()).unwrap();
        assert_eq!(key.receive_address(0).unwrap(), ABANDON_FIRST_ADDRESS);
        assert_eq!(
            key.receive_body(0).unwrap(),
            parse_address(ABANDON_FIRST_ADDRESS).unwrap()
        );
    }

    #[test]
    fn addresses_match_the_private_key_side() {
        let key = AccountKey::parse(&account_xpub()).unwrap();
        for index in [0u32, 1, 5, 1000, HARDENED - 1] {
            let xpriv = xpriv_at(NetworkKind::Main, &format!("m/44'/195'/0'/0/{index}"));
            assert_eq!(
                key.receive_address(index).unwrap(),
                address_of_private(&xpriv),
                "{index}"
            );
        }
    }

    #[test]
    fn tpub_and_whitespace_derive_the_same_addresses() {
        let test = xpub_at(NetworkKind::Test, "m/44'/195'/0'").to_string();
        assert!(test.starts_with("tpub"), "{test}");
        let key = AccountKey::parse(&format!("  {test}\n")).unwrap();
        assert_eq!(key.receive_address(0).unwrap(), ABANDON_FIRST_ADDRESS);
        let main = AccountKey::parse(&account_xpub()).unwrap();
        assert_eq!(key.fingerprint(), main.fingerprint());
        assert_eq!(
            key.receive_address(7).unwrap(),
            main.receive_address(7).unwrap()
        );
    }

    #[test]
    fn the_ethereum_account_gives_other_addresses() {
        // Same mnemonic, coin type 60: a different account, different keys.
        let eth = xpub_at(NetworkKind::Main, "m/44'/60'/0'").to_string();
        let key = AccountKey::parse(&eth).unwrap();
        assert_ne!(key.receive_address(0).unwrap(), ABANDON_FIRST_ADDRESS);
    }

    #[test]
    fn keys_not_at_account_depth_are_rejected() {
        let chain = xpub_at(NetworkKind::Main, "m/44'/195'/0'/0").to_string();
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
        assert!(msg.contains("m/44'/195'/account'"), "{msg}");
        assert!(
            msg.contains(&chain[..8]) && !msg.contains(&chain[..9]),
            "{msg}"
        );

        let coin = xpub_at(NetworkKind::Main, "m/44'/195'").to_string();
        let e = AccountKey::parse(&coin).unwrap_err();
        assert!(
            matches!(e, DeriveError::WrongDepth { depth: 2, .. }),
            "{e:?}"
        );

        let unhardened = xpub_at(NetworkKind::Main, "m/44'/195'/0").to_string();
        let e = AccountKey::parse(&unhardened).unwrap_err();
        assert!(
            matches!(e, DeriveError::NotHardened { child: 0, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("hardened"), "{e}");
    }

    #[test]
    fn bad_text_is_named() {
        let xpub = account_xpub();
        let mut corrupted = xpub.clone();
        let c = if &corrupted[50..51] == "z" { "y" } else { "z" };
        corrupted.replace_range(50..51, c);
        let e = AccountKey::parse(&corrupted).unwrap_err();
        assert_eq!(
            e,
            DeriveError::Checksum {
                key: format!("{}…", &xpub[..8])
            }
        );

        let e = AccountKey::parse("xpub6C0O").unwrap_err();
        assert!(
            matches!(e, DeriveError::Base58Character { found: '0', .. }),
            "{e:?}"
        );
        assert_eq!(AccountKey::parse("  ").unwrap_err(), DeriveError::Empty);
        let short = base58::encode_check(&[0x04, 0x88, 0xb2, 0x1e, 0, 0]);
        let e = AccountKey::parse(&short).unwrap_err();
        assert!(matches!(e, DeriveError::Length { length: 6, .. }), "{e:?}");

        let account = xpub_at(NetworkKind::Main, "m/44'/195'/0'");
        let zpub = with_version(account.encode(), [0x04, 0xb2, 0x47, 0x46]);
        let e = AccountKey::parse(&zpub).unwrap_err();
        assert!(
            matches!(&e, DeriveError::WrongVersion { found, .. } if found == "zpub"),
            "{e:?}"
        );
        // A Tron address is not an account key.
        let e = AccountKey::parse(ABANDON_FIRST_ADDRESS).unwrap_err();
        assert!(matches!(e, DeriveError::Length { length: 21, .. }), "{e:?}");
    }

    #[test]
    fn private_keys_are_rejected_without_echoing_them() {
        let xprv = xpriv_at(NetworkKind::Main, "m/44'/195'/0'").to_string();
        let e = AccountKey::parse(&xprv).unwrap_err();
        assert!(
            matches!(&e, DeriveError::PrivateKey { kind, .. } if kind == "xprv"),
            "{e:?}"
        );
        let shown = format!("{e} {e:?}");
        assert!(shown.contains("private key"), "{shown}");
        assert!(!shown.contains(&xprv[..9]), "{shown}");
    }

    #[test]
    fn hardened_indexes_are_rejected() {
        let key = AccountKey::parse(&account_xpub()).unwrap();
        assert!(key.receive_address(HARDENED - 1).is_ok());
        for index in [HARDENED, u32::MAX] {
            let e = key.receive_address(index).unwrap_err();
            assert_eq!(e, DeriveError::HardenedIndex { index });
            assert_eq!(
                key.receive_body(index).unwrap_err(),
                DeriveError::HardenedIndex { index }
            );
        }
    }

    #[test]
    fn debug_is_short() {
        let xpub = account_xpub();
        let key = AccountKey::parse(&xpub).unwrap();
        let debug = format!("{key:?}");
        assert!(debug.len() < 60, "{debug}");
        assert!(debug.contains(&key.fingerprint()), "{debug}");
        assert!(!debug.contains(&xpub[4..20]), "{debug}");
    }
}

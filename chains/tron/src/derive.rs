//! BIP44 Tron receive addresses (m/44'/195'/account'/0/index) from an
//! account-level extended public key, so paywatch can hand out fresh
//! addresses without ever holding a private key.
//!
//! A Tron address is an Ethereum key hash behind the 0x41 prefix, so the
//! key parsing and derivation are paywatch-evm's, run for coin type 195;
//! only the T-address encoding lives here.

use std::fmt;

use paywatch_evm::{AccountKey as EvmAccountKey, Bip44Coin};

pub use paywatch_evm::DeriveError;

/// Tron, m/44'/195'/account'.
pub const TRON: Bip44Coin = Bip44Coin {
    chain: "Tron",
    coin_type: 195,
};

/// An account-level extended public key, the m/44'/195'/account' node of a
/// BIP44 Tron wallet, from which receive addresses are derived.
#[derive(Clone)]
pub struct AccountKey(EvmAccountKey);

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AccountKey {
    /// Parses an account-level extended public key (m/44'/195'/account'),
    /// given with xpub (mainnet) or tpub (testnet) version bytes; both
    /// derive the same Tron addresses. The key must have depth 3 and a
    /// hardened child number. Surrounding whitespace is ignored.
    pub fn parse(s: &str) -> Result<AccountKey, DeriveError> {
        EvmAccountKey::parse_for(s, TRON).map(AccountKey)
    }

    /// The body of the receive address at m/44'/195'/account'/0/index:
    /// keccak256 of the uncompressed public key (without its 0x04 prefix),
    /// last 20 bytes, as for Ethereum.
    pub fn receive_body(&self, index: u32) -> Result<[u8; 20], DeriveError> {
        self.0.receive_key_hash(index)
    }

    /// The receive address at m/44'/195'/account'/0/index as a T-address.
    pub fn receive_address(&self, index: u32) -> Result<String, DeriveError> {
        self.receive_body(index)
            .map(|body| crate::address::encode_address(&body))
    }

    /// A short stable fingerprint of the key (hex of the BIP32 fingerprint),
    /// safe to log and to store, so a changed key is noticed.
    pub fn fingerprint(&self) -> String {
        self.0.fingerprint()
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::keccak256;
    use bitcoin::base58;
    use bitcoin::bip32::{DerivationPath, Xpriv, Xpub};
    use bitcoin::secp256k1::{All, Secp256k1};
    use bitcoin::NetworkKind;

    use super::*;
    use crate::address::parse_address;

    /// First hardened child index.
    const HARDENED: u32 = 1 << 31;

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
                coin: TRON,
                key: format!("{}…", &xpub[..8])
            }
        );

        let e = AccountKey::parse("xpub6C0O").unwrap_err();
        assert!(
            matches!(e, DeriveError::Base58Character { found: '0', .. }),
            "{e:?}"
        );
        assert_eq!(
            AccountKey::parse("  ").unwrap_err(),
            DeriveError::Empty { coin: TRON }
        );
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

    #[test]
    fn errors_name_tron_and_coin_type_195() {
        let account = xpub_at(NetworkKind::Main, "m/44'/195'/0'");
        let k = |s: &str| format!("{}…", &s[..8]);
        let chain = xpub_at(NetworkKind::Main, "m/44'/195'/0'/0").to_string();
        let unhardened = xpub_at(NetworkKind::Main, "m/44'/195'/0").to_string();
        let xprv = xpriv_at(NetworkKind::Main, "m/44'/195'/0'").to_string();
        let zpub = with_version(account.encode(), [0x04, 0xb2, 0x47, 0x46]);
        let mut corrupted = account.to_string();
        let c = if &corrupted[50..51] == "z" { "y" } else { "z" };
        corrupted.replace_range(50..51, c);
        let short = base58::encode_check(&[0x04, 0x88, 0xb2, 0x1e, 0, 0]);
        let cases = [
            (
                String::new(),
                "the Tron account key is empty; expected an xpub of m/44'/195'/account'".to_owned(),
            ),
            (
                "xpub6C0O".to_owned(),
                "the Tron account key xpub6C0O is not base58: '0' is not a base58 character \
                 (mistyped?)"
                    .to_owned(),
            ),
            (
                corrupted.clone(),
                format!(
                    "the Tron account key {} has a bad base58check checksum (mistyped or \
                     truncated?)",
                    k(&corrupted)
                ),
            ),
            (
                short.clone(),
                format!(
                    "the Tron account key {} decodes to 6 bytes, expected 78 (truncated?)",
                    k(&short)
                ),
            ),
            (
                xprv.clone(),
                format!(
                    "the Tron account key {} is an extended private key (xprv); give the \
                     account's extended public key (xpub) instead, and treat this private key \
                     as exposed",
                    k(&xprv)
                ),
            ),
            (
                zpub.clone(),
                format!(
                    "the Tron account key {} is a zpub key; expected an xpub or tpub",
                    k(&zpub)
                ),
            ),
            (
                chain.clone(),
                format!(
                    "the Tron account key {} has depth 4; expected depth 3, the account-level \
                     key of m/44'/195'/account'",
                    k(&chain)
                ),
            ),
            (
                unhardened.clone(),
                format!(
                    "the Tron account key {} is not a hardened account node (its child number \
                     is 0, expected account' of m/44'/195'/account')",
                    k(&unhardened)
                ),
            ),
        ];
        for (text, want) in cases {
            let e = AccountKey::parse(&text).unwrap_err();
            assert_eq!(e.to_string(), want, "{e:?}");
            assert!(!e.to_string().contains("Ethereum"), "{e}");
        }
    }
}

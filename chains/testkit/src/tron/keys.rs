//! Tron keys, addresses and signatures.
//!
//! A Tron address is `0x41` followed by the last 20 bytes of the keccak256
//! of the uncompressed public key (without its `0x04`), shown as base58check.
//! A transaction's signature is 65 bytes `r || s || v` over the sha256 of its
//! serialized `raw_data`, where `v` is 27 + the recovery id.
//!
//! secp256k1 is used without its `recovery` feature (the workspace does not
//! enable it), so signing and recovery are built here from the plain curve
//! operations the library does offer. That also makes signing fast: see
//! [`TronAccount::sign`].

use std::fmt;
use std::sync::OnceLock;

use alloy_primitives::keccak256;
use bitcoin::base58;
use bitcoin::hashes::{sha256, Hash};
use bitcoin::secp256k1::{All, PublicKey, Scalar, Secp256k1, SecretKey};

use super::TronNodeError;

/// The first byte of every mainnet Tron address body.
pub const ADDRESS_PREFIX: u8 = 0x41;

/// n − 2, where n is the order of secp256k1: x^(n−2) is the inverse of x.
const ORDER_MINUS_2: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
    0xba, 0xae, 0xdc, 0xe6, 0xaf, 0x48, 0xa0, 0x3b, 0xbf, 0xd2, 0x5e, 0x8c, 0xd0, 0x36, 0x41, 0x3f,
];
/// n / 2 (rounded down): an `s` above it is "high" and gets negated, as
/// java-tron's and Ethereum's signers do.
const HALF_ORDER: [u8; 32] = [
    0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0x5d, 0x57, 0x6e, 0x73, 0x57, 0xa4, 0x50, 0x1d, 0xdf, 0xe9, 0x2f, 0x46, 0x68, 0x1b, 0x20, 0xa0,
];

pub(crate) fn secp() -> &'static Secp256k1<All> {
    static SECP: OnceLock<Secp256k1<All>> = OnceLock::new();
    SECP.get_or_init(Secp256k1::new)
}

/// sha256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    sha256::Hash::hash(data).to_byte_array()
}

/// The base58check form (`T…`) of a 21-byte address body.
pub fn tron_address(body: &[u8; 21]) -> String {
    base58::encode_check(body)
}

/// The 21-byte body (`0x41` + 20 bytes) of a base58check Tron address.
pub fn tron_body(address: &str) -> Result<[u8; 21], TronNodeError> {
    let invalid = |expected: &str| TronNodeError::InvalidInput {
        what: "Tron address",
        value: address.to_owned(),
        expected: expected.to_owned(),
    };
    let data = base58::decode_check(address).map_err(|e| invalid(&format!("base58check ({e})")))?;
    let body: [u8; 21] = data
        .as_slice()
        .try_into()
        .map_err(|_| invalid(&format!("21 bytes, not {}", data.len())))?;
    if body[0] != ADDRESS_PREFIX {
        return Err(invalid("a body starting with 0x41"));
    }
    Ok(body)
}

/// The address body of a public key: `0x41` + the last 20 bytes of keccak256
/// of the uncompressed key without its `0x04` tag.
pub fn body_of_public_key(key: &PublicKey) -> [u8; 21] {
    let uncompressed = key.serialize_uncompressed();
    let hash = keccak256(&uncompressed[1..]);
    let mut body = [0u8; 21];
    body[0] = ADDRESS_PREFIX;
    body[1..].copy_from_slice(&hash[12..]);
    body
}

/// The address body of whoever made the 65-byte signature `r || s || v`
/// over `digest` (`v` is 27 or 28; 0 and 1 are accepted too).
///
/// This is ECDSA public-key recovery, Q = r⁻¹(s·R − z·G), from plain curve
/// operations. An R whose x coordinate is at least the curve order (v 29/30,
/// probability ~2⁻¹²⁸) is not supported.
pub fn recover_signer(digest: &[u8; 32], signature: &[u8]) -> Result<[u8; 21], TronNodeError> {
    let bad = |why: &str| TronNodeError::InvalidInput {
        what: "signature",
        value: alloy_primitives::hex::encode(signature),
        expected: why.to_owned(),
    };
    if signature.len() != 65 {
        return Err(bad("65 bytes r || s || v"));
    }
    let v = signature[64];
    let recid = if v >= 27 { v - 27 } else { v };
    if recid > 1 {
        return Err(bad("v of 27 or 28"));
    }
    let mut r_point = [0u8; 33];
    r_point[0] = 0x02 | recid;
    r_point[1..].copy_from_slice(&signature[..32]);
    let big_r = PublicKey::from_slice(&r_point).map_err(|_| bad("r on the curve"))?;
    let mut s = [0u8; 32];
    s.copy_from_slice(&signature[32..64]);
    let s = Scalar::from_be_bytes(s).map_err(|_| bad("s below the curve order"))?;
    let s_r = big_r
        .mul_tweak(secp(), &s)
        .map_err(|_| bad("a non-zero s"))?;
    let z = SecretKey::from_slice(digest).map_err(|_| bad("a digest in 1..n"))?;
    let minus_z_g = PublicKey::from_secret_key(secp(), &z).negate(secp());
    let sum = s_r.combine(&minus_z_g).map_err(|_| bad("s·R ≠ z·G"))?;
    let r = SecretKey::from_slice(&signature[..32]).map_err(|_| bad("r in 1..n"))?;
    let r_inv = invert(r)?;
    let q = sum
        .mul_tweak(secp(), &Scalar::from(r_inv))
        .map_err(|_| bad("a recoverable signature"))?;
    Ok(body_of_public_key(&q))
}

/// x⁻¹ mod n, as x^(n−2) by square-and-multiply (the library has scalar
/// multiplication but no inverse).
fn invert(x: SecretKey) -> Result<SecretKey, TronNodeError> {
    let mut one = [0u8; 32];
    one[31] = 1;
    let mut acc = SecretKey::from_slice(&one).map_err(signing)?;
    let x_scalar = Scalar::from(x);
    for byte in ORDER_MINUS_2 {
        for bit in (0..8).rev() {
            acc = acc.mul_tweak(&Scalar::from(acc)).map_err(signing)?;
            if byte >> bit & 1 == 1 {
                acc = acc.mul_tweak(&x_scalar).map_err(signing)?;
            }
        }
    }
    Ok(acc)
}

fn signing(e: bitcoin::secp256k1::Error) -> TronNodeError {
    TronNodeError::Internal(e.to_string())
}

/// A Tron account from a fixed secp256k1 key, able to sign.
///
/// Signatures are real ECDSA signatures (they verify, and recover to the
/// account's address), but every signature of an account uses the same
/// nonce k, fixed when the account is made. A signature then costs two
/// scalar operations instead of a curve multiplication, which is what lets
/// [`TronNode::fill_blocks`](super::TronNode::fill_blocks) sign millions of
/// transactions. A reused nonce reveals the private key to anyone who sees
/// two signatures; these keys are public test keys, never to hold value.
#[derive(Clone)]
pub struct TronAccount {
    secret: SecretKey,
    public: PublicKey,
    body: [u8; 21],
    address: String,
    /// r of every signature: the x coordinate of k·G.
    r: [u8; 32],
    /// d·r mod n.
    d_r: SecretKey,
    /// k⁻¹ mod n.
    k_inv: Scalar,
    /// The parity of k·G's y coordinate: the recovery id of a low s.
    r_odd: bool,
}

impl fmt::Debug for TronAccount {
    // The address only: the key is not for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TronAccount")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl TronAccount {
    /// Test account number `index`: its key is a hash of the index, so the
    /// same index gives the same account in every run.
    pub fn dev(index: u32) -> TronAccount {
        let mut attempt = 0u32;
        loop {
            let seed = format!("paywatch-testkit tron account {index}/{attempt}");
            // Fails only for a hash that is not a valid key (≈2⁻¹²⁸): try the next.
            if let Ok(account) = TronAccount::from_secret(sha256(seed.as_bytes())) {
                return account;
            }
            attempt += 1;
        }
    }

    /// The account of a 32-byte private key.
    pub fn from_secret(secret: [u8; 32]) -> Result<TronAccount, TronNodeError> {
        let secret = SecretKey::from_slice(&secret).map_err(|_| TronNodeError::InvalidInput {
            what: "private key",
            value: "(32 bytes, not shown)".to_owned(),
            expected: "a number in 1..n (the secp256k1 order)".to_owned(),
        })?;
        let public = PublicKey::from_secret_key(secp(), &secret);
        let body = body_of_public_key(&public);
        // The fixed nonce is a hash of the key, like RFC 6979 but once per
        // key. A k whose k·G has x ≥ n cannot be used (≈2⁻¹²⁸): next.
        let mut attempt = 0u32;
        let (k, r, r_odd) = loop {
            let mut seed = b"paywatch-testkit tron nonce".to_vec();
            seed.extend_from_slice(&secret.secret_bytes());
            seed.extend_from_slice(&attempt.to_be_bytes());
            attempt += 1;
            let Ok(k) = SecretKey::from_slice(&sha256(&seed)) else {
                continue;
            };
            let point = PublicKey::from_secret_key(secp(), &k).serialize();
            let mut r = [0u8; 32];
            r.copy_from_slice(&point[1..]);
            if Scalar::from_be_bytes(r).is_ok() {
                break (k, r, point[0] == 0x03);
            }
        };
        let r_scalar =
            Scalar::from_be_bytes(r).map_err(|e| TronNodeError::Internal(e.to_string()))?;
        let d_r = secret.mul_tweak(&r_scalar).map_err(signing)?;
        let k_inv = Scalar::from(invert(k)?);
        Ok(TronAccount {
            secret,
            public,
            body,
            address: tron_address(&body),
            r,
            d_r,
            k_inv,
            r_odd,
        })
    }

    /// The base58check address (`T…`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The 21-byte address body (`0x41` + 20 bytes).
    pub fn body(&self) -> [u8; 21] {
        self.body
    }

    /// The public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// The private key.
    pub fn secret_bytes(&self) -> [u8; 32] {
        self.secret.secret_bytes()
    }

    /// Signs a 32-byte digest (for a transaction, sha256 of its raw data):
    /// `r || s || v` with a low s and v = 27 + recovery id, as java-tron
    /// signs. s = k⁻¹(z + r·d) with the account's fixed k (see the type).
    pub fn sign(&self, digest: &[u8; 32]) -> Result<[u8; 65], TronNodeError> {
        // A digest ≥ n (≈2⁻¹²⁸) would need reducing first; not worth code.
        let z =
            Scalar::from_be_bytes(*digest).map_err(|e| TronNodeError::Internal(e.to_string()))?;
        let s = self
            .d_r
            .add_tweak(&z)
            .and_then(|t| t.mul_tweak(&self.k_inv))
            .map_err(signing)?;
        let (s, odd) = if s.secret_bytes() > HALF_ORDER {
            // −s is the s of −k, whose point −R has the other y parity.
            (s.negate(), !self.r_odd)
        } else {
            (s, self.r_odd)
        };
        let mut out = [0u8; 65];
        out[..32].copy_from_slice(&self.r);
        out[32..64].copy_from_slice(&s.secret_bytes());
        out[64] = 27 + u8::from(odd);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::secp256k1::{ecdsa, Message};

    #[test]
    fn addresses_round_trip() {
        // Mainnet USDT: the base58 form and the hex body Tronscan shows.
        let usdt = "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t";
        let body = tron_body(usdt).unwrap();
        assert_eq!(
            alloy_primitives::hex::encode(body),
            "41a614f803b6fd780986a42c78ec9c7f77e6ded13c"
        );
        assert_eq!(tron_address(&body), usdt);
        assert!(tron_body("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6u").is_err());
        assert!(tron_body("1BoatSLRHtKNngkdXEeobR76b53LETtpyT").is_err());
    }

    #[test]
    fn key_one_has_the_known_address() {
        // Private key 1: Ethereum address 0x7E5F…5Bdf, the same 20 bytes.
        let mut one = [0u8; 32];
        one[31] = 1;
        let account = TronAccount::from_secret(one).unwrap();
        assert_eq!(
            alloy_primitives::hex::encode(account.body()),
            "417e5f4552091a69125d5dfcb7b8c2659029395bdf"
        );
        assert!(account.address().starts_with('T'));
    }

    #[test]
    fn inverse_is_an_inverse() {
        let x = SecretKey::from_slice(&sha256(b"x")).unwrap();
        let product = x.mul_tweak(&Scalar::from(invert(x).unwrap())).unwrap();
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(product.secret_bytes(), one);
    }

    #[test]
    fn signatures_verify_and_recover() {
        for i in 0..8 {
            let account = TronAccount::dev(i);
            let digest = sha256(format!("message {i}").as_bytes());
            let sig = account.sign(&digest).unwrap();
            assert!(sig[64] == 27 || sig[64] == 28);
            let plain = ecdsa::Signature::from_compact(&sig[..64]).unwrap();
            secp()
                .verify_ecdsa(&Message::from_digest(digest), &plain, &account.public_key())
                .unwrap();
            assert_eq!(recover_signer(&digest, &sig).unwrap(), account.body());
            let mut flipped = sig;
            flipped[64] = if sig[64] == 27 { 28 } else { 27 };
            assert_ne!(recover_signer(&digest, &flipped).unwrap(), account.body());
        }
    }
}

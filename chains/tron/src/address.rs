//! Tron addresses: base58check of 0x41 and a 20-byte body, the same key
//! hash an Ethereum address shows in hex. The body is what paywatch keys
//! on, so an Ethereum address issued by mistake for a Tron payment is
//! still recognised on Tron.

use std::sync::Arc;

use bitcoin::base58;
use bitcoin::hashes::{sha256d, Hash};
use paywatch_core::WatchKeyFn;

/// The byte every Tron mainnet address (and the protobuf form) starts with.
const PREFIX: u8 = 0x41;
/// Prefix and body.
const DECODED_LEN: usize = 21;
/// Number of hex digits of an Ethereum address body.
const HEX_DIGITS: usize = 40;
/// Inputs longer than this are shortened in error messages.
const SHOWN_MAX_CHARS: usize = 50;
const BASE58_DIGITS: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
const BASE58_ALPHABET: &str = match std::str::from_utf8(BASE58_DIGITS) {
    Ok(alphabet) => alphabet,
    Err(_) => panic!("the base58 alphabet is ASCII"),
};

/// Why a string is not an acceptable Tron address. Each variant carries
/// the (trimmed, possibly shortened) input it refers to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    #[error("the Tron address is empty")]
    Empty,
    #[error(
        "{input:?} is an Ethereum (0x…) address, not a Tron address; Tron addresses are base58 \
         and start with T"
    )]
    EthereumForm { input: String },
    #[error("{input:?} is not a Tron address: {found:?} is not a base58 character (mistyped?)")]
    Base58Character { input: String, found: char },
    #[error("{input:?} has a bad base58check checksum (mistyped or truncated?)")]
    Checksum { input: String },
    #[error("{input:?} is not a Tron address: it decodes to {length} bytes, expected 21")]
    Length { input: String, length: usize },
    #[error(
        "{input:?} is not a Tron mainnet address: its first byte is 0x{found:02x}, expected 0x41 \
         (addresses starting with T)"
    )]
    Prefix { input: String, found: u8 },
}

/// The input as shown in an error message: at most [`SHOWN_MAX_CHARS`]
/// characters, with an ellipsis when shortened.
fn shown(s: &str) -> String {
    if s.chars().count() <= SHOWN_MAX_CHARS {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(SHOWN_MAX_CHARS).collect();
        out.push('…');
        out
    }
}

/// Parses a Tron address strictly and returns its 20-byte body.
/// Surrounding whitespace is ignored; anything else wrong is an error that
/// says what: not base58, a bad checksum, a wrong length or a prefix other
/// than 0x41.
pub fn parse_address(s: &str) -> Result<[u8; 20], AddressError> {
    let input = s.trim();
    if input.is_empty() {
        return Err(AddressError::Empty);
    }
    if ethereum_body(input).is_some() {
        return Err(AddressError::EthereumForm {
            input: shown(input),
        });
    }
    // Found here rather than from the decoder, which reports a byte and
    // would garble a non-ASCII character.
    if let Some(found) = input.chars().find(|c| !BASE58_ALPHABET.contains(*c)) {
        return Err(AddressError::Base58Character {
            input: shown(input),
            found,
        });
    }
    let data = base58::decode_check(input).map_err(|e| match e {
        base58::Error::TooShort(t) => AddressError::Length {
            input: shown(input),
            length: t.invalid_base58_length(),
        },
        _ => AddressError::Checksum {
            input: shown(input),
        },
    })?;
    if data.len() != DECODED_LEN {
        return Err(AddressError::Length {
            input: shown(input),
            length: data.len(),
        });
    }
    if data[0] != PREFIX {
        return Err(AddressError::Prefix {
            input: shown(input),
            found: data[0],
        });
    }
    let mut body = [0u8; 20];
    body.copy_from_slice(&data[1..]);
    Ok(body)
}

/// Characters of every T-address.
const ENCODED_LEN: usize = 34;
/// 58^5, the most base58 digits one division by a constant below 2^32
/// yields: a 64-bit remainder-and-limb then never overflows.
const FIVE_DIGITS: u64 = 58 * 58 * 58 * 58 * 58;
/// 32-bit limbs of the 25 bytes (prefix, body, checksum) behind 3 zero bytes.
const LIMBS: usize = 7;

/// The T-address of a 20-byte body: base58check of 0x41 and the body,
/// without the generic encoder's allocations and byte-at-a-time big number.
///
/// The 200-bit number 0x41 ‖ body ‖ checksum lies in [0x41·2^192,
/// 0x42·2^192), between 58^33 and 58^34: always 34 digits, no leading
/// zero bytes (so no leading '1's), the first digit 'T'.
pub fn encode_address(body: &[u8; 20]) -> String {
    let mut bytes = [0u8; 4 * LIMBS];
    let data = &mut bytes[4 * LIMBS - DECODED_LEN - 4..];
    data[0] = PREFIX;
    data[1..DECODED_LEN].copy_from_slice(body);
    let check = sha256d::Hash::hash(&data[..DECODED_LEN]);
    data[DECODED_LEN..].copy_from_slice(&check.as_byte_array()[..4]);

    // Most significant first.
    let mut limbs = [0u32; LIMBS];
    for (limb, b) in limbs.iter_mut().zip(bytes.chunks_exact(4)) {
        *limb = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    }
    // Five digits per division of the whole number by 58^5, least
    // significant group last; the top group's first digit is the 35th,
    // always 0 here.
    let mut digits = [0u8; 5 * LIMBS];
    let mut first = 0;
    for group in digits.chunks_exact_mut(5).rev() {
        let mut rem = 0u64;
        for limb in &mut limbs[first..] {
            // rem < 58^5 < 2^30, so this is below 2^62 and the quotient
            // below 2^32.
            let n = (rem << 32) | u64::from(*limb);
            *limb = (n / FIVE_DIGITS) as u32;
            rem = n % FIVE_DIGITS;
        }
        while first < LIMBS && limbs[first] == 0 {
            first += 1;
        }
        for d in group.iter_mut().rev() {
            *d = BASE58_DIGITS[(rem % 58) as usize];
            rem /= 58;
        }
    }
    debug_assert_eq!(digits[0], b'1');
    digits[digits.len() - ENCODED_LEN..]
        .iter()
        .map(|&d| char::from(d))
        .collect()
}

/// The body of an address as protobuf messages carry it: 21 bytes, the
/// first 0x41. `None` for anything else.
pub fn body_from_proto(bytes: &[u8]) -> Option<[u8; 20]> {
    match bytes.split_first() {
        Some((&PREFIX, body)) => body.try_into().ok(),
        _ => None,
    }
}

/// An Ethereum address's body, `0x` and 40 hex digits in any case. The
/// EIP-55 checksum is not checked: these come from paywatch's own store.
pub(crate) fn ethereum_body(s: &str) -> Option<[u8; 20]> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if hex.len() != HEX_DIGITS {
        return None;
    }
    let mut body = [0u8; 20];
    alloy_primitives::hex::decode_to_slice(hex, &mut body).ok()?;
    Some(body)
}

/// How a watch set keys Tron addresses: the 20-byte body. An Ethereum
/// address keys the same body, so the Tron watcher also sees payments sent
/// on Tron to an address that was issued for Ethereum.
pub fn watch_key() -> WatchKeyFn {
    Arc::new(|address: &str| {
        let address = address.trim();
        parse_address(address)
            .ok()
            .or_else(|| ethereum_body(address))
            .map(|body| body.to_vec())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mainnet addresses with their protobuf (hex) form.
    const VECTORS: [(&str, &str); 2] = [
        // USDT's TRC-20 contract.
        (
            "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t",
            "41a614f803b6fd780986a42c78ec9c7f77e6ded13c",
        ),
        // The black-hole address, an all-zero body.
        (
            "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb",
            "410000000000000000000000000000000000000000",
        ),
    ];

    fn unhex(s: &str) -> Vec<u8> {
        alloy_primitives::hex::decode(s).unwrap()
    }

    #[test]
    fn mainnet_vectors_round_trip() {
        for (text, proto) in VECTORS {
            let body = parse_address(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(body.as_slice(), &unhex(proto)[1..], "{text}");
            assert_eq!(encode_address(&body), text);
            assert_eq!(body_from_proto(&unhex(proto)), Some(body));
            assert_eq!(parse_address(&format!(" {text}\n")).unwrap(), body);
        }
    }

    /// The generic base58check encoder, which `encode_address` replaces.
    fn generic(body: &[u8; 20]) -> String {
        let mut data = [PREFIX; DECODED_LEN];
        data[1..].copy_from_slice(body);
        base58::encode_check(&data)
    }

    #[test]
    fn the_fixed_size_encoder_matches_the_generic_one() {
        let mut bodies = vec![[0u8; 20], [0xff; 20], [0x41; 20]];
        // One byte set or clear at each place, on both extremes.
        for i in 0..20 {
            for (base, byte) in [(0u8, 1u8), (0, 0x80), (0, 0xff), (0xff, 0), (0xff, 0xfe)] {
                let mut b = [base; 20];
                b[i] = byte;
                bodies.push(b);
            }
        }
        // 10,000 pseudo-random bodies (xorshift64*, fixed seed).
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        for _ in 0..10_000 {
            let mut b = [0u8; 20];
            for chunk in b.chunks_mut(8) {
                chunk.copy_from_slice(&next().to_le_bytes()[..chunk.len()]);
            }
            bodies.push(b);
        }
        for body in &bodies {
            let text = encode_address(body);
            assert_eq!(text, generic(body), "{body:02x?}");
            assert_eq!(text.len(), ENCODED_LEN, "{text}");
            assert!(text.starts_with('T'), "{text}");
            assert_eq!(parse_address(&text), Ok(*body), "{text}");
        }
        // The largest body, worked out apart with Python's integers.
        assert_eq!(
            encode_address(&[0xff; 20]),
            "TZJozAg1ruapycCicgz31GxvYJ1FraLjZa"
        );
    }

    #[test]
    fn protobuf_bodies_need_the_prefix_and_21_bytes() {
        let proto = unhex(VECTORS[0].1);
        assert_eq!(body_from_proto(&proto[1..]), None);
        assert_eq!(body_from_proto(&[]), None);
        let mut other = proto.clone();
        other[0] = 0xa0;
        assert_eq!(body_from_proto(&other), None);
        let mut long = proto;
        long.push(0);
        assert_eq!(body_from_proto(&long), None);
    }

    #[test]
    fn a_changed_character_is_a_bad_checksum() {
        let (text, _) = VECTORS[0];
        for i in 1..text.len() {
            let c = &text[i..=i];
            let replacement = if c == "z" { "y" } else { "z" };
            let mut changed = text.to_owned();
            changed.replace_range(i..=i, replacement);
            let e = parse_address(&changed).unwrap_err();
            assert!(
                matches!(&e, AddressError::Checksum { input } if *input == changed)
                    || matches!(e, AddressError::Length { .. } | AddressError::Prefix { .. }),
                "{changed}: {e:?}"
            );
        }
        let mut changed = text.to_owned();
        changed.replace_range(33..34, "u");
        let e = parse_address(&changed).unwrap_err();
        assert_eq!(e, AddressError::Checksum { input: changed });
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn non_base58_characters_are_named() {
        for (input, found) in [
            ("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj60", '0'),
            ("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLjIt", 'I'),
            ("TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLjét", 'é'),
            ("TR7NHqjeKQxGTCi8q8ZY4 L8otSzgjLj6t", ' '),
        ] {
            let e = parse_address(input).unwrap_err();
            assert_eq!(
                e,
                AddressError::Base58Character {
                    input: input.to_owned(),
                    found
                }
            );
            assert!(e.to_string().contains("not a base58 character"), "{e}");
        }
    }

    #[test]
    fn wrong_lengths_and_prefixes_are_named() {
        let short = base58::encode_check(&[PREFIX; 20]);
        let e = parse_address(&short).unwrap_err();
        assert!(
            matches!(e, AddressError::Length { length: 20, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("20 bytes, expected 21"), "{e}");

        let e = parse_address("T9y").unwrap_err();
        assert!(matches!(e, AddressError::Length { .. }), "{e:?}");

        // A Bitcoin address is good base58check of 21 bytes, prefix 0x00.
        let e = parse_address("1BoatSLRHtKNngkdXEeobR76b53LETtpyT").unwrap_err();
        assert!(matches!(e, AddressError::Prefix { found: 0, .. }), "{e:?}");
        assert!(e.to_string().contains("expected 0x41"), "{e}");

        assert_eq!(parse_address(" ").unwrap_err(), AddressError::Empty);

        let long = "T".repeat(500);
        let msg = parse_address(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn an_ethereum_address_is_not_a_tron_address_but_keys_the_same_body() {
        let (text, proto) = VECTORS[0];
        let eth = format!("0x{}", &proto[2..]);
        let e = parse_address(&eth).unwrap_err();
        assert!(matches!(e, AddressError::EthereumForm { .. }), "{e:?}");
        assert!(e.to_string().contains("Ethereum"), "{e}");

        let key = watch_key();
        let want = Some(unhex(&proto[2..]));
        assert_eq!(key(text), want);
        assert_eq!(key(&eth), want);
        assert_eq!(key(&eth.to_ascii_uppercase().replacen('X', "x", 1)), want);
        assert_eq!(
            key(&format!("0X{}", &proto[2..].to_ascii_uppercase())),
            want
        );
        assert_eq!(key(&format!("  {text} ")), want);
        assert_eq!(key("not an address"), None);
        assert_eq!(key(&eth[..41]), None);
        assert_eq!(key(&eth[2..]), None);
    }
}

//! Solana addresses: the base58 text of a 32-byte ed25519 public key (or of
//! a program-derived address, which is off the curve but looks the same).
//! There is no checksum, so a strict parse is all that guards against a
//! mistyped address: it must be base58 and decode to exactly 32 bytes.

use std::sync::Arc;

use paywatch_core::WatchKeyFn;

/// Bytes of a public key.
pub const KEY_LEN: usize = 32;
/// A key is 44 base58 characters at most. Inputs up to this length are
/// decoded, to say how many bytes they hold; longer ones are refused
/// unread, since decoding takes time quadratic in the length.
const MAX_CHARS: usize = 100;
/// Inputs longer than this are shortened in error messages.
const SHOWN_MAX_CHARS: usize = 50;
const BASE58_ALPHABET: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// Why a string is not an acceptable Solana address. Each variant carries
/// the (trimmed, possibly shortened) input it refers to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    #[error("the Solana address is empty")]
    Empty,
    #[error("{input:?} is not a Solana address: {found:?} is not a base58 character (mistyped?)")]
    Base58Character { input: String, found: char },
    #[error(
        "{input:?} is not a Solana address: it decodes to {length} bytes, expected 32 (truncated \
         or extended?)"
    )]
    Length { input: String, length: usize },
    #[error(
        "{input:?} is not a Solana address: it is {chars} characters long, and a 32-byte key \
         takes at most 44"
    )]
    TooLong { input: String, chars: usize },
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

/// Parses a Solana address strictly and returns its 32 bytes. Surrounding
/// whitespace is ignored; anything else wrong is an error that says what.
pub fn parse_address(s: &str) -> Result<[u8; KEY_LEN], AddressError> {
    let input = s.trim();
    if input.is_empty() {
        return Err(AddressError::Empty);
    }
    // Found here rather than from the decoder, which reports a byte
    // position and would garble a non-ASCII character.
    if let Some(found) = input.chars().find(|c| !BASE58_ALPHABET.contains(*c)) {
        return Err(AddressError::Base58Character {
            input: shown(input),
            found,
        });
    }
    // Decoding takes time quadratic in the length: a hash of megabytes in a
    // node's answer would hold the scan for hours.
    if input.len() > MAX_CHARS {
        return Err(AddressError::TooLong {
            input: shown(input),
            chars: input.len(),
        });
    }
    let length_error = |length| AddressError::Length {
        input: shown(input),
        length,
    };
    // Every character is base58, so decoding cannot fail; a failure would
    // still be reported as a length problem rather than a panic.
    let bytes = bs58::decode(input)
        .into_vec()
        .map_err(|_| length_error(0))?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| length_error(bytes.len()))
}

/// The base58 text of a 32-byte key, as the RPC shows it.
pub fn encode_address(key: &[u8; KEY_LEN]) -> String {
    bs58::encode(key).into_string()
}

/// How a watch set keys Solana addresses: the 32 raw bytes, so a scan of
/// binary-encoded transactions tests keys without encoding each one.
pub fn watch_key() -> WatchKeyFn {
    Arc::new(|address: &str| parse_address(address).ok().map(|k| k.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_keys_round_trip() {
        // The System program is the all-zero key.
        assert_eq!(
            parse_address("11111111111111111111111111111111").unwrap(),
            [0u8; 32]
        );
        for text in [
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
            "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA",
            "11111111111111111111111111111111",
        ] {
            let key = parse_address(&format!(" {text}\n")).unwrap();
            assert_eq!(encode_address(&key), text);
            assert_eq!(watch_key()(text), Some(key.to_vec()));
        }
        assert_eq!(encode_address(&[0xff; 32]).len(), 44);
    }

    /// base58 decodes in time quadratic in its length: a node answering a
    /// getBlock with a hash of a few hundred kilobytes held the scan for
    /// minutes (a 50,000-character blockhash took 1.3 s, through the
    /// `solana_block` fuzz target; fuzz/regressions/solana_block/).
    #[test]
    fn a_key_longer_than_any_address_is_refused_without_decoding_it() {
        let long = "2".repeat(200_000);
        let start = std::time::Instant::now();
        let e = parse_address(&long).unwrap_err();
        assert!(
            matches!(e, AddressError::TooLong { chars: 200_000, .. }),
            "{e}"
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        // The longest key there is still reads.
        let longest = encode_address(&[0xff; 32]);
        assert_eq!(parse_address(&longest).unwrap(), [0xff; 32]);
        assert!(matches!(
            parse_address(&format!("1{longest}")).unwrap_err(),
            AddressError::Length { length: 33, .. }
        ));
    }
}

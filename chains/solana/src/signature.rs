//! Transaction signatures, which are Solana's transaction ids: the base58
//! text of 64 bytes, checked as strictly as addresses, since support types
//! them in by hand (a refund's transaction).

/// Bytes of an ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;
/// Longest base58 text of 64 bytes.
const MAX_CHARS: usize = 88;
const BASE58_ALPHABET: &str = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    #[error("a Solana transaction signature is base58 of 64 bytes, at most 88 characters; this has {chars}")]
    TooLong { chars: usize },
    #[error("{found:?} is not a base58 character, so this is no Solana transaction signature")]
    Base58Character { found: char },
    #[error("it decodes to {length} bytes; a Solana transaction signature has 64")]
    Length { length: usize },
}

/// Parses a transaction signature strictly; surrounding whitespace is
/// ignored. The length is checked before decoding, so a huge input costs
/// nothing.
pub fn parse_signature(s: &str) -> Result<[u8; SIGNATURE_LEN], SignatureError> {
    let input = s.trim();
    let chars = input.chars().count();
    if chars > MAX_CHARS {
        return Err(SignatureError::TooLong { chars });
    }
    if let Some(found) = input.chars().find(|c| !BASE58_ALPHABET.contains(*c)) {
        return Err(SignatureError::Base58Character { found });
    }
    let bytes = bs58::decode(input)
        .into_vec()
        .map_err(|_| SignatureError::Length { length: 0 })?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| SignatureError::Length {
            length: bytes.len(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_64_bytes_of_base58() {
        let sig = bs58::encode([7u8; 64]).into_string();
        assert_eq!(parse_signature(&format!(" {sig} ")), Ok([7u8; 64]));
        assert_eq!(
            parse_signature(&bs58::encode([7u8; 32]).into_string()),
            Err(SignatureError::Length { length: 32 })
        );
        assert!(matches!(
            parse_signature("0OIl"),
            Err(SignatureError::Base58Character { found: '0' })
        ));
        assert!(matches!(
            parse_signature(&"1".repeat(10_000)),
            Err(SignatureError::TooLong { chars: 10_000 })
        ));
    }
}

//! Strict Ethereum address parsing (EIP-55 checksums) and the two spellings
//! paywatch uses: the checksummed one for people, the lowercase one for
//! storage and comparison.

use alloy_primitives::Address;

/// Number of hex digits in an address body.
const HEX_DIGITS: usize = 40;
/// Inputs longer than this are shortened in error messages.
const SHOWN_MAX_CHARS: usize = 50;

/// Why a string is not an acceptable Ethereum address. Each variant carries
/// the (trimmed, possibly shortened) input it refers to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    #[error("{input:?} is not an Ethereum address: it must start with 0x")]
    MissingPrefix { input: String },
    #[error(
        "{input:?} is not an Ethereum address: it has {digits} characters after 0x, expected 40 hex digits"
    )]
    Length { input: String, digits: usize },
    #[error(
        "{input:?} is not an Ethereum address: {found:?} (character {position} after 0x) is not a hex digit"
    )]
    NonHex {
        input: String,
        found: char,
        position: usize,
    },
    /// The right spelling of a mistyped address is another address, so
    /// the message never offers one to copy.
    #[error(
        "{input:?} has a bad EIP-55 checksum (its mixed-case spelling does not match): \
         mistyped or altered? Take the address again from its source"
    )]
    Checksum { input: String, expected: String },
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

/// Parses an Ethereum address strictly: surrounding whitespace is ignored,
/// the `0x` (or `0X`) prefix and exactly 40 hex digits are required. An
/// all-lowercase or all-uppercase body carries no checksum and is accepted;
/// a mixed-case body must be the exact EIP-55 spelling.
pub fn parse_address(s: &str) -> Result<Address, AddressError> {
    let input = s.trim();
    let body = input
        .strip_prefix("0x")
        .or_else(|| input.strip_prefix("0X"))
        .ok_or_else(|| AddressError::MissingPrefix {
            input: shown(input),
        })?;

    let digits = body.chars().count();
    if digits != HEX_DIGITS {
        return Err(AddressError::Length {
            input: shown(input),
            digits,
        });
    }

    // 40 characters; all ASCII once each is checked to be a hex digit.
    let mut bytes = [0u8; 20];
    for (i, c) in body.chars().enumerate() {
        let nibble = c
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
            .ok_or_else(|| AddressError::NonHex {
                input: shown(input),
                found: c,
                position: i + 1,
            })?;
        let byte = &mut bytes[i / 2];
        *byte = (*byte << 4) | nibble;
    }
    let address = Address::from(bytes);

    let has_lower = body.bytes().any(|b| b.is_ascii_lowercase());
    let has_upper = body.bytes().any(|b| b.is_ascii_uppercase());
    if has_lower && has_upper {
        let expected = checksummed(&address);
        if body != &expected[2..] {
            return Err(AddressError::Checksum {
                input: shown(input),
                expected,
            });
        }
    }
    Ok(address)
}

/// The EIP-55 checksummed spelling, `0x` + 40 mixed-case hex digits.
pub fn checksummed(a: &Address) -> String {
    a.to_checksum(None)
}

/// The form paywatch stores and compares: `0x` + 40 lowercase hex digits.
pub fn storage_form(a: &Address) -> String {
    let mut out = String::with_capacity(2 + HEX_DIGITS);
    out.push_str("0x");
    for b in a.as_slice() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vectors of EIP-55 (all-caps, all-lower and mixed case).
    const EIP55_VECTORS: [&str; 8] = [
        "0x52908400098527886E0F7030069857D2E4169EE7",
        "0x8617E340B3D01FA5F11F306F4090FD50E238070D",
        "0xde709f2102306220921060314715629080e2fb77",
        "0x27b1fdb04752bbc536007a920d24acb045561c26",
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn eip55_vectors_round_trip() {
        for v in EIP55_VECTORS {
            let a = parse_address(v).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(checksummed(&a), v);
            assert_eq!(storage_form(&a), v.to_ascii_lowercase());
            // Both unchecksummed spellings parse to the same address.
            assert_eq!(parse_address(&v.to_ascii_lowercase()).unwrap(), a);
            let upper = format!("0x{}", v[2..].to_ascii_uppercase());
            assert_eq!(parse_address(&upper).unwrap(), a);
            // Agrees with alloy's own checksum parser.
            assert_eq!(Address::parse_checksummed(v, None).unwrap(), a);
        }
    }

    #[test]
    fn a_single_case_flip_is_a_bad_checksum() {
        for v in EIP55_VECTORS.iter().skip(4) {
            // Flip the case of each letter in turn; every flip is caught.
            for (i, c) in v.char_indices().skip(2) {
                if !c.is_ascii_alphabetic() {
                    continue;
                }
                let flipped_char = if c.is_ascii_uppercase() {
                    c.to_ascii_lowercase()
                } else {
                    c.to_ascii_uppercase()
                };
                let mut flipped = v.to_string();
                flipped.replace_range(i..=i, &flipped_char.to_string());
                let e = parse_address(&flipped).unwrap_err();
                assert_eq!(
                    e,
                    AddressError::Checksum {
                        input: flipped.clone(),
                        expected: (*v).to_owned()
                    }
                );
                let msg = e.to_string();
                assert!(msg.contains("checksum"), "{msg}");
                assert!(msg.contains(&flipped), "{msg}");
                // The mistyped address's own valid spelling is never offered.
                assert!(!msg.contains(v), "{msg}");
            }
        }
    }

    #[test]
    fn lowercase_uppercase_prefix_and_whitespace() {
        let a = parse_address("  0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed\n").unwrap();
        assert_eq!(
            checksummed(&a),
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
        );
        assert_eq!(
            storage_form(&a),
            "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"
        );
        assert_eq!(
            parse_address("0X5AAEB6053F3E94C9B9A09F33669435E7EF1BEAED").unwrap(),
            a
        );
        assert_eq!(
            parse_address("0X5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed").unwrap(),
            a
        );
        let zero = parse_address("0x0000000000000000000000000000000000000000").unwrap();
        assert_eq!(zero, Address::ZERO);
        assert_eq!(
            storage_form(&zero),
            "0x0000000000000000000000000000000000000000"
        );
    }

    #[test]
    fn missing_prefix_is_named() {
        for input in [
            "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "",
            "TLa2f6VPqDgRE67v1736s7bJ8Ray5wYjU7",
        ] {
            let e = parse_address(input).unwrap_err();
            assert_eq!(
                e,
                AddressError::MissingPrefix {
                    input: input.to_owned()
                }
            );
            assert!(e.to_string().contains("must start with 0x"), "{e}");
        }
    }

    #[test]
    fn wrong_length_is_named_with_the_count() {
        let cases = [
            ("0x", 0),
            ("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAe", 39),
            ("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed0", 41),
            (
                "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",
                64,
            ),
        ];
        for (input, digits) in cases {
            let e = parse_address(input).unwrap_err();
            assert!(
                matches!(&e, AddressError::Length { digits: d, .. } if *d == digits),
                "{input}: {e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains(&format!("has {digits} characters")), "{msg}");
            assert!(msg.contains("expected 40"), "{msg}");
        }
        // Long garbage is shortened in the message.
        let long = format!("0x{}", "a".repeat(500));
        let msg = parse_address(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains("500"), "{msg}");
    }

    #[test]
    fn non_hex_characters_are_named() {
        let e = parse_address("0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeg").unwrap_err();
        assert_eq!(
            e,
            AddressError::NonHex {
                input: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeg".into(),
                found: 'g',
                position: 40
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("'g'") && msg.contains("not a hex digit"),
            "{msg}"
        );
        // A non-ASCII character counts as one character.
        let e = parse_address("0xéaaeb6053f3e94c9b9a09f33669435e7ef1beaed").unwrap_err();
        assert!(
            matches!(
                e,
                AddressError::NonHex {
                    found: 'é',
                    position: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        // Whitespace inside the address is not trimmed away.
        let e = parse_address("0x5aaeb6053f3e94c9b9a09f3366 435e7ef1beaed").unwrap_err();
        assert!(
            matches!(
                e,
                AddressError::NonHex {
                    found: ' ',
                    position: 27,
                    ..
                }
            ),
            "{e:?}"
        );
        // A sign is not a digit (u8::from_str_radix would take a leading '+').
        let e = parse_address("0x+aaeb6053f3e94c9b9a09f33669435e7ef1beaed").unwrap_err();
        assert!(
            matches!(e, AddressError::NonHex { found: '+', .. }),
            "{e:?}"
        );
    }
}

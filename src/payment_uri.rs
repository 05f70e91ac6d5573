//! Wallet payment URIs and their QR codes, so a customer's wallet opens
//! pre-filled with the exact address and amount instead of relying on them
//! to retype (and mistype) either.
//!
//! Amounts go into URIs as exact decimal or integer strings built from base
//! units; never through a float, which would round the money it shows.

use paywatch_core::{Amount, Method, Network};
use qrcode::render::svg;
use qrcode::types::QrError;
use qrcode::{Color, QrCode};

/// What a wallet needs to pay one intent.
#[derive(Debug, Clone, Copy)]
pub struct UriTarget<'a> {
    pub method: Method,
    pub address: &'a str,
    /// In the method's base units (sat, wei, sun, lamport, token units).
    pub amount: Amount,
    /// ERC-20 contract for USDT/USDC on ethereum (EIP-55 text), None otherwise
    /// (ignored for other methods, so callers may pass
    /// [`Method::default_contract`] unconditionally).
    pub token_contract: Option<&'a str>,
    /// EIP-155 chain id for ethereum (1 on mainnet), None otherwise. Required
    /// there because a URI without it lets the wallet pay on whatever chain it
    /// happens to be connected to.
    pub chain_id: Option<u64>,
}

/// Why no URI or QR code could be built; each names the offending input.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// A QR code for nothing would let a wallet "pay" without paying.
    #[error("amount for {method} is zero; a payment request must ask for something")]
    ZeroAmount { method: Method },
    #[error("{field} '{value}' for {method} {problem}")]
    BadAddress {
        field: &'static str,
        value: String,
        method: Method,
        problem: &'static str,
    },
    #[error("{method} needs its ERC-20 token contract to build a transfer URI")]
    MissingTokenContract { method: Method },
    #[error("{method} needs an EIP-155 chain id so the wallet pays on the right chain")]
    MissingChainId { method: Method },
    #[error("{method} has no payment URI format here")]
    UnsupportedMethod { method: Method },
    #[error("cannot encode the text as a QR code: {0}")]
    Qr(#[from] QrError),
    #[error("cannot encode the QR code as PNG: {0}")]
    Png(#[from] png::EncodingError),
}

/// Light border around the code, in modules; scanners need 4 (ISO 18004).
const QUIET_ZONE: usize = 4;
/// Pixels per module edge: sharp on a checkout page without being huge.
const SCALE: usize = 8;

/// The URI a wallet understands for `t`: BIP21 for bitcoin and litecoin,
/// EIP-681 for ethereum (ETH and ERC-20 transfers), Solana Pay for SOL.
///
/// Tron has no wallet URI standard that wallets agree on, so for TRX and
/// USDT on tron this returns the bare address: the QR code then carries only
/// the address, and the caller must show the amount beside it.
pub fn payment_uri(t: &UriTarget) -> Result<String, UriError> {
    let method = t.method;
    if t.amount.is_zero() {
        return Err(UriError::ZeroAmount { method });
    }
    let network = method.network();
    check_address("address", t.address, method)?;
    // Decimal coin amounts, trailing zeros trimmed: what BIP21 and Solana Pay
    // expect; wei or lamports there would ask for 10^8 or 10^9 times too much.
    let coins = || t.amount.to_decimal_string(method.decimals());
    match network {
        Network::Bitcoin => Ok(format!("bitcoin:{}?amount={}", t.address, coins())),
        Network::Litecoin => Ok(format!("litecoin:{}?amount={}", t.address, coins())),
        Network::Ethereum => {
            let chain_id = t.chain_id.ok_or(UriError::MissingChainId { method })?;
            if method.is_native() {
                Ok(format!(
                    "ethereum:{}@{chain_id}?value={}",
                    t.address, t.amount
                ))
            } else {
                let contract = t
                    .token_contract
                    .ok_or(UriError::MissingTokenContract { method })?;
                check_address("token_contract", contract, method)?;
                Ok(format!(
                    "ethereum:{contract}@{chain_id}/transfer?address={}&uint256={}",
                    t.address, t.amount
                ))
            }
        }
        Network::Tron => Ok(t.address.to_owned()),
        Network::Solana => Ok(format!("solana:{}?amount={}", t.address, coins())),
        _ => Err(UriError::UnsupportedMethod { method }),
    }
}

/// Refuses anything that could change the URI's meaning once pasted into it.
///
/// Every supported address alphabet (base58, bech32, hex) is plain ASCII
/// alphanumerics, so no percent-encoding is needed, and a `?`, `&`, `#`, `:`
/// or space can only be an attempt to smuggle in another amount or recipient.
fn check_address(field: &'static str, value: &str, method: Method) -> Result<(), UriError> {
    let bad = |problem| UriError::BadAddress {
        field,
        value: value.to_owned(),
        method,
        problem,
    };
    if value.is_empty() {
        return Err(bad("is empty"));
    }
    if !value.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(bad("has characters outside [0-9A-Za-z]"));
    }
    // EIP-681 reads a target without `0x` as an ENS name, which would send the
    // payment to whoever owns that name.
    if method.network() == Network::Ethereum {
        let hex = value.strip_prefix("0x").unwrap_or("");
        if hex.len() != 40 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("is not 0x followed by 40 hex digits"));
        }
    }
    Ok(())
}

/// `text` as an SVG QR code, for web pages: it scales without blurring.
pub fn qr_svg(text: &str) -> Result<String, UriError> {
    let code = QrCode::new(text.as_bytes())?;
    Ok(code
        .render::<svg::Color>()
        .quiet_zone(true)
        .module_dimensions(SCALE as u32, SCALE as u32)
        .build())
}

/// `text` as a 1-bit grayscale PNG QR code (4-module quiet zone, 8 px per
/// module), for e-mails and clients that cannot show SVG.
///
/// Encoded with `png` directly because qrcode's own raster output needs the
/// heavy `image` crate; one bit per pixel also keeps the file tiny.
pub fn qr_png(text: &str) -> Result<Vec<u8>, UriError> {
    let code = QrCode::new(text.as_bytes())?;
    let modules = code.width();
    let colors = code.to_colors();
    let side = (modules + 2 * QUIET_ZONE) * SCALE;
    let row_bytes = side.div_ceil(8);
    // In 1-bit grayscale a set bit is white: start all light, clear the dark.
    let mut pixels = vec![0xFF_u8; row_bytes * side];
    for (i, _) in colors
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == Color::Dark)
    {
        let (mx, my) = (i % modules, i / modules);
        for py in (my + QUIET_ZONE) * SCALE..(my + QUIET_ZONE + 1) * SCALE {
            for px in (mx + QUIET_ZONE) * SCALE..(mx + QUIET_ZONE + 1) * SCALE {
                pixels[py * row_bytes + px / 8] &= !(0x80 >> (px % 8));
            }
        }
    }
    // A QR code is at most 177 modules wide, so `side` is at most 1480.
    let side = side as u32;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, side, side);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::One);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use paywatch_core::Asset;

    const BTC_ADDR: &str = "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq";
    const LTC_ADDR: &str = "ltc1qg82lp7r4hxkvsp8xepp0mtr7ncpxaxfmxa8h8r";
    const ETH_ADDR: &str = "0x742d35Cc6634C0532925a3b844Bc454e4438f44e";
    const TRON_ADDR: &str = "TLa2f6VPqDgRE67v1736s7bJ8Ray5wYjU7";
    const SOL_ADDR: &str = "HN7cABqLq46Es1jh92dQQisAq662SmxELLLsHHe4YWrH";
    const USDT_ETH: &str = "0xdAC17F958D2ee523a2206206994597C13D831ec7";
    const USDC_ETH: &str = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";

    fn method(asset: Asset, network: Network) -> Method {
        Method::new(asset, network).unwrap()
    }

    fn target(method: Method, address: &str, amount: u128) -> UriTarget<'_> {
        UriTarget {
            method,
            address,
            amount: Amount(amount),
            token_contract: method.default_contract(),
            chain_id: (method.network() == Network::Ethereum).then_some(1),
        }
    }

    fn uri(method: Method, address: &str, amount: u128) -> String {
        payment_uri(&target(method, address, amount)).unwrap()
    }

    #[test]
    fn bip21_amounts_are_trimmed_coin_decimals() {
        let btc = method(Asset::Btc, Network::Bitcoin);
        // 0.00123400 BTC
        assert_eq!(
            uri(btc, BTC_ADDR, 123_400),
            format!("bitcoin:{BTC_ADDR}?amount=0.001234")
        );
        assert_eq!(
            uri(btc, "1BoatSLRHtKNngkdXEeobR76b53LETtpyT", 200_000_000),
            "bitcoin:1BoatSLRHtKNngkdXEeobR76b53LETtpyT?amount=2"
        );
        assert_eq!(
            uri(btc, BTC_ADDR, 1),
            format!("bitcoin:{BTC_ADDR}?amount=0.00000001")
        );
        let ltc = method(Asset::Ltc, Network::Litecoin);
        assert_eq!(
            uri(ltc, LTC_ADDR, 150_000_000),
            format!("litecoin:{LTC_ADDR}?amount=1.5")
        );
    }

    #[test]
    fn eip681_ether_value_is_wei_and_tokens_are_transfers() {
        let eth = method(Asset::Eth, Network::Ethereum);
        assert_eq!(
            uri(eth, ETH_ADDR, 1_000_000_000_000_000_000),
            format!("ethereum:{ETH_ADDR}@1?value=1000000000000000000")
        );
        let mut sepolia = target(eth, ETH_ADDR, 12_345);
        sepolia.chain_id = Some(11_155_111);
        assert_eq!(
            payment_uri(&sepolia).unwrap(),
            format!("ethereum:{ETH_ADDR}@11155111?value=12345")
        );
        assert_eq!(
            uri(
                method(Asset::Usdt, Network::Ethereum),
                ETH_ADDR,
                100_000_000
            ),
            format!("ethereum:{USDT_ETH}@1/transfer?address={ETH_ADDR}&uint256=100000000")
        );
        assert_eq!(
            uri(method(Asset::Usdc, Network::Ethereum), ETH_ADDR, 2_500_000),
            format!("ethereum:{USDC_ETH}@1/transfer?address={ETH_ADDR}&uint256=2500000")
        );
    }

    #[test]
    fn solana_pay_amount_is_sol_not_lamports() {
        let sol = method(Asset::Sol, Network::Solana);
        assert_eq!(
            uri(sol, SOL_ADDR, 69_000_000),
            format!("solana:{SOL_ADDR}?amount=0.069")
        );
        assert_eq!(
            uri(sol, SOL_ADDR, 3_000_000_000),
            format!("solana:{SOL_ADDR}?amount=3")
        );
    }

    #[test]
    fn tron_is_the_bare_address() {
        assert_eq!(
            uri(method(Asset::Trx, Network::Tron), TRON_ADDR, 5_000_000),
            TRON_ADDR
        );
        assert_eq!(
            uri(method(Asset::Usdt, Network::Tron), TRON_ADDR, 100_000_000),
            TRON_ADDR
        );
    }

    #[test]
    fn every_method_has_a_uri() {
        for m in Method::ALL {
            let address = match m.network() {
                Network::Bitcoin => BTC_ADDR,
                Network::Litecoin => LTC_ADDR,
                Network::Ethereum => ETH_ADDR,
                Network::Tron => TRON_ADDR,
                _ => SOL_ADDR,
            };
            assert!(payment_uri(&target(m, address, 1)).is_ok(), "{m}");
        }
    }

    #[test]
    fn zero_amount_is_refused() {
        for m in Method::ALL {
            let err = payment_uri(&target(m, ETH_ADDR, 0)).unwrap_err();
            assert!(matches!(err, UriError::ZeroAmount { .. }), "{m}: {err}");
        }
    }

    #[test]
    fn ethereum_needs_contract_and_chain_id() {
        let usdc = method(Asset::Usdc, Network::Ethereum);
        let mut t = target(usdc, ETH_ADDR, 1_000_000);
        t.token_contract = None;
        let err = payment_uri(&t).unwrap_err();
        assert!(matches!(err, UriError::MissingTokenContract { .. }));
        assert!(err.to_string().contains("USDC on ethereum"), "{err}");

        let mut t = target(method(Asset::Eth, Network::Ethereum), ETH_ADDR, 1);
        t.chain_id = None;
        let err = payment_uri(&t).unwrap_err();
        assert!(matches!(err, UriError::MissingChainId { .. }), "{err}");

        let mut t = target(usdc, ETH_ADDR, 1_000_000);
        t.token_contract = Some("0xA0b8?value=1");
        let err = payment_uri(&t).unwrap_err();
        assert!(
            matches!(
                err,
                UriError::BadAddress {
                    field: "token_contract",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn hostile_or_malformed_addresses_are_refused_and_named() {
        let btc = method(Asset::Btc, Network::Bitcoin);
        let eth = method(Asset::Eth, Network::Ethereum);
        let sol = method(Asset::Sol, Network::Solana);
        let trx = method(Asset::Trx, Network::Tron);
        for (m, bad) in [
            (btc, "abc?amount=1"),
            (btc, "abc&amount=1"),
            (btc, "abc#x"),
            (btc, "abc def"),
            (btc, "bitcoin:abc"),
            (btc, ""),
            (sol, "abc/../x"),
            (trx, "T?amount=1"),
            (eth, "0x742d35Cc6634C0532925a3b844Bc454e4438f44e?value=1"),
            // Alphanumeric but not an address: an ENS-style name or short hex.
            (eth, "742d35Cc6634C0532925a3b844Bc454e4438f44e"),
            (eth, "0x742d35"),
            (eth, "0xZZ2d35Cc6634C0532925a3b844Bc454e4438f44e"),
        ] {
            let err = payment_uri(&target(m, bad, 1)).unwrap_err();
            assert!(
                matches!(&err, UriError::BadAddress { field: "address", value, .. } if value == bad),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(&format!("'{bad}'")), "{err}");
        }
    }

    #[test]
    fn svg_is_an_svg_qr_code() {
        let svg = qr_svg(&uri(
            method(Asset::Btc, Network::Bitcoin),
            BTC_ADDR,
            123_400,
        ))
        .unwrap();
        assert!(svg.starts_with("<?xml") || svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("<rect") && svg.contains("<path"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    /// Decodes the PNG and reads every module back at its centre pixel, so
    /// the test checks the picture, not only the header.
    #[test]
    fn png_round_trips_to_the_same_qr_matrix() {
        let sol = method(Asset::Sol, Network::Solana);
        for text in [
            uri(sol, SOL_ADDR, 69_000_000),
            uri(
                method(Asset::Usdt, Network::Ethereum),
                ETH_ADDR,
                100_000_000,
            ),
            TRON_ADDR.to_owned(),
        ] {
            let bytes = qr_png(&text).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));

            let mut decoder = png::Decoder::new(bytes.as_slice());
            decoder.set_transformations(png::Transformations::EXPAND);
            let mut reader = decoder.read_info().unwrap();
            let mut buf = vec![0; reader.output_buffer_size()];
            let info = reader.next_frame(&mut buf).unwrap();
            assert_eq!(info.color_type, png::ColorType::Grayscale);
            assert_eq!(info.bit_depth, png::BitDepth::Eight);

            let code = QrCode::new(text.as_bytes()).unwrap();
            let modules = code.width();
            let side = (modules + 2 * QUIET_ZONE) * SCALE;
            assert_eq!((info.width as usize, info.height as usize), (side, side));

            let pixel = |x: usize, y: usize| buf[y * info.line_size + x];
            let module_at =
                |mx: usize, my: usize| pixel(mx * SCALE + SCALE / 2, my * SCALE + SCALE / 2);
            let mut decoded = Vec::with_capacity(modules * modules);
            for my in 0..modules + 2 * QUIET_ZONE {
                for mx in 0..modules + 2 * QUIET_ZONE {
                    let v = module_at(mx, my);
                    assert!(v == 0 || v == 255, "grey pixel {v}");
                    let inside = (QUIET_ZONE..QUIET_ZONE + modules).contains(&mx)
                        && (QUIET_ZONE..QUIET_ZONE + modules).contains(&my);
                    if inside {
                        decoded.push(if v == 0 { Color::Dark } else { Color::Light });
                    } else {
                        assert_eq!(v, 255, "quiet zone dark at module ({mx}, {my})");
                    }
                }
            }
            assert_eq!(decoded, code.to_colors(), "{text}");
            // Every pixel of a module has the module's colour.
            for y in 0..side {
                for x in 0..side {
                    assert_eq!(pixel(x, y), module_at(x / SCALE, y / SCALE), "({x}, {y})");
                }
            }
        }
    }

    #[test]
    fn text_too_long_for_a_qr_code_is_an_error() {
        let long = "1".repeat(8_000);
        assert!(matches!(qr_svg(&long), Err(UriError::Qr(_))));
        assert!(matches!(qr_png(&long), Err(UriError::Qr(_))));
    }
}

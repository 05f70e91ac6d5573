//! Addresses and transaction ids as people paste them into paywatch:
//! support's refund destination and refund transaction, and the case
//! search. Each is read with its network's own parser and kept in the one
//! spelling paywatch stores, so a pasted EIP-55 or upper-case bech32
//! address is the same address as the stored lower-case one.

use std::collections::BTreeSet;

use paywatch_core::Network;

/// The longest text any network's transaction id could be pasted as.
const TXID_MAX_CHARS: usize = 100;

/// `text` as an address of `network` a refund can be sent to, in the
/// spelling a person should copy into a wallet: lower-case bech32 or
/// Litecoin's modern P2SH, EIP-55 on Ethereum, base58 on Tron and Solana.
pub(crate) fn refund_destination(network: Network, text: &str) -> Result<String, String> {
    let text = text.trim();
    let refused = |why: String| format!("'{}' is not a {network} address: {why}", shown(text));
    if paywatch_utxo::Params::serves(network) {
        return crate::intents::check_shape(network, text)
            .and_then(|()| {
                paywatch_utxo::canonical_address(network, text).map_err(|e| e.to_string())
            })
            .map_err(refused);
    }
    match network {
        Network::Ethereum => paywatch_evm::parse_address(text)
            .map(|a| paywatch_evm::checksummed(&a))
            .map_err(|e| refused(e.to_string())),
        Network::Tron => paywatch_tron::parse_address(text)
            .map(|body| paywatch_tron::encode_address(&body))
            .map_err(|e| refused(e.to_string())),
        Network::Solana => paywatch_solana::parse_address(text)
            .map(|key| paywatch_solana::encode_address(&key))
            .map_err(|e| refused(e.to_string())),
        other => Err(format!("{other} has no address parser")),
    }
}

/// `text` as a transaction id of `network`, in the spelling its watcher
/// records: 64 lower-case hex digits (`0x`-prefixed on Ethereum), or a
/// Solana signature.
pub(crate) fn txid(network: Network, text: &str) -> Result<String, String> {
    let text = text.trim();
    let chars = text.chars().count();
    if chars > TXID_MAX_CHARS {
        return Err(format!(
            "a {network} transaction id is far shorter than {chars} characters"
        ));
    }
    if network == Network::Solana {
        return paywatch_solana::parse_signature(text)
            .map(|_| text.to_owned())
            .map_err(|e| format!("'{text}': {e}"));
    }
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "'{text}' is not a {network} transaction id: expected 64 hex digits"
        ));
    }
    let digits = digits.to_ascii_lowercase();
    Ok(if network == Network::Ethereum {
        format!("0x{digits}")
    } else {
        digits
    })
}

/// Every stored spelling a pasted address could be: as typed, and as each
/// network folds its case (Ethereum and bech32 are case-insensitive).
pub(crate) fn address_spellings(text: &str) -> BTreeSet<String> {
    let text = text.trim();
    let mut out = BTreeSet::from([text.to_owned()]);
    for network in Network::ALL {
        out.insert(network.normalize_address(text).into_owned());
    }
    out
}

/// Every stored spelling a pasted transaction id could be: hex ids are
/// stored in lower case, with `0x` on Ethereum only.
pub(crate) fn txid_spellings(text: &str) -> BTreeSet<String> {
    let text = text.trim();
    let mut out = BTreeSet::from([text.to_owned()]);
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.len() == 64 && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        let lower = digits.to_ascii_lowercase();
        out.insert(format!("0x{lower}"));
        out.insert(lower);
    }
    out
}

fn shown(text: &str) -> String {
    const MAX: usize = 100;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(MAX).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refund_destination_is_read_by_its_networks_parser() {
        assert_eq!(
            refund_destination(
                Network::Litecoin,
                "LTC1QC6AUCUZNVHH9UVUX246X24VF9Y9NCFK729M92S"
            ),
            Ok("ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s".to_owned())
        );
        assert_eq!(
            refund_destination(
                Network::Ethereum,
                "0x52908400098527886e0f7030069857d2e4169ee7"
            ),
            Ok("0x52908400098527886E0F7030069857D2E4169EE7".to_owned())
        );
        let wrong = refund_destination(
            Network::Litecoin,
            "bc1qar0srrr7xfkvy5l643lydnw9re59gtzzwf5mdq",
        )
        .unwrap_err();
        assert!(wrong.contains("not a litecoin address"), "{wrong}");
        assert!(refund_destination(Network::Tron, "T123").is_err());
        assert!(refund_destination(Network::Solana, &"1".repeat(5000)).is_err());
    }

    #[test]
    fn a_txid_is_stored_as_its_watcher_records_it() {
        let hex = "AB".repeat(32);
        assert_eq!(txid(Network::Bitcoin, &hex), Ok("ab".repeat(32)));
        assert_eq!(
            txid(Network::Ethereum, &hex),
            Ok(format!("0x{}", "ab".repeat(32)))
        );
        assert_eq!(
            txid(Network::Tron, &format!("0x{hex}")),
            Ok("ab".repeat(32))
        );
        assert!(txid(Network::Litecoin, "ab12").is_err());
        assert!(txid(Network::Litecoin, &"ab".repeat(50_000)).is_err());
        assert!(txid(Network::Solana, "not-a-signature").is_err());
    }

    #[test]
    fn pasted_spellings_include_each_stored_form() {
        let s = address_spellings(" 0x52908400098527886E0F7030069857D2E4169EE7 ");
        assert!(s.contains("0x52908400098527886e0f7030069857d2e4169ee7"));
        let s = address_spellings("LTC1QC6AUCUZNVHH9UVUX246X24VF9Y9NCFK729M92S");
        assert!(s.contains("ltc1qc6aucuznvhh9uvux246x24vf9y9ncfk729m92s"));
        let t = txid_spellings(&"CD".repeat(32));
        assert!(t.contains(&"cd".repeat(32)));
        assert!(t.contains(&format!("0x{}", "cd".repeat(32))));
    }
}

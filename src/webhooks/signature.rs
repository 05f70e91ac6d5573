//! `Paywatch-Signature`: what a receiver recomputes to know a request is ours.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `v2=` and the hex HMAC-SHA256 of `"<timestamp>.<delivery>.<body>"`
/// under `secret`. The timestamp is signed so a captured request cannot be
/// replayed later under a fresh one, and the delivery id so it cannot be
/// replayed now under an id the receiver has not seen (which would pass its
/// de-duplication). `v1` signed only the timestamp and body; a receiver
/// still checking it fails closed rather than accepting a replay.
pub(crate) fn signature(secret: &[u8], timestamp_secs: i64, delivery: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(format!("{timestamp_secs}.{delivery}.").as_bytes());
    mac.update(body.as_bytes());
    format!("v2={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_timestamp_delivery_and_body_with_hmac_sha256() {
        // RFC 4231, test case 2: the HMAC itself is the standard one.
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(b"0123456789abcdef").unwrap();
        mac.update(b"1700000000.42.{\"a\":1}");
        let expected = format!("v2={}", hex::encode(mac.finalize().into_bytes()));
        let key = b"0123456789abcdef";
        assert_eq!(signature(key, 1_700_000_000, 42, "{\"a\":1}"), expected);
        assert_ne!(
            signature(key, 1_700_000_001, 42, "{\"a\":1}"),
            expected,
            "the timestamp is signed"
        );
        assert_ne!(
            signature(key, 1_700_000_000, 43, "{\"a\":1}"),
            expected,
            "the delivery id is signed"
        );
    }
}

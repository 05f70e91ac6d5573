//! A JSON-RPC answer's body decoded in one pass into the type its method
//! returns. For a getBlock of 1,500 transactions this is less than half the
//! cost of a JSON value first and the types from it (benches/extract.rs).

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use solana_transaction_status_client_types::UiConfirmedBlock;

#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The node answered with a JSON-RPC error.
    #[error("error {code}: {message}")]
    Rpc { code: i64, message: String },
    #[error("the answer's result is null or missing")]
    NoResult,
    /// Not JSON-RPC, or a result not of the method's type; serde's message
    /// names the field and the position.
    #[error("a malformed answer: {0}")]
    Malformed(String),
}

#[derive(Debug, Deserialize)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

#[derive(Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
struct Envelope<T> {
    #[serde(default)]
    result: Option<T>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// The result of a JSON-RPC answer `body`, as `T`.
pub(crate) fn decode_answer<T: DeserializeOwned>(body: &[u8]) -> Result<T, AnswerError> {
    let envelope: Envelope<T> =
        serde_json::from_slice(body).map_err(|e| AnswerError::Malformed(e.to_string()))?;
    if let Some(RpcError { code, message }) = envelope.error {
        return Err(AnswerError::Rpc { code, message });
    }
    envelope.result.ok_or(AnswerError::NoResult)
}

/// A `getBlock` answer's body as Solana's block type, as the watcher reads it.
/// A transaction that failed in a way this build does not know reads as
/// failed (see [`crate::failure`]).
pub fn decode_get_block(body: &[u8]) -> Result<UiConfirmedBlock, AnswerError> {
    match decode_answer(body) {
        Err(AnswerError::Malformed(strict)) => decode_leniently(body).map_err(|e| match e {
            // Not an unknown failure after all: serde's first word stands.
            AnswerError::Malformed(_) => AnswerError::Malformed(strict),
            e => e,
        }),
        read => read,
    }
}

/// The slow way, taken only when the one-pass decode fails: a JSON value
/// first, its unknown failures made readable, then the block from it.
fn decode_leniently(body: &[u8]) -> Result<UiConfirmedBlock, AnswerError> {
    let mut envelope: Envelope<Value> =
        serde_json::from_slice(body).map_err(|e| AnswerError::Malformed(e.to_string()))?;
    if let Some(RpcError { code, message }) = envelope.error {
        return Err(AnswerError::Rpc { code, message });
    }
    let result = envelope.result.as_mut().ok_or(AnswerError::NoResult)?;
    if crate::failure::make_result_readable(result) == 0 {
        return Err(AnswerError::Malformed(String::new()));
    }
    serde_json::from_value(envelope.result.take().unwrap_or_default())
        .map_err(|e| AnswerError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_names_its_code_and_message() {
        let e = decode_answer::<Value>(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32007,"message":"Slot 2 was skipped"}}"#,
        )
        .unwrap_err();
        assert!(matches!(e, AnswerError::Rpc { code: -32007, .. }), "{e}");
        assert_eq!(e.to_string(), "error -32007: Slot 2 was skipped");
    }

    #[test]
    fn a_null_result_is_no_result_and_a_bad_block_names_the_field() {
        let null = decode_get_block(br#"{"jsonrpc":"2.0","id":1,"result":null}"#).unwrap_err();
        assert!(matches!(null, AnswerError::NoResult), "{null}");
        let bad = decode_get_block(
            br#"{"jsonrpc":"2.0","id":1,"result":{"blockhash":"x","parentSlot":1,"blockTime":null,"blockHeight":null}}"#,
        )
        .unwrap_err();
        assert!(bad.to_string().contains("previousBlockhash"), "{bad}");
        let not_json = decode_answer::<Value>(b"<html>").unwrap_err();
        assert!(matches!(not_json, AnswerError::Malformed(_)), "{not_json}");
    }
}

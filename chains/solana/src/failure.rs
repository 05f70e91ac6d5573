//! Transaction failures of kinds this build does not know.
//!
//! Solana's types read a transaction's `err` (and the deprecated `status`)
//! into strict enums, and agave keeps adding variants, each live the moment
//! its feature gate activates. Failed transactions are committed into
//! blocks, so one failure of a new kind would make its whole block
//! unreadable, and the watcher would retry that block forever. A scan only
//! needs to know *whether* a transaction failed (it then pays nothing), so
//! an unknown failure is read as a failure, never as an unreadable answer.

use serde::Deserialize as _;
use serde_json::{json, Value};
use solana_transaction_status_client_types::UiTransactionError;
use tracing::debug;

/// What an unknown failure reads as. Only `err.is_some()` is used; the
/// vaguest failure Solana's types have stands in, with the instruction's
/// index when the answer gives one.
fn stand_in(instruction: u64) -> Value {
    json!({ "InstructionError": [instruction, "GenericError"] })
}

fn known(err: &Value) -> bool {
    UiTransactionError::deserialize(err).is_ok()
}

/// `err` as this build can read it: itself when known, else a stand-in.
fn readable(err: &Value) -> Value {
    if known(err) {
        return err.clone();
    }
    debug!(%err, "a transaction failed in a way this build does not know; read as failed");
    let instruction = err
        .get("InstructionError")
        .and_then(|e| e.get(0))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    stand_in(instruction)
}

/// Rewrites one transaction meta (`{"err": …, "status": …}`) so its failure
/// reads with this build's types. `err` says whether it failed; `status`
/// repeats it and is made to agree. A meta that names a failure only in
/// `status` gets it in `err` as well: a failure is never read as success.
/// Returns whether anything was rewritten.
pub(crate) fn make_readable(meta: &mut Value) -> bool {
    let Some(meta) = meta.as_object_mut() else {
        return false;
    };
    let err = meta.get("err").filter(|e| !e.is_null()).cloned();
    let status_err = match meta.get("status") {
        Some(Value::Object(s)) => s.get("Err").cloned(),
        _ => None,
    };
    let failure = match (err, status_err) {
        (Some(e), _) | (None, Some(e)) => Some(readable(&e)),
        (None, None) => None,
    };
    let (err, status) = match failure {
        Some(f) => (f.clone(), json!({ "Err": f })),
        None => (Value::Null, json!({ "Ok": null })),
    };
    let before = (meta.get("err").cloned(), meta.get("status").cloned());
    meta.insert("err".into(), err);
    meta.insert("status".into(), status);
    before != (meta.get("err").cloned(), meta.get("status").cloned())
}

/// [`make_readable`] for each transaction of a `getBlock` result, or for
/// the one of a `getTransaction` result. Returns how many were rewritten.
pub(crate) fn make_result_readable(result: &mut Value) -> usize {
    if let Some(txs) = result.get_mut("transactions").and_then(Value::as_array_mut) {
        return txs
            .iter_mut()
            .filter_map(|t| t.get_mut("meta"))
            .map(make_readable)
            .filter(|changed| *changed)
            .count();
    }
    result
        .get_mut("meta")
        .map_or(0, |m| usize::from(make_readable(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_failures_and_successes_are_kept_as_they_are() {
        for err in [
            json!({"InstructionError": [2, {"Custom": 1}]}),
            json!("InsufficientFundsForFee"),
            json!({"InsufficientFundsForRent": {"account_index": 2}}),
        ] {
            let mut meta = json!({"err": err, "status": {"Err": err}});
            assert!(!make_readable(&mut meta), "{err}");
        }
        let mut ok = json!({"err": null, "status": {"Ok": null}});
        assert!(!make_readable(&mut ok));
    }

    #[test]
    fn an_unknown_failure_stands_in_with_its_instruction() {
        let err = json!({"InstructionError": [3, {"Brand": {"new": 1}}]});
        let mut meta = json!({"err": err, "status": {"Err": err}});
        assert!(make_readable(&mut meta));
        assert_eq!(meta["err"], stand_in(3));
        assert_eq!(meta["status"], json!({ "Err": stand_in(3) }));
        assert!(known(&meta["err"]));
    }
}

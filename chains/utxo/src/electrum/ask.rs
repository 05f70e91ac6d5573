//! Batched requests, each answer kept apart from the others.

use electrum_client::{Batch, ElectrumApi as _, Param};
use serde_json::Value;

use super::conn::Conn;
use super::{ElectrumError, Inner};

/// One request of a batch, kept so it can be asked again alone.
pub(super) struct Call {
    pub(super) method: &'static str,
    pub(super) params: Vec<Param>,
}

impl Inner {
    /// One batched request; each answer is the result or the server's error
    /// for that request. electrum-client reads an error inside a batch as
    /// `null` (or fails the whole batch with it), and none of the methods
    /// batched here ever answers `null`: those are asked again alone, which
    /// brings back the server's own error.
    pub(super) fn ask(
        &self,
        conn: &mut Conn,
        calls: &[Call],
    ) -> Result<Vec<Result<Value, ElectrumError>>, ElectrumError> {
        let Some(first) = calls.first() else {
            return Ok(Vec::new());
        };
        let mut batch = Batch::default();
        for call in calls {
            batch.raw(call.method.to_owned(), call.params.clone());
        }
        let answers: Vec<Option<Value>> = match conn.client.batch_call(&batch) {
            Ok(answers) if answers.len() == calls.len() => answers.into_iter().map(Some).collect(),
            Ok(answers) => {
                return Err(self.bad(
                    first.method,
                    format!("{} answers to {} requests", answers.len(), calls.len()),
                ))
            }
            Err(electrum_client::Error::Protocol(_)) => calls.iter().map(|_| None).collect(),
            Err(e) => return Err(self.error(first.method, e)),
        };
        let mut out = Vec::with_capacity(calls.len());
        for (call, answer) in calls.iter().zip(answers) {
            match answer {
                Some(v) if !v.is_null() => out.push(Ok(v)),
                _ => match conn.client.raw_call(call.method, call.params.clone()) {
                    Ok(v) if v.is_null() => out.push(Err(self.bad(call.method, "null".to_owned()))),
                    Ok(v) => out.push(Ok(v)),
                    Err(e @ electrum_client::Error::Protocol(_)) => {
                        out.push(Err(self.error(call.method, e)))
                    }
                    Err(e) => return Err(self.error(call.method, e)),
                },
            }
        }
        Ok(out)
    }
}

//! Support's actions from the case page: the same checks, store call and
//! audit entry as `POST /v1/cases/{id}/actions`, under the idempotency key
//! the form was rendered with.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Form;
use serde::Deserialize;
use tracing::error;

use super::case::{self, Banner};
use super::csrf;
use super::html;
use super::session::{self, see_other};
use crate::api::{
    load_case, parse_id, perform_action, Acted, ActionRequest, ApiError, ApiState, Role,
};
use crate::intents::valid_idempotency_key;

/// An action form as posted.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ActionForm {
    /// The idempotency key the form was rendered with.
    key: Option<String>,
    pub(crate) action: Option<String>,
    note: Option<String>,
    actor: Option<String>,
    destination: Option<String>,
    txid: Option<String>,
    to_intent: Option<String>,
}

impl ActionForm {
    /// A field as it was filled in, to show the form again after a refusal.
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        match name {
            "note" => self.note.as_deref(),
            "actor" => self.actor.as_deref(),
            "destination" => self.destination.as_deref(),
            "txid" => self.txid.as_deref(),
            "to_intent" => self.to_intent.as_deref(),
            _ => None,
        }
    }

    fn request(&self) -> ActionRequest {
        // A form sends its empty inputs too; empty means not given.
        let given = |v: &Option<String>| v.clone().filter(|t| !t.trim().is_empty());
        ActionRequest {
            action: self.action.clone(),
            note: self.note.clone(),
            actor: self.actor.clone(),
            destination: given(&self.destination),
            txid: given(&self.txid),
            to_intent: given(&self.to_intent),
        }
    }
}

/// A new idempotency key for one rendered form: 128 bits from the OS, so
/// no two forms anywhere share one. `None` if the OS cannot give them.
pub(crate) fn fresh_key() -> Option<String> {
    let mut bytes = [0u8; 16];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => Some(format!("console-{}", hex::encode(bytes))),
        Err(e) => {
            error!(error = %e, "no random idempotency key for a console form");
            None
        }
    }
}

pub(crate) async fn act(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Result<Form<ActionForm>, FormRejection>,
) -> Result<Response, Response> {
    csrf::same_origin(&headers, "console_case_action")?;
    let caller = session::require(&s, &headers, &[Role::Support], "console_case_action").await?;
    let role = caller.role;
    let page_error = |e: ApiError| html::error_page(&e, Some(role));
    let id = parse_id(&id).map_err(page_error)?;
    let Form(form) = body.map_err(|e| {
        page_error(ApiError::invalid(format!(
            "the form could not be read ({e}); reload the case and try again"
        )))
    })?;
    let key = form
        .key
        .as_deref()
        .filter(|k| valid_idempotency_key(k))
        .ok_or_else(|| {
            page_error(ApiError::invalid(
                "the form has no valid idempotency key; reload the case and try again",
            ))
        })?;
    match perform_action(&s, &caller, id, key, &form.request()).await {
        Ok(Acted::Done(audit)) => Ok(see_other(
            &format!("/console/cases/{id}?done={audit}"),
            None,
        )),
        Ok(Acted::Replayed(audit)) => Ok(see_other(
            &format!("/console/cases/{id}?replayed={audit}"),
            None,
        )),
        Err(refused) => {
            // Nothing was written: the store acts in one transaction or not
            // at all. Show the case as it is, with why.
            let status = refused.status;
            let Ok(c) = load_case(&s, id, 0).await else {
                return Err(page_error(refused));
            };
            Err(case::render(
                &s,
                role,
                &c,
                &Banner::Refused(&refused, &form),
                status,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fresh_and_valid() {
        let a = fresh_key().unwrap();
        let b = fresh_key().unwrap();
        assert_ne!(a, b);
        assert!(
            valid_idempotency_key(&a) && a.len() == "console-".len() + 32,
            "{a}"
        );
        assert!(
            !valid_idempotency_key("")
                && !valid_idempotency_key("has space")
                && !valid_idempotency_key(&"k".repeat(201))
        );
    }

    #[test]
    fn empty_optional_inputs_are_not_given() {
        let f = ActionForm {
            action: Some("accept".into()),
            note: Some("n".into()),
            actor: Some("a".into()),
            destination: Some(" ".into()),
            txid: Some(String::new()),
            to_intent: Some("7".into()),
            ..ActionForm::default()
        };
        let r = f.request();
        assert_eq!(r.destination, None);
        assert_eq!(r.txid, None);
        assert_eq!(r.to_intent.as_deref(), Some("7"));
        assert_eq!(f.value("note"), Some("n"));
    }
}

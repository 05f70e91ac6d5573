//! Signing in with a pasted token, and out.

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Form;
use serde::Deserialize;

use super::csrf;
use super::html::{self, Html};
use super::session::{see_other, sign_in, sign_out, VIEWERS};
use crate::api::Caller;
use crate::api::{ApiError, ApiState};

fn form(status: StatusCode, error: Option<&ApiError>) -> Response {
    let mut h = Html::new();
    if let Some(e) = error {
        html::error_banner(&mut h, e);
    }
    h.raw("<form method=\"post\" action=\"/console/login\" id=\"login\">")
        .raw("<p>Paste an operator or support API token. It is kept in a cookie for this ")
        .raw("browser only and checked on every page.</p>")
        .raw("<p><label>Token <input type=\"password\" name=\"token\" id=\"token\" ")
        .raw("autocomplete=\"off\" required autofocus></label> ")
        .raw("<button type=\"submit\" id=\"sign-in\">Sign in</button></p></form>");
    html::page(status, "Sign in", None, &h)
}

pub(crate) async fn page() -> Response {
    form(StatusCode::OK, None)
}

#[derive(Debug, Deserialize)]
pub(crate) struct Login {
    token: Option<String>,
}

pub(crate) async fn submit(
    State(s): State<ApiState>,
    headers: HeaderMap,
    body: Result<Form<Login>, FormRejection>,
) -> Result<Response, Response> {
    csrf::same_origin(&headers, "console_login")?;
    // The token is never logged nor written back into the page.
    let token = body
        .ok()
        .and_then(|Form(l)| l.token)
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(form(
            StatusCode::BAD_REQUEST,
            Some(&ApiError::invalid(
                "token: paste an operator or support token",
            )),
        ));
    };
    match s.tokens.authorize_token(&token, VIEWERS, "console_login") {
        Ok(caller) => started(&s, &token, &caller).await,
        Err(e) if e.status == StatusCode::UNAUTHORIZED => Err(form(
            e.status,
            Some(&ApiError::new(
                e.status,
                e.code,
                "that token is not configured for this paywatch",
            )),
        )),
        Err(e) => Err(form(e.status, Some(&e))),
    }
}

async fn started(s: &ApiState, token: &str, caller: &Caller) -> Result<Response, Response> {
    match sign_in(s, token, caller).await {
        Ok(cookie) => Ok(see_other("/console/overview", Some(cookie))),
        Err(e) => Err(form(e.status, Some(&e))),
    }
}

pub(crate) async fn logout(
    State(s): State<ApiState>,
    headers: HeaderMap,
) -> Result<Response, Response> {
    csrf::same_origin(&headers, "console_logout")?;
    Ok(see_other(
        "/console/login",
        Some(sign_out(&s, &headers).await),
    ))
}

//! `POST /v1/accounts/{account}/credits`: money back to the balance from an
//! order paid from it (cancelled, or refunded in part), against the debit
//! that paid it. Posted once per Idempotency-Key, never past that debit.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::auth::Role;
use super::error::ApiError;
use super::intent_view::usd;
use super::storefront::{body, header_key, label, usd_cents_of};
use super::ApiState;
use crate::reconcile::{BalanceCredit, CreditOutcome};

pub(crate) async fn credit_back(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(account): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    s.tokens
        .authorize(&headers, &[Role::Storefront], "credit_back")?;
    let f = body(raw, &["usd_amount", "debit", "memo"])?;
    let usd_amount = f.required("usd_amount")?;
    // The debit is named as its caller keyed it.
    let debit = f.required("debit")?;
    if !crate::intents::valid_idempotency_key(&debit) {
        return Err(ApiError::invalid(
            "debit: the Idempotency-Key of the debit whose money comes back, 1 to 200 visible \
             ASCII characters",
        ));
    }
    let memo = f.prose("memo", 1000)?;
    let key = header_key(&headers)?.ok_or_else(|| {
        ApiError::invalid("Idempotency-Key: required, so a retried credit is never posted twice")
    })?;
    let account = label("account", &account, 200)?;
    let cents = usd_cents_of(&usd_amount)?;
    let outcome = s
        .ctx
        .reconciler
        .credit_back(&BalanceCredit {
            account: &account,
            cents,
            key,
            debit: &debit,
            memo: memo.as_deref(),
        })
        .await?;
    let answer = |status: StatusCode, balance: i64| {
        (
            status,
            Json(json!({
                "account": account,
                "credited_usd": usd(cents),
                "debit": debit,
                "posted": true,
                "available_usd_cents": balance,
                "available_usd": usd(balance),
            })),
        )
            .into_response()
    };
    match outcome {
        CreditOutcome::Posted { balance_cents } => Ok(answer(StatusCode::CREATED, balance_cents)),
        CreditOutcome::AlreadyPosted { balance_cents } => Ok(answer(StatusCode::OK, balance_cents)),
        CreditOutcome::KeyConflict => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("Idempotency-Key '{key}' was used for another credit: use a new key"),
        )),
        CreditOutcome::NoSuchDebit => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("account {account} has no debit under the key '{debit}'; nothing was credited"),
        )),
        CreditOutcome::BeyondDebit {
            debited_cents,
            credited_cents,
        } => Err(ApiError::new(
            StatusCode::CONFLICT,
            "credit_exceeds_debit",
            format!(
                "debit '{debit}' took {} USD and {} USD of it is credited back already: \
                 {} USD more would exceed it; nothing was credited",
                usd(debited_cents),
                usd(credited_cents),
                usd(cents)
            ),
        )),
    }
}

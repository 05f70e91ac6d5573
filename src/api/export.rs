//! `GET /v1/exports/settlements`: the accounting export over HTTP, sent a
//! page at a time as it is read (see [`crate::export`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::auth::Role;
use super::error::ApiError;
use super::query::ApiQuery;
use super::ApiState;
use crate::export::{Format, Pages};

#[derive(Debug, Deserialize)]
pub(crate) struct ExportQuery {
    from: Option<i64>,
    to: Option<i64>,
    format: Option<String>,
}

/// Pages waiting to be sent: few, so a slow client holds little memory and
/// the reader waits for it.
const BUFFERED_PAGES: usize = 2;

pub(crate) async fn settlements(
    State(s): State<ApiState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> Result<Response, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Operator, Role::Support],
        "export_settlements",
    )?;
    let from = q
        .from
        .ok_or_else(|| ApiError::invalid("from: unix milliseconds, required"))?;
    let to =
        q.to.ok_or_else(|| ApiError::invalid("to: unix milliseconds, required"))?;
    let (format, content_type, extension) = match q.format.as_deref().unwrap_or("csv") {
        "csv" => (Format::Csv, "text/csv; charset=utf-8", "csv"),
        "jsonl" => (Format::JsonLines, "application/jsonl", "jsonl"),
        other => {
            return Err(ApiError::invalid(format!(
                "format: '{other}' is neither csv nor jsonl"
            )))
        }
    };
    let mut pages = Pages::new(from, to, format).map_err(|e| ApiError::invalid(e.to_string()))?;
    // The first page is read before answering, so a database that does not
    // answer is a 503, not a cut body.
    let first = pages.next(&s.ctx.store).await.map_err(|e| match e {
        crate::export::ExportError::Store(e) => ApiError::from(e),
        other => ApiError::invalid(other.to_string()),
    })?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(BUFFERED_PAGES);
    let store = s.ctx.store.clone();
    tokio::spawn(async move {
        let mut next = first;
        while let Some((bytes, _)) = next {
            if tx.send(Ok(Bytes::from(bytes))).await.is_err() {
                return; // the client went away
            }
            next = match pages.next(&store).await {
                Ok(n) => n,
                Err(e) => {
                    // Cut, not completed: the client sees a broken body,
                    // never a short file that looks whole.
                    warn!(error = %e, "the settlements export failed half-way");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
            };
        }
    });
    Ok((
        [
            (CONTENT_TYPE, content_type.to_owned()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"settlements-{from}-{to}.{extension}\""),
            ),
        ],
        Body::from_stream(Chunks(rx)),
    )
        .into_response())
}

/// The pages as a stream for the response body.
struct Chunks(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

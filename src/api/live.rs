//! Live status for checkout pages: one intent's events as server-sent
//! events (`text/event-stream`), so a page need not poll.
//!
//! Fed by the outbox, the same rows as the feed and the webhooks, so
//! nothing is skipped: each event's `id` is its feed cursor, and a client
//! that reconnects with `Last-Event-ID` (a browser's EventSource does so by
//! itself) is sent every event of the intent after it, then the live ones.
//! A stream opened without one starts with the intent's current state.
//!
//! One task per process tails the feed, woken by the commits that write
//! it, and hands each new event to the open streams of its intent
//! ([`FeedTail`]); a stream that falls behind it reads what it missed from
//! the database, so a slow client costs its own reads, never another
//! stream's events or memory.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::stream;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, OnceCell};
use tokio::time::Instant;
use tracing::warn;

use super::auth::Role;
use super::customer_view::{by_token, customer_status, CustomerView};
use super::error::ApiError;
use super::events::event_json;
use super::intent_view::IntentView;
use super::refusals::{refused, Refusal};
use super::storefront::parse_id;
use super::stream_budget::{Refused, StreamSlot};
use super::throttle::Client;
use super::ApiState;
use crate::store::{FeedEvent, FeedWake, Store};

/// How often the tail looks for new events without being woken: a
/// backstop only. A commit of this process rings the store's bell, and on
/// PostgreSQL every instance's commit notifies; another process writing to
/// the same SQLite file is seen at the next look.
const TAIL_EVERY: Duration = Duration::from_millis(250);
/// With nobody listening, the tail moves to the feed's head at most this
/// often instead of reading events.
const IDLE_EVERY: Duration = Duration::from_secs(1);
/// Events the tail reads at once, and a stream's replay page.
const PAGE: i64 = 500;
/// New events of one intent held for its streams that have not taken them
/// yet; a stream further behind reads from the database instead.
const INTENT_BUFFER: usize = 64;
/// What a browser waits before reconnecting a stream that ended.
const RETRY: Duration = Duration::from_secs(2);

type Listeners = std::sync::Mutex<HashMap<i64, broadcast::Sender<Arc<LiveEvent>>>>;

/// The one task per process that reads the feed as it grows, woken by the
/// commits that write it, and hands each event to the streams of its
/// intent alone: an event costs its intent's listeners, not every stream.
#[derive(Debug, Default)]
pub(crate) struct FeedTail {
    started: OnceCell<()>,
    /// Each intent's streams, by intent id.
    listeners: Arc<Listeners>,
}

impl FeedTail {
    /// A receiver of `intent_id`'s events committed after this call returns.
    async fn subscribe(
        &self,
        store: &Store,
        database_url: &str,
        intent_id: i64,
    ) -> Result<broadcast::Receiver<Arc<LiveEvent>>, ApiError> {
        self.started
            .get_or_try_init(|| async {
                // Started at the feed's head: a stream reads older events
                // itself, after subscribing, so none falls between.
                let head = store.feed_head().await?;
                let wake = FeedWake::new(store, database_url).await;
                tokio::spawn(tail(store.clone(), head, self.listeners.clone(), wake));
                Ok::<_, ApiError>(())
            })
            .await?;
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        Ok(listeners
            .entry(intent_id)
            .or_insert_with(|| broadcast::channel(INTENT_BUFFER).0)
            .subscribe())
    }
}

/// A feed event as the streams of its intent share it: its body parsed,
/// and the storefront's rendering made, once however many listen.
#[derive(Debug)]
pub(crate) struct LiveEvent {
    event: FeedEvent,
    payload: std::sync::OnceLock<Map<String, Value>>,
    storefront: std::sync::OnceLock<String>,
}

impl LiveEvent {
    fn new(event: FeedEvent) -> LiveEvent {
        LiveEvent {
            event,
            payload: std::sync::OnceLock::new(),
            storefront: std::sync::OnceLock::new(),
        }
    }

    /// The body, as written (an object; empty if ever it is not).
    fn payload(&self) -> &Map<String, Value> {
        self.payload
            .get_or_init(|| serde_json::from_str(&self.event.payload).unwrap_or_default())
    }

    /// The event as the storefront's stream sends it.
    fn storefront_data(&self) -> &str {
        self.storefront
            .get_or_init(|| event_json(&self.event).to_string())
    }
}

impl std::ops::Deref for LiveEvent {
    type Target = FeedEvent;

    fn deref(&self) -> &FeedEvent {
        &self.event
    }
}

/// Forgets intents whose streams all ended; whether any stream is left.
fn anyone_listening(listeners: &Listeners) -> bool {
    let mut listeners = listeners.lock().unwrap_or_else(|p| p.into_inner());
    listeners.retain(|_, sender| sender.receiver_count() > 0);
    !listeners.is_empty()
}

async fn tail(store: Store, mut after: i64, listeners: Arc<Listeners>, mut wake: FeedWake) {
    let mut moved_at: Option<Instant> = None;
    loop {
        wake.wait(TAIL_EVERY).await;
        if !anyone_listening(&listeners) {
            // Nobody listens: the position follows the head, at most once a
            // second, instead of the events being read.
            if moved_at.is_some_and(|at| at.elapsed() < IDLE_EVERY) {
                continue;
            }
            moved_at = Some(Instant::now());
            // The head first, then the count: a stream that subscribes after
            // the count reads its own backlog up to at least this head, so
            // moving here skips nothing it is owed. Moved after a stream
            // subscribed, the events between its backlog and the head would
            // reach it late, on its next refill.
            match store.feed_head().await {
                Ok(head) if !anyone_listening(&listeners) => after = head,
                Ok(_) => {}
                Err(e) => warn!(error = %e, "live status: reading the feed's head failed"),
            }
            continue;
        }
        loop {
            match store.events_after(after, PAGE).await {
                Ok(events) => {
                    let full = i64::try_from(events.len()).unwrap_or(i64::MAX) == PAGE;
                    if let Some(last) = events.last() {
                        after = last.cursor;
                    }
                    hand_out(&listeners, events);
                    if !full {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "live status: reading the feed failed; trying again");
                    break;
                }
            }
        }
    }
}

/// Each event to the streams of its intent, if any listen.
fn hand_out(listeners: &Listeners, events: Vec<FeedEvent>) {
    let listeners = listeners.lock().unwrap_or_else(|p| p.into_inner());
    for e in events {
        let Some(sender) = e.intent_id.and_then(|id| listeners.get(&id)) else {
            continue;
        };
        // No receiver left is not an error: the next round forgets it.
        let _ = sender.send(Arc::new(LiveEvent::new(e)));
    }
}

/// Who is listening, which decides what an event shows.
#[derive(Debug, Clone)]
enum Listener {
    /// The storefront (or support, an operator): events as the feed has them.
    Storefront,
    /// A customer's browser with the intent's view token, from `client`
    /// (unknown only where no connection is, in a test's router).
    Customer {
        token: String,
        client: Option<IpAddr>,
    },
}

/// Where a stream starts.
fn resume_from(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|c| *c >= 0)
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid(
                "Last-Event-ID: not an event id this stream sent (a non-negative integer)",
            )
        })
}

/// `GET /v1/intents/{id}/events`.
pub(crate) async fn intent_events(
    State(s): State<ApiState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    s.tokens.authorize(
        &headers,
        &[Role::Storefront, Role::Support, Role::Operator],
        "intent_events",
    )?;
    let id = parse_id(&id)?;
    let from = resume_from(&headers)?;
    if s.ctx.store.intent(id).await?.is_none() {
        return Err(ApiError::not_found(format!("no intent {id}")));
    }
    open(s, id, from, Listener::Storefront).await
}

/// `GET /v1/view/{token}/events`.
pub(crate) async fn view_events(
    State(s): State<ApiState>,
    client: Option<Extension<Client>>,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Result<Response, ApiError> {
    let from = resume_from(&headers)?;
    let intent = by_token(&s, &token).await?;
    let client = client.map(|Extension(Client(ip))| ip);
    open(s, intent.id, from, Listener::Customer { token, client }).await
}

/// A stream's state between events.
struct Stream {
    s: ApiState,
    intent_id: i64,
    listener: Listener,
    live: broadcast::Receiver<Arc<LiveEvent>>,
    /// The last cursor sent: nothing at or below it is sent again.
    sent: i64,
    /// Read from the database, not sent yet.
    backlog: VecDeque<Arc<LiveEvent>>,
    /// The first event: the intent's state now, when not resuming.
    opening: Option<Event>,
    /// Events committed before the stream subscribed to the tail, or
    /// dropped by it while the stream lagged, are still to be read.
    replay_owed: bool,
    ends_at: Instant,
    /// Held for as long as the stream is open.
    _permit: StreamSlot,
}

async fn open(
    s: ApiState,
    intent_id: i64,
    from: Option<i64>,
    listener: Listener,
) -> Result<Response, ApiError> {
    // Streams have a budget of their own, below the listener's: open
    // checkout pages never take the connections the storefront needs, and
    // within it one page never takes another's place (stream_budget).
    let slot = match &listener {
        Listener::Storefront => s.streams.storefront(),
        Listener::Customer { token, client } => s.streams.payer(token, *client),
    };
    let permit = match slot {
        Ok(slot) => slot,
        Err(why) => {
            let message = match why {
                Refused::Page(n) => format!(
                    "this payment page already has {n} live status streams open \
                     (api.max_streams_per_page): close a tab, or read GET /v1/view/{{token}}"
                ),
                Refused::Client(n) => format!(
                    "this address already holds {n} payers' live status streams \
                     (api.max_streams_per_client): close some, or read GET /v1/view/{{token}}"
                ),
                Refused::Payers(n) => format!(
                    "{n} payers' live status streams are open, the most this paywatch serves \
                     them (three quarters of api.max_event_streams): try again shortly, or read \
                     GET /v1/view/{{token}}"
                ),
                Refused::Storefront(n) => format!(
                    "{n} storefront live status streams are open, its share of \
                     api.max_event_streams (a quarter): try again shortly, or read GET /v1/events"
                ),
            };
            // A share full is news; one page's or one client's own limit
            // is theirs (the request's span names the client either way).
            match why {
                Refused::Page(_) | Refused::Client(_) => {
                    tracing::debug!(?why, "a live status stream refused");
                }
                Refused::Payers(_) | Refused::Storefront(_) => {
                    warn!(
                        ?why,
                        "a live status stream refused: a share of api.max_event_streams is full"
                    );
                }
            }
            refused(Refusal::TooManyStreams);
            let mut busy =
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_streams", message)
                    .into_response();
            busy.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("5"));
            return Ok(busy);
        }
    };
    let live = s
        .live
        .subscribe(&s.ctx.store, &s.ctx.settings.database.url, intent_id)
        .await?;
    let horizon = s.ctx.store.feed_pruned_through().await?;
    let head = s.ctx.store.feed_head().await?;
    // Resuming from before a prune would skip what was pruned, and from
    // beyond the head (an id from another database, a restored one) would
    // wait for events that already happened: start from the intent's state
    // instead, which carries everything since.
    let (sent, opening) = match from.filter(|c| *c >= horizon && *c <= head) {
        Some(cursor) => (cursor, None),
        None => {
            // The cursor first, then the state: the state is at least as new
            // as the cursor, and an event between is sent again, harmlessly.
            let cursor = s.ctx.store.last_intent_cursor(intent_id).await?;
            let intent = s
                .ctx
                .store
                .intent(intent_id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no intent {intent_id}")))?;
            let data = match &listener {
                Listener::Storefront => serde_json::to_value(
                    IntentView::load(&intent, &s.ctx.settings, &s.ctx.store).await?,
                ),
                Listener::Customer { token, .. } => {
                    serde_json::to_value(CustomerView::new(&intent, token, &s))
                }
            }
            .unwrap_or(Value::Null);
            let opening = Event::default()
                .event("snapshot")
                .id(cursor.to_string())
                .retry(RETRY)
                .data(data.to_string());
            (cursor, Some(opening))
        }
    };
    let ends_at = Instant::now() + Duration::from_secs(s.ctx.settings.api.event_stream_secs.max(1));
    let state = Stream {
        s,
        intent_id,
        listener,
        live,
        sent,
        backlog: VecDeque::new(),
        opening,
        replay_owed: true,
        ends_at,
        _permit: permit,
    };
    let events = stream::unfold(state, |mut st| async move {
        let event = st.next().await?;
        Some((Ok::<_, Infallible>(event), st))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    // nginx buffers a proxied response by default, and a status change
    // would reach the payer only when the buffer fills or the stream ends:
    // this asks it not to, whatever its configuration says.
    response.headers_mut().insert(
        axum::http::HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    Ok(response)
}

impl Stream {
    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if let Some(opening) = self.opening.take() {
            return Some(opening);
        }
        loop {
            if let Some(e) = self.backlog.pop_front() {
                if e.cursor > self.sent {
                    self.sent = e.cursor;
                    if let Some(event) = self.render(&e) {
                        return Some(event);
                    }
                }
                continue;
            }
            if self.replay_owed {
                self.refill().await?;
                continue;
            }
            let received = tokio::select! {
                r = self.live.recv() => r,
                () = tokio::time::sleep_until(self.ends_at) => return None,
            };
            match received {
                Ok(e) if e.intent_id == Some(self.intent_id) => self.backlog.push_back(e),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => self.replay_owed = true,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// Reads what the stream missed from the database; `None` (ending the
    /// stream, which the client reconnects) if the database cannot answer.
    async fn refill(&mut self) -> Option<()> {
        match self
            .s
            .ctx
            .store
            .intent_events_after(self.intent_id, self.sent, PAGE)
            .await
        {
            Ok(events) => {
                // A full page may have more behind it: read on once it is sent.
                self.replay_owed = i64::try_from(events.len()).unwrap_or(i64::MAX) == PAGE;
                self.backlog
                    .extend(events.into_iter().map(|e| Arc::new(LiveEvent::new(e))));
                Some(())
            }
            Err(e) => {
                warn!(error = %e, intent = self.intent_id, "live status: reading missed events failed");
                None
            }
        }
    }

    /// The event as this listener may see it; `None` for one a customer
    /// is not shown (ledger postings, support's decisions).
    fn render(&self, e: &LiveEvent) -> Option<Event> {
        let (name, data) = match &self.listener {
            Listener::Storefront => (e.topic.clone(), e.storefront_data().to_owned()),
            Listener::Customer { .. } => match e.topic.as_str() {
                "intent.status" => (
                    "status".to_owned(),
                    customer_status(e.payload(), self.s.ctx.clock.now_ms()).to_string(),
                ),
                // Settled, reversed, recredited: the word only.
                "settlement" => (
                    "settlement".to_owned(),
                    json!({ "event": e.payload().get("event").cloned().unwrap_or(Value::Null) })
                        .to_string(),
                ),
                _ => return None,
            },
        };
        Some(
            Event::default()
                .event(name)
                .id(e.cursor.to_string())
                .data(data),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(cursor: i64, intent_id: Option<i64>) -> FeedEvent {
        FeedEvent {
            cursor,
            topic: "intent.status".into(),
            kind: Some("order".into()),
            reference: Some(format!("r-{cursor}")),
            intent_id,
            payload: "{}".into(),
            created_at_ms: 1,
        }
    }

    fn listen(listeners: &Listeners, intent_id: i64) -> broadcast::Receiver<Arc<LiveEvent>> {
        listeners
            .lock()
            .unwrap()
            .entry(intent_id)
            .or_insert_with(|| broadcast::channel(INTENT_BUFFER).0)
            .subscribe()
    }

    fn received(r: &mut broadcast::Receiver<Arc<LiveEvent>>) -> Vec<i64> {
        std::iter::from_fn(|| r.try_recv().ok().map(|e| e.cursor)).collect()
    }

    // Issue 34: every stream woke for every event and kept its intent's, so
    // a pass's events cost streams × events.
    #[test]
    fn each_event_reaches_the_streams_of_its_own_intent_alone() {
        let listeners = Listeners::default();
        let (mut a1, mut a2, mut b) = (
            listen(&listeners, 1),
            listen(&listeners, 1),
            listen(&listeners, 2),
        );
        hand_out(
            &listeners,
            vec![
                event(10, Some(1)),
                event(11, Some(2)),
                event(12, None),
                event(13, Some(3)),
                event(14, Some(1)),
            ],
        );
        assert_eq!(received(&mut a1), [10, 14]);
        assert_eq!(received(&mut a2), [10, 14]);
        assert_eq!(received(&mut b), [11]);
        assert!(anyone_listening(&listeners));
        drop((a1, a2));
        assert!(anyone_listening(&listeners), "intent 2's stream is open");
        assert_eq!(
            listeners.lock().unwrap().len(),
            1,
            "intent 1 is forgotten once its streams end"
        );
        drop(b);
        assert!(!anyone_listening(&listeners));
    }
}

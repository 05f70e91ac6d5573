//! One rate feed's last answer, refreshed in the background: the machinery
//! every HTTP rate source shares (the custom JSON endpoint and each
//! exchange), so a hanging feed never holds up a quote that a cached answer
//! can serve.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::RateError;
use crate::clock::Clock;

/// The longest pause between failed refreshes.
const MAX_RETRY_MS: i64 = 60_000;

pub(crate) type FetchFuture<T> = Pin<Box<dyn Future<Output = Result<T, RateError>> + Send>>;
type FetchFn<T> = dyn Fn() -> FetchFuture<T> + Send + Sync;

/// An answer and when we received it.
#[derive(Debug)]
pub(crate) struct Fetched<T> {
    pub(crate) fetched_at_ms: i64,
    pub(crate) value: Arc<T>,
}

impl<T> Clone for Fetched<T> {
    fn clone(&self) -> Self {
        Fetched {
            fetched_at_ms: self.fetched_at_ms,
            value: Arc::clone(&self.value),
        }
    }
}

/// Reading never waits on the network once something is cached. When the
/// cached answer is `refresh_after_secs` old, one refresh runs in the
/// background (never two at once); a failed one is tried again after a
/// pause that doubles from a second to a minute. With nothing cached, a
/// reader waits for one fetch that every waiting reader shares.
pub(crate) struct Refreshing<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Refreshing<T> {
    fn clone(&self) -> Self {
        Refreshing {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<T> {
    fetch: Box<FetchFn<T>>,
    refresh_after_ms: i64,
    clock: Arc<dyn Clock>,
    state: std::sync::Mutex<State<T>>,
    /// Woken when a fetch ends, for readers waiting on the first answer.
    done: Notify,
}

struct State<T> {
    fetched: Option<Fetched<T>>,
    refreshing: bool,
    /// No fetch before this, after a failed one.
    retry_at_ms: i64,
    failures: u32,
    last_error: Option<RateError>,
}

impl<T> fmt::Debug for Refreshing<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state();
        f.debug_struct("Refreshing")
            .field(
                "fetched_at_ms",
                &state.fetched.as_ref().map(|s| s.fetched_at_ms),
            )
            .field("refreshing", &state.refreshing)
            .field("failures", &state.failures)
            .field("last_error", &state.last_error)
            .finish()
    }
}

impl<T: Send + Sync + 'static> Refreshing<T> {
    pub(crate) fn new(
        fetch: impl Fn() -> FetchFuture<T> + Send + Sync + 'static,
        refresh_after_secs: i64,
        clock: Arc<dyn Clock>,
    ) -> Refreshing<T> {
        Refreshing {
            inner: Arc::new(Inner {
                fetch: Box::new(fetch),
                refresh_after_ms: refresh_after_secs.saturating_mul(1000),
                clock,
                state: std::sync::Mutex::new(State {
                    fetched: None,
                    refreshing: false,
                    retry_at_ms: 0,
                    failures: 0,
                    last_error: None,
                }),
                done: Notify::new(),
            }),
        }
    }

    /// The cached answer without waiting, starting a background fetch if
    /// one is due (or if nothing is cached yet).
    pub(crate) fn peek(&self) -> Option<Fetched<T>> {
        self.inner.fetch_if_due(self.inner.clock.now_ms());
        self.inner.state().fetched.clone()
    }

    /// The cached answer; with nothing cached, the first fetch's outcome
    /// (shared by every reader waiting for it).
    pub(crate) async fn get(&self) -> Result<Fetched<T>, RateError> {
        if let Some(fetched) = self.peek() {
            return Ok(fetched);
        }
        loop {
            // Registered before the state is read, so a fetch ending in
            // between still wakes this reader.
            let done = self.inner.done.notified();
            {
                let state = self.inner.state();
                if let Some(fetched) = &state.fetched {
                    return Ok(fetched.clone());
                }
                if !state.refreshing {
                    if let Some(e) = &state.last_error {
                        if self.inner.clock.now_ms() < state.retry_at_ms {
                            return Err(e.clone());
                        }
                    }
                }
            }
            if !self.inner.start_fetch(self.inner.clock.now_ms()) {
                done.await;
                let state = self.inner.state();
                if state.fetched.is_none() {
                    if let Some(e) = &state.last_error {
                        return Err(e.clone());
                    }
                }
            }
        }
    }

    /// Why the last fetch failed, if it did.
    pub(crate) fn last_error(&self) -> Option<RateError> {
        self.inner.state().last_error.clone()
    }

    /// Fetches now and then whenever the answer is due a refresh, until
    /// every handle is dropped: a quote after a quiet hour finds a fresh
    /// answer rather than one an hour old.
    pub(crate) fn keep_fresh(&self) {
        let weak: Weak<Inner<T>> = Arc::downgrade(&self.inner);
        let tick = Duration::from_millis(self.inner.refresh_after_ms.clamp(1_000, 60_000) as u64);
        tokio::spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                inner.fetch_if_due(inner.clock.now_ms());
                drop(inner);
                tokio::time::sleep(tick).await;
            }
        });
    }
}

impl<T> Inner<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Send + Sync + 'static> Inner<T> {
    /// Starts a background fetch when the answer is missing or due one, and
    /// none is running or paused after a failure.
    fn fetch_if_due(self: &Arc<Self>, now: i64) {
        let due = self
            .state()
            .fetched
            .as_ref()
            .is_none_or(|s| now - s.fetched_at_ms >= self.refresh_after_ms);
        if due {
            self.start_fetch(now);
        }
    }

    /// Starts one background fetch unless one runs or a failure's pause
    /// lasts; says whether it started one.
    fn start_fetch(self: &Arc<Self>, now: i64) -> bool {
        let mut state = self.state();
        if state.refreshing || now < state.retry_at_ms {
            return false;
        }
        state.refreshing = true;
        drop(state);
        // Spawned, never awaited inline: a reader that gives up waiting
        // cannot cancel the fetch halfway and leave it marked running.
        let inner = Arc::clone(self);
        tokio::spawn(async move { inner.refresh().await });
        true
    }

    /// One fetch, its outcome kept: the answer, or the error and when to
    /// try again.
    async fn refresh(&self) {
        let fetched = (self.fetch)().await;
        let now = self.clock.now_ms();
        {
            let mut state = self.state();
            state.refreshing = false;
            match fetched {
                Ok(value) => {
                    state.fetched = Some(Fetched {
                        fetched_at_ms: now,
                        value: Arc::new(value),
                    });
                    state.failures = 0;
                    state.retry_at_ms = 0;
                    state.last_error = None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "rate refresh failed; the cached rates serve while fresh");
                    let pause = (1_000i64 << state.failures.min(6)).min(MAX_RETRY_MS);
                    state.failures += 1;
                    state.retry_at_ms = now + pause;
                    state.last_error = Some(e);
                }
            }
        }
        self.done.notify_waiters();
    }
}

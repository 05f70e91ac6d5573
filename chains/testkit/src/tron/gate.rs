//! What a hosted Tron provider checks before it serves an rpc: the API key
//! in the request's metadata, and the key's request budget. Over budget it
//! answers `RESOURCE_EXHAUSTED` and suspends the key for a while, every
//! request refused meanwhile, in the words TronGrid uses ("The key exceeds
//! the frequency limit(15), and the query server is suspended for 30s"): a
//! client that keeps asking stays locked out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::{Request, Status};

#[derive(Debug)]
pub(super) struct Gate {
    /// (metadata name, lower case; value) every request must carry.
    api_key: Option<(String, String)>,
    /// Requests per second a key may start, and how long it is suspended
    /// past that.
    budget: Option<(u32, Duration)>,
    window: Mutex<Window>,
    refused: AtomicU64,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    count: u32,
    suspended_until: Option<Instant>,
}

impl Gate {
    pub(super) fn new(api_key: Option<(String, String)>, budget: Option<(u32, Duration)>) -> Gate {
        Gate {
            api_key: api_key.map(|(n, v)| (n.to_ascii_lowercase(), v)),
            budget,
            window: Mutex::new(Window {
                started: Instant::now(),
                count: 0,
                suspended_until: None,
            }),
            refused: AtomicU64::new(0),
        }
    }

    /// Requests refused for the budget so far.
    pub(super) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// A tonic interceptor, whose shape tonic fixes.
    #[allow(clippy::result_large_err)]
    pub(super) fn check(&self, req: Request<()>) -> Result<Request<()>, Status> {
        if let Some((name, value)) = &self.api_key {
            let given = req
                .metadata()
                .get(name.as_str())
                .and_then(|v| v.to_str().ok());
            if given != Some(value.as_str()) {
                return Err(Status::unauthenticated(format!(
                    "a valid API key is required in the {name} header"
                )));
            }
        }
        let Some((limit, suspension)) = self.budget else {
            return Ok(req);
        };
        let now = Instant::now();
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let refuse = |w: &Window| {
            let left = w
                .suspended_until
                .map_or(0, |u| u.saturating_duration_since(now).as_secs().max(1));
            Status::resource_exhausted(format!(
                "The key exceeds the frequency limit({limit}), and the query server is \
                 suspended for {left}s"
            ))
        };
        if w.suspended_until.is_some_and(|u| now < u) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(refuse(&w));
        }
        if now.duration_since(w.started) >= Duration::from_secs(1) {
            w.started = now;
            w.count = 0;
        }
        w.count += 1;
        if w.count > limit {
            w.suspended_until = Some(now + suspension);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(refuse(&w));
        }
        Ok(req)
    }
}

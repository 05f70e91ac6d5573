//! Leadership per network. Every instance runs one of these per enabled
//! network; only the holder of the network's lease runs its watcher, on a
//! store handle fenced by that lease. A holder that dies stops renewing, and
//! another instance takes over once the lease runs out, from the cursor in
//! the database. Reconcile and the API need no leader: they run everywhere
//! and rely on row locks and unique constraints.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paywatch_core::Network;
use tokio::sync::watch;
use tokio::task::JoinError;
use tracing::{error, info, warn};

use crate::metrics::WatcherMetrics;
use crate::settings::LeaseSettings;
use crate::store::{Lease, Store};

/// How one network's lease is sought and kept by this instance.
#[derive(Debug, Clone)]
pub(crate) struct Leadership {
    pub network: Network,
    /// Unfenced: the lease itself is read and written here.
    pub store: Store,
    pub holder: String,
    pub ttl: Duration,
    pub renew_every: Duration,
    pub retry_every: Duration,
    pub metrics: Arc<WatcherMetrics>,
    /// This process holds the database's run lock (SQLite): no other
    /// instance can be alive, so a lease left by a killed predecessor is
    /// taken at once instead of waited out.
    pub sole_instance: bool,
    /// This instance's money settings for the network
    /// ([`crate::money_settings`]): it takes the lease only while they are
    /// the ones pinned. `None`: not checked (tests of leadership alone).
    pub money_fingerprint: Option<String>,
}

enum Tenure {
    /// The daemon is stopping: the watcher finished its step, the lease is
    /// handed back.
    Stopping,
    /// Another instance holds the lease now, or it could not be renewed
    /// within its time: this one must stop writing.
    Lost(String),
}

impl Leadership {
    pub(crate) fn new(
        network: Network,
        store: Store,
        holder: String,
        settings: &LeaseSettings,
        metrics: Arc<WatcherMetrics>,
        sole_instance: bool,
    ) -> Leadership {
        Leadership {
            network,
            store,
            holder,
            ttl: Duration::from_millis(settings.ttl_ms),
            renew_every: Duration::from_millis(settings.renew_ms),
            retry_every: Duration::from_millis(settings.retry_ms),
            metrics,
            sole_instance,
            money_fingerprint: None,
        }
    }

    /// Takes the lease only while `fingerprint` is the network's pinned
    /// money settings.
    pub(crate) fn with_money_fingerprint(mut self, fingerprint: String) -> Leadership {
        self.money_fingerprint = Some(fingerprint);
        self
    }

    /// Whether this instance may hold the lease under the pinned money
    /// settings; says why not, once per change.
    async fn settles_as_pinned(&self, refusal_logged: &mut bool) -> bool {
        let Some(own) = &self.money_fingerprint else {
            return true;
        };
        match self.store.pinned_money_fingerprint(self.network).await {
            Ok(Some(pinned)) if &pinned != own => {
                self.metrics.set_money_settings_differ(true);
                if !*refusal_logged {
                    error!(alert = "money_settings_differ", pinned = %pinned, configured = %own,
                        "this instance's money settings are not the ones in force (paywatch config apply changed them): it will not take the watcher lease; restart it with the configuration in force");
                    *refusal_logged = true;
                }
                false
            }
            Ok(_) => {
                self.metrics.set_money_settings_differ(false);
                *refusal_logged = false;
                true
            }
            Err(e) => {
                warn!(error = %e, "cannot read the money settings in force; not asking for the lease");
                false
            }
        }
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Until `stop`: waits for the lease, runs the watcher `start` builds on
    /// a handle fenced by it while it is held, and starts over when it is
    /// lost. A watcher that halts keeps its lease: another instance would
    /// only halt on the same block. A watcher task that ends any other way
    /// (an error, a panic) is recorded as halted too, so a dead task never
    /// hides behind a lease this instance keeps renewing.
    pub(crate) async fn run<F, Fut>(self, mut start: F, mut stop: watch::Receiver<bool>)
    where
        F: FnMut(Store) -> Fut,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        loop {
            let Some(lease) = self.acquire(&mut stop).await else {
                return;
            };
            self.metrics.set_lease_held(true);
            // A tenure starts fresh: freshness counts from here until the
            // watcher's first step.
            self.metrics.record_step();
            info!(token = lease.token, holder = %self.holder, "watcher lease acquired; this instance watches the network");
            // `None` once it has ended by itself (halted).
            let mut watcher = Some(Tenant(tokio::spawn(start(self.store.fenced(lease)))));
            match self.hold(&lease, &mut watcher, &mut stop).await {
                Tenure::Stopping => {
                    if let Some(mut w) = watcher {
                        let _ = (&mut w.0).await;
                    }
                    if let Err(e) = self.store.release_lease(&lease).await {
                        warn!(error = %e, "could not hand the watcher lease back; it runs out by itself");
                    }
                    self.metrics.set_lease_held(false);
                    info!(token = lease.token, "watcher lease released");
                    return;
                }
                Tenure::Lost(why) => {
                    // Its writes already fail the fence; this only stops it
                    // trying. A transaction in flight rolls back when dropped.
                    if let Some(mut w) = watcher {
                        w.0.abort();
                        let _ = (&mut w.0).await;
                    }
                    self.metrics.set_lease_held(false);
                    self.metrics.record_lease_lost();
                    error!(alert = "lease_lost", token = lease.token, why = %why, "watcher lease lost; this instance stopped watching the network");
                }
            }
        }
    }

    /// Asks for the lease every `retry_every` until it is granted, or
    /// `None` once the daemon stops.
    async fn acquire(&self, stop: &mut watch::Receiver<bool>) -> Option<Lease> {
        let mut waiting_logged = false;
        let mut refusal_logged = false;
        loop {
            if *stop.borrow() {
                return None;
            }
            let asked = if !self.settles_as_pinned(&mut refusal_logged).await {
                Ok(None)
            } else if self.sole_instance {
                self.store
                    .take_lease(self.network, &self.holder, self.ttl_ms())
                    .await
                    .map(Some)
            } else {
                self.store
                    .try_acquire_lease(self.network, &self.holder, self.ttl_ms())
                    .await
            };
            match asked {
                Ok(Some(lease)) => return Some(lease),
                Ok(None) if !waiting_logged => {
                    info!("another instance holds the watcher lease; standing by");
                    waiting_logged = true;
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot ask for the watcher lease; retrying"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.retry_every) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// Renews the lease while the watcher runs, until the daemon stops or
    /// the lease is lost.
    async fn hold(
        &self,
        lease: &Lease,
        watcher: &mut Option<Tenant>,
        stop: &mut watch::Receiver<bool>,
    ) -> Tenure {
        let mut renewed_at = Instant::now();
        loop {
            if *stop.borrow() {
                return Tenure::Stopping;
            }
            let ended = tokio::select! {
                end = async { (&mut watcher.as_mut().expect("guarded").0).await }, if watcher.is_some() => Some(end),
                _ = tokio::time::sleep(self.renew_every) => {
                    match self.store.renew_lease(lease, self.ttl_ms()).await {
                        Ok(true) => renewed_at = Instant::now(),
                        Ok(false) => return Tenure::Lost("another instance took it over".into()),
                        // Not renewed within its time: another instance may
                        // hold it by now, so this one stops rather than find
                        // out by a failed write.
                        Err(e) if renewed_at.elapsed() >= self.ttl => {
                            return Tenure::Lost(format!(
                                "not renewed for {} ms: {e}",
                                renewed_at.elapsed().as_millis()
                            ))
                        }
                        Err(e) => warn!(error = %e, "watcher lease renewal failed; retrying"),
                    }
                    None
                }
                changed = stop.changed() => {
                    if changed.is_err() {
                        return Tenure::Stopping;
                    }
                    None
                }
            };
            if let Some(end) = ended {
                *watcher = None;
                if !*stop.borrow() {
                    self.record_end(lease, end).await;
                }
            }
        }
    }

    /// Records why a watcher task ended before the daemon stopped, as the
    /// network's `halted` state, unless the watcher recorded its own halt.
    /// Written through the fenced handle: after a takeover the state is
    /// the new holder's.
    async fn record_end(&self, lease: &Lease, end: Result<Result<(), String>, JoinError>) {
        let why = match end {
            // Fenced out: the lease is lost, and renewing will say so.
            Ok(Ok(())) => return,
            Ok(Err(why)) => why,
            Err(e) if e.is_panic() => format!("watcher task panicked: {}", panic_text(e)),
            Err(e) => format!("watcher task ended: {e}"),
        };
        error!(alert = "watcher_ended", why = %why, "the watcher task ended; this instance keeps the lease and watches nothing until restarted");
        let fenced = self.store.fenced(*lease);
        let now = crate::store::now_ms();
        let recorded = async {
            let halted_by_itself = fenced
                .chain_status(self.network)
                .await?
                .is_some_and(|s| s.watcher_state == "halted");
            if !halted_by_itself {
                fenced.ensure_chain_state(self.network, now).await?;
                fenced
                    .record_watcher_trouble(self.network, "halted", &why, now)
                    .await?;
            }
            Ok::<_, crate::store::StoreError>(())
        };
        if let Err(e) = recorded.await {
            warn!(error = %e, "could not record the watcher's end");
        }
    }
}

/// A panic's message, when it was a string.
fn panic_text(e: JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// The watcher task of one tenure. Aborted when dropped: a daemon dropped
/// mid-run (a test's stand-in for SIGKILL) must not leave its watcher
/// running on, detached, until its writes hit the fence.
struct Tenant(tokio::task::JoinHandle<Result<(), String>>);

impl Drop for Tenant {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// This instance's name in the lease table: the configured one, else host,
/// pid and a random suffix, so two processes never share a name.
pub(crate) fn instance_name(configured: &str) -> String {
    if !configured.trim().is_empty() {
        return configured.trim().to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".to_owned());
    let mut bytes = [0u8; 4];
    // The pid alone already tells processes on one host apart; the suffix
    // only guards against pid reuse across restarts.
    let _ = getrandom::getrandom(&mut bytes);
    format!(
        "{host}/{}/{:08x}",
        std::process::id(),
        u32::from_le_bytes(bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn leadership(dir: &tempfile::TempDir) -> Leadership {
        let url = format!("sqlite://{}", dir.path().join("p.db").display());
        let store = Store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        Leadership {
            network: Network::Litecoin,
            store,
            holder: "a".into(),
            ttl: Duration::from_secs(5),
            renew_every: Duration::from_millis(50),
            retry_every: Duration::from_millis(50),
            metrics: Arc::default(),
            sole_instance: true,
            money_fingerprint: None,
        }
    }

    /// Runs `leadership` with a watcher task that writes `running`, then
    /// ends as `end` says, and returns the network's state once it changes.
    async fn state_after(
        end: impl Fn() -> Result<(), String> + Send + Sync + Clone + 'static,
    ) -> (String, Option<String>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let leadership = leadership(&dir).await;
        let (store, metrics) = (leadership.store.clone(), leadership.metrics.clone());
        let (stop_tx, stop_rx) = watch::channel(false);
        let start = move |fenced: Store| {
            let end = end.clone();
            async move {
                fenced
                    .ensure_chain_state(Network::Litecoin, 1)
                    .await
                    .unwrap();
                fenced
                    .record_watcher_trouble(Network::Litecoin, "running", "", 1)
                    .await
                    .unwrap();
                end()
            }
        };
        let task = tokio::spawn(leadership.run(start, stop_rx));
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            let status = store.chain_status(Network::Litecoin).await.unwrap();
            if let Some(s) = status.filter(|s| s.watcher_state == "halted") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the ended watcher was never recorded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let held = metrics.holds_lease();
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        (status.watcher_state, status.last_error, held)
    }

    #[tokio::test]
    async fn a_watcher_task_that_panics_is_recorded_halted_not_left_running() {
        let (state, error, held) = state_after(|| panic!("index out of bounds")).await;
        assert_eq!(state, "halted");
        let error = error.unwrap_or_default();
        assert!(
            error.contains("watcher task panicked") && error.contains("index out of bounds"),
            "{error}"
        );
        // Kept, like any halt: the state says an operator must act.
        assert!(held);
    }

    #[tokio::test]
    async fn a_watcher_task_that_ends_with_an_error_is_recorded_halted_naming_it() {
        let (state, error, _) =
            state_after(|| Err("the watcher's source cannot be built: bad url".into())).await;
        assert_eq!(state, "halted");
        assert_eq!(
            error.as_deref(),
            Some("the watcher's source cannot be built: bad url")
        );
    }

    /// Issue 21, found 8: an instance still configured with the money
    /// settings `paywatch config apply` replaced never takes the lease, even
    /// a free one, and says so in its metrics; with the settings in force it
    /// does.
    #[tokio::test]
    async fn an_instance_whose_money_settings_are_not_in_force_never_takes_the_lease() {
        let dir = tempfile::tempdir().unwrap();
        let base = leadership(&dir).await;
        let store = base.store.clone();
        let settings = |confirmations: u64| crate::money_settings::MoneySettings {
            network: Network::Litecoin,
            json: format!("{{\"confirmations\":{confirmations}}}"),
            fingerprint: format!("fp-{confirmations}"),
        };
        store
            .apply_money(Network::Litecoin, &settings(6), "ops", 1, false, None)
            .await
            .unwrap();

        let stale = base.clone().with_money_fingerprint("fp-2".into());
        let metrics = stale.metrics.clone();
        let (_stop_tx, mut stop_rx) = watch::channel(false);
        let asked =
            tokio::time::timeout(Duration::from_millis(400), stale.acquire(&mut stop_rx)).await;
        assert!(asked.is_err(), "the stale instance took the lease");
        assert!(store.lease_holders().await.unwrap().is_empty());
        assert!(metrics.money_settings_differ());

        let current = base.with_money_fingerprint("fp-6".into());
        let lease = tokio::time::timeout(Duration::from_secs(5), current.acquire(&mut stop_rx))
            .await
            .expect("the current instance takes it")
            .expect("a lease");
        assert_eq!(lease.network, Network::Litecoin);
    }
}

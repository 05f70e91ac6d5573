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
        }
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// Until `stop`: waits for the lease, runs the watcher `start` builds on
    /// a handle fenced by it while it is held, and starts over when it is
    /// lost. A watcher that halts keeps its lease: another instance would
    /// only halt on the same block.
    pub(crate) async fn run<F, Fut>(self, mut start: F, mut stop: watch::Receiver<bool>)
    where
        F: FnMut(Store) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            let Some(lease) = self.acquire(&mut stop).await else {
                return;
            };
            self.metrics.set_lease_held(true);
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
        loop {
            if *stop.borrow() {
                return None;
            }
            let asked = if self.sole_instance {
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
                _ = async { (&mut watcher.as_mut().expect("guarded").0).await }, if watcher.is_some() => true,
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
                    false
                }
                changed = stop.changed() => {
                    if changed.is_err() {
                        return Tenure::Stopping;
                    }
                    false
                }
            };
            if ended {
                *watcher = None;
            }
        }
    }
}

/// The watcher task of one tenure. Aborted when dropped: a daemon dropped
/// mid-run (a test's stand-in for SIGKILL) must not leave its watcher
/// running on, detached, until its writes hit the fence.
struct Tenant(tokio::task::JoinHandle<()>);

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

//! The daemon: one task per enabled network, the reconciler, and shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use paywatch_core::{BlockSource, Network, WatchSet};

use crate::chains;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::{error, info, warn, Instrument};

use crate::clock::{Clock, DatabaseClock};
use crate::devnet::DevChains;
use crate::ingest::Ingest;
use crate::intents::{
    ExchangeRates, FixedRates, HttpJsonRates, IntentService, RateBook, RateSource,
};
use crate::leader::Leadership;
use crate::metrics::MetricsState;
use crate::reconcile::Reconciler;
use crate::settings::{Settings, SettingsError};
use crate::store::{Store, StoreError};
use crate::watcher::{self, Dormancy, WatcherConfig, WatcherDeps};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Chain(#[from] crate::chains::ChainSetupError),
    #[error("cannot serve the API on api.listen: {0}")]
    ApiListen(std::io::Error),
    // Not a `source`: the message already carries it, once.
    #[error("cannot serve metrics on metrics.listen = '{listen}': {error}")]
    MetricsListen {
        listen: String,
        error: std::io::Error,
    },
    #[error(transparent)]
    ApiTokens(#[from] crate::api::TokenConfigError),
    #[error(transparent)]
    RunLock(#[from] crate::store::RunLockError),
    #[error(transparent)]
    Keys(#[from] crate::keys::KeyError),
    #[error(transparent)]
    Agreement(#[from] crate::money_settings::AgreementError),
    #[error(
        "networks.{network} is not enabled, but {open} intents on it are still open (awaiting \
         payment or confirming): payments to them would not be seen. Enable it again, or set \
         networks.{network}.leave_open_intents_unwatched = true to start anyway"
    )]
    OpenIntentsUnwatched { network: String, open: i64 },
}

/// What a command may do to the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Bring it up to this binary's migrations: `paywatch migrate`, and
    /// `run` on SQLite under its run lock.
    Migrate,
    /// Require it to be at least this binary's, changing nothing: commands
    /// that only read, so a new binary's `paywatch status` upgrades nothing.
    Current,
    /// Create the schema in a database that has none (nobody can be using
    /// it); otherwise as [`Schema::Current`]: `run` on PostgreSQL and the
    /// commands that write, so an upgrade is always its own step.
    CreateOrCurrent,
}

/// Everything built from settings, shared by `run` and the one-shot commands.
#[derive(Debug, Clone)]
pub struct Context {
    pub settings: Settings,
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub watch: HashMap<Network, Arc<WatchSet>>,
    pub intents: IntentService,
    pub reconciler: Reconciler,
}

impl Context {
    /// Connects, migrates and wires the services.
    pub async fn build(settings: Settings) -> Result<Context, AppError> {
        Context::build_with(settings, Schema::Migrate).await
    }

    /// Connects and wires the services; with [`Schema::Current`] the
    /// schema is only checked, never changed.
    pub async fn build_with(settings: Settings, schema: Schema) -> Result<Context, AppError> {
        let store = Store::connect(&settings.database.url).await?;
        match schema {
            Schema::Migrate => store.migrate().await?,
            Schema::Current => store.require_current_schema().await?,
            Schema::CreateOrCurrent => store.create_or_require_current_schema().await?,
        }
        // "Now" for money decisions is the database's, so every instance
        // sharing it agrees on what is late.
        let clock: Arc<dyn Clock> = DatabaseClock::start(store.clone()).await?;
        let watch: HashMap<Network, Arc<WatchSet>> = settings
            .enabled_networks()
            .into_iter()
            .map(|n| (n, Arc::new(chains::watch_set(n, settings.network(n)))))
            .collect();
        let mut derivers = HashMap::new();
        for network in settings.enabled_networks() {
            let ns = settings
                .network(network)
                .expect("enabled networks have settings");
            if let Some(d) = chains::deriver(network, ns)? {
                derivers.insert(network, d);
            }
        }
        let source: Arc<dyn RateSource> = match settings.rates.source.as_str() {
            "http" => Arc::new(HttpJsonRates::new(
                settings.rates.http.url.clone(),
                settings.rates.http.max_age_secs,
                settings.rates.http.refresh_secs,
                clock.clone(),
            )),
            "exchanges" => Arc::new(
                ExchangeRates::new(
                    &settings.exchange_providers(),
                    settings.exchange_policy(),
                    clock.clone(),
                )
                .map_err(|why| SettingsError::Invalid(format!("rates.exchanges: {why}")))?,
            ),
            _ => Arc::new(FixedRates::new(settings.fixed_rates()?, clock.clone())),
        };
        let rates = RateBook::new(source, settings.rates.stablecoins_at_par, clock.clone());
        let intents = IntentService::new(
            store.clone(),
            rates,
            settings.intent_policy()?,
            derivers,
            watch.clone(),
            clock.clone(),
        );
        let reconciler = Reconciler::new(
            store.clone(),
            clock.clone(),
            settings.tolerances()?,
            settings.reconcile.batch_size,
        )
        .with_confirm_windows(settings.confirm_windows()?)
        .with_dust_floors(settings.dust_floors()?)
        .with_refund_check_secs(i64::from(settings.reconcile.refund_check_secs));
        Ok(Context {
            settings,
            store,
            clock,
            watch,
            intents,
            reconciler,
        })
    }
}

/// Runs until SIGINT or SIGTERM, then stops every task between two events.
pub async fn run(ctx: Context) -> Result<(), AppError> {
    run_until(ctx, shutdown_signal()).await
}

/// Runs until `shutdown` completes, then stops every task between two events.
pub async fn run_until(
    ctx: Context,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AppError> {
    let metrics = MetricsState::new(&ctx);
    run_until_with_metrics(ctx, metrics, shutdown).await
}

/// [`run_until`], with the watchers counting into `metrics`: a clone of it
/// served elsewhere (a test's own listener) shows this daemon's counters.
pub async fn run_until_with_metrics(
    ctx: Context,
    metrics: MetricsState,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AppError> {
    // First of all: a second instance on one SQLite file must not start.
    let run_lock = crate::store::RunLock::acquire(&ctx.settings.database.url).await?;
    // Bound before anything starts, so a taken port stops a clean process.
    let metrics_listener = crate::metrics::bind(&ctx.settings.metrics)
        .await
        .map_err(|error| AppError::MetricsListen {
            listen: ctx.settings.metrics.listen.clone(),
            error,
        })?;
    // Again here: settings built in code never went through load.
    ctx.settings.check_sources()?;
    refuse_unwatched_open_intents(&ctx).await?;
    // Before anything is written under them: the money settings are those in
    // force (the first instance pins its own).
    let instance = crate::leader::instance_name(&ctx.settings.leases.instance);
    crate::money_settings::agree_at_start(&ctx.store, &ctx.settings, &instance, ctx.clock.now_ms())
        .await?;
    // Before any address is issued: the configured keys are the keys in use.
    for key in crate::keys::check_keys(&ctx.store, ctx.intents.derivers()).await? {
        tracing::info!(network = %key.network, fingerprint = %key.fingerprint,
            next_index = key.next_index, adopted = key.adopted, "account key checked");
    }
    // Rates fetched from now on, so the first quote finds them cached.
    ctx.intents.warm_up_rates();
    let (stop_tx, stop_rx) = watch::channel(false);
    let progress = Arc::new(Notify::new());
    let mut tasks = JoinSet::new();
    let devchains = DevChains::default();

    for network in ctx.settings.enabled_networks() {
        let ns = ctx
            .settings
            .network(network)
            .expect("enabled networks have settings")
            .clone();
        let cfg = WatcherConfig {
            network,
            start_height: ns.start_height,
            max_reorg_depth: ns.max_reorg_depth,
            poll_interval: Duration::from_millis(ns.poll_interval_ms),
            events_per_transaction: ns.events_per_transaction,
            blocks_per_poll: ns.blocks_per_poll,
            dormancy: (ns.source == "electrum").then(|| Dormancy {
                dormant_after: Duration::from_secs(ns.electrum.dormant_after_secs),
                sweep_every: Duration::from_secs(ns.electrum.sweep_every_secs),
                page: ns.electrum.batch_size,
            }),
            backstop_after_end: Duration::from_secs(ns.backstop_after_end_secs),
        };
        let watch = ctx.watch[&network].clone();
        let counters = metrics.watcher(network);
        // Built here, at start, so a bad setting stops a clean process. The
        // first tenure of the lease uses it; later ones build their own.
        let mut node = chains::source(network, &ns, watch.clone())?;
        let devchain = match node {
            Some(_) => None,
            None => {
                let stored_tip = ctx.store.load_cursor(network, 1).await?.pop();
                Some(devchains.start(
                    network,
                    &ns,
                    &ctx.settings.devchain,
                    stored_tip,
                    &mut tasks,
                    stop_rx.clone(),
                ))
            }
        };
        if node.is_some()
            && ctx.settings.devchain.autopay
            && ctx.settings.devchain.regtest_customer
            && ns.source == "node"
            && ns.chain == "regtest"
        {
            DevChains::spawn_regtest_customer(
                network,
                &ns,
                &ctx.settings.devchain,
                ctx.store.clone(),
                &mut tasks,
                stop_rx.clone(),
            );
        }
        let (clock, progress, stop) = (ctx.clock.clone(), progress.clone(), stop_rx.clone());
        let watcher_counters = counters.clone();
        // One tenure of the lease: the watcher, writing only through the
        // fenced handle, from the cursor the database holds.
        let start = move |fenced: Store| {
            let deps = WatcherDeps {
                ingest: Ingest::new(fenced.clone(), clock.clone()),
                store: fenced,
                watch: watch.clone(),
                clock: clock.clone(),
                progress: progress.clone(),
            };
            let source = match (&devchain, node.take()) {
                (Some(chain), _) => Ok(Some(
                    Arc::new(chain.source(watch.clone())) as Arc<dyn BlockSource>
                )),
                (None, Some(first)) => Ok(Some(first)),
                (None, None) => chains::source(network, &ns, watch.clone()),
            };
            let (cfg, counters, stop) = (cfg.clone(), watcher_counters.clone(), stop.clone());
            async move {
                let source = match source {
                    Ok(Some(source)) => source,
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        error!(error = %e, "watcher source cannot be built");
                        return Err(format!("the watcher's source cannot be built: {e}"));
                    }
                };
                watcher::run_with_metrics(cfg, source, deps, counters, stop)
                    .await
                    .map_err(|e| {
                        error!(error = %e, "watcher ended");
                        e.to_string()
                    })
            }
        };
        let leadership = Leadership::new(
            network,
            ctx.store.clone(),
            instance.clone(),
            &ctx.settings.leases,
            counters,
            run_lock.is_some(),
        )
        .with_money_fingerprint(
            crate::money_settings::MoneySettings::of(&ctx.settings, network)?.fingerprint,
        );
        let stop = stop_rx.clone();
        tasks.spawn(
            leadership
                .run(start, stop)
                .instrument(tracing::info_span!("lease", network = %network)),
        );
    }
    if ctx.settings.devchain.autopay {
        devchains.spawn_autopay(ctx.store.clone(), &mut tasks, stop_rx.clone());
    }

    if let Some(listener) = crate::api::bind(&ctx).await.map_err(AppError::ApiListen)? {
        let state = crate::api::ApiState::new(ctx.clone())?.with_recheck(progress.clone());
        let mut stop = stop_rx.clone();
        tasks.spawn(
            async move {
                let stopped = async move {
                    let _ = stop.changed().await;
                };
                if let Err(e) = crate::api::serve(listener, state, stopped).await {
                    error!(error = %e, "API server ended");
                }
            }
            .instrument(tracing::info_span!("api")),
        );
    }

    let reconcile_metrics = metrics.reconcile();
    if let Some(listener) = metrics_listener {
        let state = metrics;
        let mut stop = stop_rx.clone();
        tasks.spawn(
            async move {
                let stopped = async move {
                    let _ = stop.changed().await;
                };
                if let Err(e) = crate::metrics::serve(listener, state, stopped).await {
                    error!(error = %e, "metrics server ended");
                }
            }
            .instrument(tracing::info_span!("metrics")),
        );
    }

    let reconciler = ctx.reconciler.clone();
    let interval = Duration::from_millis(ctx.settings.reconcile.interval_ms);
    let mut stop = stop_rx.clone();
    let reconcile = async move {
        loop {
            let pass = reconciler.run_until_idle().await;
            reconcile_metrics.record_pass(pass.is_ok());
            match pass {
                Ok(r) if r.changed > 0 => info!(
                    examined = r.examined,
                    changed = r.changed,
                    settled = r.settled,
                    reversed = r.reversed,
                    "reconciled"
                ),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "reconcile pass failed; retrying"),
            }
            tokio::select! {
                _ = progress.notified() => {}
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => break,
            }
        }
    };
    tasks.spawn(reconcile.instrument(tracing::info_span!("reconcile")));

    if ctx.settings.events.retention_days > 0 {
        tasks.spawn(
            crate::feed_retention::run(
                ctx.store.clone(),
                ctx.clock.clone(),
                ctx.settings.events.retention_days,
                stop_rx.clone(),
            )
            .instrument(tracing::info_span!("feed_retention")),
        );
    }

    if ctx.settings.blocks.retention_days > 0 {
        let networks = ctx
            .settings
            .enabled_networks()
            .into_iter()
            .filter_map(|n| {
                let depth = ctx.settings.network(n)?.max_reorg_depth;
                Some((n, u64::try_from(depth).unwrap_or(u64::MAX)))
            })
            .collect();
        tasks.spawn(
            crate::block_retention::run(
                ctx.store.clone(),
                ctx.clock.clone(),
                networks,
                ctx.settings.blocks.retention_days,
                stop_rx.clone(),
            )
            .instrument(tracing::info_span!("block_retention")),
        );
    }

    if ctx.settings.webhooks.enabled() {
        let webhooks = crate::webhooks::run(
            ctx.store.clone(),
            ctx.settings.clone(),
            ctx.clock.clone(),
            stop_rx.clone(),
        );
        tasks.spawn(
            async move {
                if let Err(e) = webhooks.await {
                    error!(error = %e, "webhook delivery ended");
                }
            }
            .instrument(tracing::info_span!("webhooks")),
        );
    }

    info!(networks = ?ctx.settings.enabled_networks(), database = ctx.store.dialect().as_str(), "paywatch running");
    shutdown.await;
    info!("shutting down");
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    ctx.store.close().await;
    Ok(())
}

/// A network switched off while customers can still pay its intents would
/// leave those payments unseen, silently: refused unless the operator says
/// so for that network. Several instances may enable different networks,
/// but each must say so for what it leaves off.
async fn refuse_unwatched_open_intents(ctx: &Context) -> Result<(), AppError> {
    let enabled = ctx.settings.enabled_networks();
    for (name, open) in ctx.store.open_intents_by_network().await? {
        let network = name.parse::<Network>().ok();
        if network.is_some_and(|n| enabled.contains(&n)) {
            continue;
        }
        let accepted = network
            .and_then(|n| ctx.settings.network(n))
            .is_some_and(|ns| ns.leave_open_intents_unwatched);
        if accepted {
            warn!(network = %name, open, "network off with open intents; payments to them are not seen");
        } else {
            return Err(AppError::OpenIntentsUnwatched {
                network: name,
                open,
            });
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

//! paywatch: a multi-chain payment watcher and reconciliation daemon.
//!
//! chain node → source (chain crate) → canonical stream (paywatch-core) →
//! [`ingest`] → [`reconcile`] → shared database → storefront, operators, support.

pub mod api;
pub mod app;
mod block_retention;
pub mod chains;
pub mod clock;
mod config_keys;
pub mod config_report;
mod console;
mod devnet;
pub mod export;
mod feed_retention;
pub mod ingest;
pub mod intents;
pub mod keys;
mod leader;
pub mod metrics;
pub mod money_settings;
mod pasted;
mod pay;
pub mod payment_uri;
pub mod reconcile;
pub mod restore;
pub mod settings;
pub mod store;
mod text;
pub mod twin;
pub mod watcher;
pub mod webhooks;

mod kind;

pub use kind::IntentKind;

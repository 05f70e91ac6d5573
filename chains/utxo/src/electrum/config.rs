//! How to reach an Electrum server and what to ask of it.

use crate::params::Params;

#[derive(Debug, Clone)]
pub struct ElectrumConfig {
    pub params: Params,
    /// `tcp://host:port` or `host:port`. Plain TCP only: this build has no
    /// TLS, so a remote server is reached through a tunnel.
    pub url: String,
    /// A block with this many confirmations is final.
    pub confirmations: u32,
    /// Addresses or transactions asked about per batched request.
    pub batch_size: usize,
    /// The most addresses this source subscribes to. A server holds one
    /// subscription per address and most limit them per client; past this
    /// number the source stops with an error saying so.
    pub max_subscriptions: usize,
    /// Follow the server's mempool, so payments show at zero confirmations.
    pub mempool: bool,
}

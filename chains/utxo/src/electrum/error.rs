//! What can go wrong with an Electrum server, and how electrum-client's
//! errors read as ours.

use paywatch_core::{Network, SourceError};
use serde_json::Value;

use super::conn::TIMEOUT;
use super::Inner;
use crate::params::Chain;

/// What went wrong with an Electrum server, said so an operator can act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectrumError {
    #[error(
        "the Electrum source needs a watch set that lists its addresses (WatchSet::listing): \
         an Electrum server is asked about each address by name"
    )]
    NotListing,
    #[error(
        "the watch set is for {watch}, but the Electrum source is configured for {configured}"
    )]
    WrongNetwork { watch: Network, configured: Network },
    #[error("Electrum server URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Unreachable, closed the connection, or too slow.
    #[error("Electrum server at {url}: {detail}")]
    Transport { url: String, detail: String },
    /// The server refused a request.
    #[error("Electrum server at {url} answered {method} with an error: {message}")]
    Server {
        url: String,
        method: String,
        message: String,
    },
    #[error("Electrum server at {url} sent an unusable answer to {method}: {detail}")]
    BadAnswer {
        url: String,
        method: String,
        detail: String,
    },
    #[error(
        "Electrum server at {url} serves {theirs} (genesis block {genesis}), \
         but paywatch is configured for {network} {chain}"
    )]
    WrongChain {
        url: String,
        theirs: String,
        genesis: String,
        network: Network,
        chain: Chain,
    },
    /// More watched addresses than `max_subscriptions`.
    #[error(
        "{count} {network} addresses are watched, more than the Electrum source's limit of \
         {limit} (electrum.max_subscriptions): an Electrum server holds one subscription per \
         address, and those of intents still open or ended within electrum.dormant_after_secs \
         stay subscribed. Lower electrum.dormant_after_secs, watch {network} with a full node \
         source instead, or raise the server's subscription limit and \
         electrum.max_subscriptions together"
    )]
    TooManyAddresses {
        network: Network,
        count: usize,
        limit: usize,
    },
    /// The server refused a subscription for its own limit.
    #[error(
        "Electrum server at {url} refused to watch more addresses after {subscribed} of the \
         {count} {network} addresses: {message}. Raise the server's subscription limit \
         (ElectrumX MAX_SESSION_SUBS/MAX_SUBS, Fulcrum max_subs_per_ip/max_subs) above \
         electrum.max_subscriptions, or watch {network} with a full node source"
    )]
    SubscriptionLimit {
        url: String,
        network: Network,
        subscribed: usize,
        count: usize,
        message: String,
    },
    /// A history placed a transaction in a block that does not hold it.
    #[error(
        "Electrum server at {url}: server history behind its headers at height {height} \
         ({detail}); retrying"
    )]
    StaleHistory {
        url: String,
        height: u64,
        detail: String,
    },
    #[error("Electrum server at {url}: its chain kept changing while {doing}; retrying")]
    Unsettled { url: String, doing: String },
}

impl ElectrumError {
    /// Whether this needs an operator: retrying will not help.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            ElectrumError::NotListing
                | ElectrumError::WrongNetwork { .. }
                | ElectrumError::InvalidUrl { .. }
                | ElectrumError::WrongChain { .. }
                | ElectrumError::TooManyAddresses { .. }
                | ElectrumError::SubscriptionLimit { .. }
        )
    }

    /// Whether the connection can no longer be trusted to be in step.
    pub(super) fn drops_connection(&self) -> bool {
        matches!(
            self,
            ElectrumError::Transport { .. }
                | ElectrumError::BadAnswer { .. }
                | ElectrumError::WrongChain { .. }
                | ElectrumError::SubscriptionLimit { .. }
        )
    }
}

impl From<ElectrumError> for SourceError {
    fn from(e: ElectrumError) -> SourceError {
        if e.is_fatal() {
            SourceError::Fatal(e.to_string())
        } else {
            SourceError::Transient(e.to_string())
        }
    }
}

impl Inner {
    pub(super) fn error(&self, method: &str, e: electrum_client::Error) -> ElectrumError {
        use electrum_client::Error as E;
        let transport = |detail: String| ElectrumError::Transport {
            url: self.url.clone(),
            detail: format!("{method}: {detail}"),
        };
        match e {
            E::Protocol(v) => ElectrumError::Server {
                url: self.url.clone(),
                method: method.to_owned(),
                message: server_message(&v),
            },
            E::IOError(e) => transport(io_detail(&e)),
            E::SharedIOError(e) => transport(io_detail(&e)),
            E::AllAttemptsErrored(errors) if errors.is_empty() => {
                transport("the host name resolves to no address".to_owned())
            }
            E::AllAttemptsErrored(errors) => transport(
                errors
                    .iter()
                    .map(|e| match e {
                        E::IOError(e) => io_detail(e),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            // A closed connection reads as an empty line, which is no JSON.
            E::JSON(e) if e.is_eof() => transport("the server closed the connection".to_owned()),
            E::JSON(e) => self.bad(method, e.to_string()),
            E::InvalidResponse(v) => self.bad(method, v.to_string()),
            E::Hex(e) => self.bad(method, e.to_string()),
            E::Bitcoin(e) => self.bad(method, e.to_string()),
            other => transport(other.to_string()),
        }
    }

    pub(super) fn bad(&self, method: &str, detail: String) -> ElectrumError {
        ElectrumError::BadAnswer {
            url: self.url.clone(),
            method: method.to_owned(),
            detail,
        }
    }

    pub(super) fn unsettled(&self, doing: &str) -> ElectrumError {
        ElectrumError::Unsettled {
            url: self.url.clone(),
            doing: doing.to_owned(),
        }
    }
}

fn server_message(v: &Value) -> String {
    let message = v.get("message").and_then(Value::as_str);
    let code = v.get("code").and_then(Value::as_i64);
    let mut out = match (message, code) {
        (Some(m), Some(c)) => format!("{m} (code {c})"),
        (Some(m), None) => m.to_owned(),
        _ => v.to_string(),
    };
    if out.contains("excessive resource usage") {
        out.push_str(
            "; the server rate-limits this client (ElectrumX: COST_SOFT_LIMIT/COST_HARD_LIMIT)",
        );
    }
    out
}

fn io_detail(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!("no answer within {TIMEOUT:?}"),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_and_transient() {
        let limit = ElectrumError::SubscriptionLimit {
            url: "tcp://h:1".into(),
            network: Network::Litecoin,
            subscribed: 3,
            count: 9,
            message: "your address subscription limit 3 reached".into(),
        };
        let SourceError::Fatal(msg) = SourceError::from(limit) else {
            panic!("a server limit needs an operator");
        };
        assert!(
            msg.contains("tcp://h:1") && msg.contains("max_subscriptions"),
            "{msg}"
        );
        let transport = ElectrumError::Transport {
            url: "tcp://h:1".into(),
            detail: "connection refused".into(),
        };
        assert!(SourceError::from(transport).is_transient());
    }
}

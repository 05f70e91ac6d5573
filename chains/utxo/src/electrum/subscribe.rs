//! Watched addresses: taken in from the watch set, subscribed on the
//! connection, and marked for a new reading when the server says they changed.

use std::collections::HashMap;

use bitcoin::hex::DisplayHex as _;
use bitcoin::ScriptBuf;
use electrum_client::{ElectrumApi as _, Param, ToElectrumScriptHash};
use paywatch_core::Listing;
use tracing::{debug, warn};

use super::conn::Conn;
use super::history::{Status, Watched};
use super::tap;
use super::{ElectrumError, Inner, State};
use crate::address::script_for_address;

impl Inner {
    pub(super) fn has_new_addresses(&self, st: &State) -> bool {
        !self
            .watch
            .listing_since(st.generation, st.listed)
            .is_unchanged()
    }

    /// Follows addresses leaving the watch set (gone dormant): the list is
    /// taken in again, keeping the histories already read, and true tells
    /// the caller to drop the connection, since only a new one frees the
    /// server's subscriptions (`blockchain.scripthash.unsubscribe` came
    /// with protocol 1.4.2, and not every server in use has it).
    pub(super) fn follow_removals(&self, st: &mut State) -> bool {
        let Listing::Rebuilt {
            generation,
            addresses,
        } = self.watch.listing_since(st.generation, st.listed)
        else {
            return false;
        };
        let mut held: HashMap<ScriptBuf, Watched> = st
            .watched
            .drain(..)
            .map(|w| (w.script.clone(), w))
            .collect();
        let before = held.len();
        st.known.clear();
        st.dirty.clear();
        for address in &addresses {
            if let Ok((_, script)) = script_for_address(self.cfg.params.network, address) {
                if st.known.insert(script.clone()) {
                    let w = held.remove(&script).unwrap_or_else(|| Watched::new(script));
                    if w.history.is_none() {
                        st.dirty.insert(st.watched.len());
                    }
                    st.watched.push(w);
                }
            }
        }
        st.generation = generation;
        st.listed = addresses.len();
        st.snapshot = None;
        st.ahead = None;
        debug!(url = %self.url, before, after = st.watched.len(),
            "addresses left the watch set; subscribing the rest on a new connection");
        true
    }

    pub(super) fn take_in_addresses(&self, st: &mut State) -> Result<(), ElectrumError> {
        let Listing::Appended(fresh) = self.watch.listing_since(st.generation, st.listed) else {
            // Removals are followed before a connection is used.
            return Ok(());
        };
        let count = st.listed + fresh.len();
        if count > self.cfg.max_subscriptions {
            return Err(ElectrumError::TooManyAddresses {
                network: self.cfg.params.network,
                count,
                limit: self.cfg.max_subscriptions,
            });
        }
        for address in fresh {
            st.listed += 1;
            match script_for_address(self.cfg.params.network, &address) {
                Ok((_, script)) => {
                    if st.known.insert(script.clone()) {
                        st.dirty.insert(st.watched.len());
                        st.watched.push(Watched::new(script));
                    }
                }
                Err(e) => {
                    warn!(%address, error = %e, "not an address an Electrum server can watch; it is never matched");
                }
            }
        }
        Ok(())
    }

    pub(super) fn subscribe(&self, conn: &mut Conn, st: &mut State) -> Result<(), ElectrumError> {
        let count = st.watched.len();
        while conn.subscribed < count {
            let start = conn.subscribed;
            let end = start.saturating_add(self.batch_size()).min(count);
            let scripts: Vec<&bitcoin::Script> = st.watched[start..end]
                .iter()
                .map(|w| w.script.as_script())
                .collect();
            // The client records the subscriptions before it asks: whatever
            // goes wrong now leaves it out of step with the server.
            conn.broken = true;
            tap::lock(&conn.refusals).watch();
            let statuses = conn.client.batch_script_subscribe(scripts.iter().copied());
            let refused = tap::lock(&conn.refusals).take();
            let statuses = statuses.map_err(|e| self.subscribe_error(e, start, end, count))?;
            if statuses.len() != scripts.len() {
                return Err(self.bad(
                    "blockchain.scripthash.subscribe",
                    format!(
                        "{} answers to {} subscriptions",
                        statuses.len(),
                        scripts.len()
                    ),
                ));
            }
            let mut statuses: Vec<Status> = statuses.into_iter().map(|s| s.map(|s| *s)).collect();
            // electrum-client reads a subscription refused in a batch as "no
            // history yet" (null); the tap saw which. Each is asked again,
            // alone, where its error cannot be lost: an unknown status is
            // never taken for an empty history, and an address the server
            // did not subscribe would never be notified about.
            for (refused, message) in refused {
                let Some(at) = scripts.iter().position(|s| scripthash_hex(s) == refused) else {
                    continue;
                };
                debug!(url = %self.url, %message, address = start + at + 1,
                    "the server refused a subscription in a batch; asking again alone");
                let answer = conn
                    .client
                    .raw_call("blockchain.scripthash.subscribe", [Param::String(refused)])
                    .map_err(|e| self.subscribe_error(e, start + at, start + at + 1, count))?;
                statuses[at] = self.status_in(&answer)?;
            }
            conn.broken = false;
            conn.subscribed = end;
            // Only what changed since the histories were read is read again;
            // after a reconnect, that is what moved while it was away.
            for (i, status) in (start..end).zip(statuses) {
                if st.watched[i].heard(status) {
                    st.dirty.insert(i);
                } else {
                    st.dirty.remove(&i);
                }
            }
        }
        Ok(())
    }

    /// What a failure while subscribing `watched[from..to]` means.
    fn subscribe_error(
        &self,
        e: electrum_client::Error,
        from: usize,
        to: usize,
        count: usize,
    ) -> ElectrumError {
        match self.error("blockchain.scripthash.subscribe", e) {
            ElectrumError::Server { message, .. } if is_subscription_limit(&message) => {
                ElectrumError::SubscriptionLimit {
                    url: self.url.clone(),
                    network: self.cfg.params.network,
                    subscribed: from,
                    count,
                    message,
                }
            }
            ElectrumError::Transport { url, detail } => ElectrumError::Transport {
                url,
                detail: format!(
                    "{detail} (while subscribing addresses {} to {to} of {count}; if this \
                     repeats, the server may be dropping clients with many subscriptions)",
                    from + 1
                ),
            },
            other => other,
        }
    }

    /// Marks the addresses the server notified about since the last look.
    pub(super) fn collect_notifications(
        &self,
        conn: &mut Conn,
        st: &mut State,
    ) -> Result<(), ElectrumError> {
        for (i, w) in st.watched[..conn.subscribed].iter_mut().enumerate() {
            while let Some(status) = conn
                .client
                .script_pop(&w.script)
                .map_err(|e| self.error("blockchain.scripthash.subscribe", e))?
            {
                if w.heard(Some(*status)) {
                    st.dirty.insert(i);
                }
            }
        }
        Ok(())
    }

    /// A status as a subscription answers it: a hex hash, or null.
    fn status_in(&self, answer: &serde_json::Value) -> Result<Status, ElectrumError> {
        const METHOD: &str = "blockchain.scripthash.subscribe";
        if answer.is_null() {
            return Ok(None);
        }
        let hex = answer
            .as_str()
            .ok_or_else(|| self.bad(METHOD, format!("a status that is not a string: {answer}")))?;
        <[u8; 32] as bitcoin::hex::FromHex>::from_hex(hex)
            .map(Some)
            .map_err(|e| self.bad(METHOD, format!("status {hex}: {e}")))
    }
}

fn scripthash_hex(script: &bitcoin::Script) -> String {
    script
        .to_electrum_scripthash()
        .as_slice()
        .to_lower_hex_string()
}

/// ElectrumX: "your address subscription limit 50,000 reached", "server
/// subscription limit 250,000 reached"; Fulcrum: "Subscription limit reached".
fn is_subscription_limit(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("subscription") || m.contains("subs")) && m.contains("limit")
        || m.contains("too many subscriptions")
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Write as _};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use bitcoin::ScriptBuf;
    use paywatch_core::{BlockSource as _, Network, SourceError, WatchSet};
    use serde_json::Value;

    use super::is_subscription_limit;
    use crate::electrum::chain::HEADER_LEN;
    use crate::electrum::genesis::GENESIS;
    use crate::electrum::{ElectrumConfig, ElectrumSource};
    use crate::params::{Chain, Params};

    /// A one-connection Electrum server that answers each batch in reverse
    /// order (as ElectrumX may: it runs a batch's requests concurrently) and
    /// refuses every subscription past the first `limit`.
    fn fake_server(limit: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut out = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut subscribed = 0;
            loop {
                let mut batch = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    batch.push(serde_json::from_str::<Value>(&line).unwrap());
                    if reader.buffer().is_empty() {
                        break;
                    }
                }
                let mut answers = Vec::new();
                for request in batch {
                    let id = request["id"].clone();
                    let answer = match request["method"].as_str().unwrap() {
                        "server.version" => serde_json::json!({"result": ["fake", "1.4"]}),
                        "server.features" => {
                            serde_json::json!({"result": {"genesis_hash": GENESIS[7].3}})
                        }
                        "blockchain.headers.subscribe" => {
                            serde_json::json!({"result": {"height": 5, "hex": "00".repeat(HEADER_LEN)}})
                        }
                        "blockchain.scripthash.subscribe" if subscribed < limit => {
                            subscribed += 1;
                            serde_json::json!({"result": null})
                        }
                        "blockchain.scripthash.subscribe" => serde_json::json!({"error": {
                            "code": 1,
                            "message": format!("your address subscription limit {limit} reached"),
                        }}),
                        _ => {
                            serde_json::json!({"error": {"code": -32601, "message": "unknown method"}})
                        }
                    };
                    let mut answer = answer;
                    answer["jsonrpc"] = "2.0".into();
                    answer["id"] = id;
                    answers.push(answer);
                }
                for answer in answers.iter().rev() {
                    writeln!(out, "{answer}").unwrap();
                }
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_subscription_limit_inside_a_batch_is_named() {
        let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
        let watch = Arc::new(
            WatchSet::new(Network::Litecoin)
                .keyed(crate::scan::watch_key(Network::Litecoin))
                .listing(),
        );
        for i in 0..3u8 {
            let mut script = vec![0x00, 0x14];
            script.extend([i; 20]);
            let address = crate::address::address_for_script(
                &params,
                ScriptBuf::from_bytes(script).as_script(),
            )
            .unwrap();
            watch.insert(&address);
        }
        let cfg = ElectrumConfig {
            params,
            url: fake_server(2),
            confirmations: 6,
            batch_size: 10,
            max_subscriptions: 10,
            mempool: true,
        };
        let source = ElectrumSource::new(cfg, watch).unwrap();
        let err = source.tip().await.unwrap_err();
        let SourceError::Fatal(msg) = &err else {
            panic!("a server limit needs an operator: {err}");
        };
        for needle in [
            "your address subscription limit 2 reached",
            "MAX_SESSION_SUBS",
            "max_subscriptions",
            "full node",
            "of the 3 litecoin addresses",
        ] {
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
    }

    /// What [`refusing_server`] did.
    #[derive(Default)]
    struct Served {
        /// Scripthashes whose subscription it accepted.
        subscribed: Vec<String>,
        /// Scripthashes whose history it was asked for.
        histories: Vec<String>,
    }

    /// A one-connection ElectrumX-like server that refuses the subscription
    /// of `refused` (an address with a history) its first `times` times, as
    /// ElectrumX does with "history too large" or a request over its cost,
    /// and answers each batch in reverse order, so electrum-client reads the
    /// refusal as `null` ("no history").
    fn refusing_server(refused: String, times: usize) -> (String, Arc<Mutex<Served>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let served = Arc::new(Mutex::new(Served::default()));
        let log = Arc::clone(&served);
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut out = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            let mut refusals = 0;
            loop {
                let mut batch = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    batch.push(serde_json::from_str::<Value>(&line).unwrap());
                    if reader.buffer().is_empty() {
                        break;
                    }
                }
                let mut answers = Vec::new();
                for request in batch {
                    let id = request["id"].clone();
                    let param = request["params"][0].as_str().unwrap_or_default().to_owned();
                    let mut answer = match request["method"].as_str().unwrap() {
                        "server.version" => serde_json::json!({"result": ["fake", "1.4"]}),
                        "server.features" => {
                            serde_json::json!({"result": {"genesis_hash": GENESIS[7].3}})
                        }
                        "server.ping" => serde_json::json!({"result": null}),
                        "blockchain.headers.subscribe" => {
                            serde_json::json!({"result": {"height": 5, "hex": "00".repeat(HEADER_LEN)}})
                        }
                        "blockchain.scripthash.subscribe"
                            if param == refused && refusals < times =>
                        {
                            refusals += 1;
                            serde_json::json!({"error": {"code": 1, "message": "history too large"}})
                        }
                        "blockchain.scripthash.subscribe" => {
                            log.lock().unwrap().subscribed.push(param.clone());
                            let status = (param == refused).then(|| "aa".repeat(32));
                            serde_json::json!({ "result": status })
                        }
                        "blockchain.scripthash.get_history" => {
                            log.lock().unwrap().histories.push(param.clone());
                            serde_json::json!({"result": [{"tx_hash": "bb".repeat(32), "height": 3}]})
                        }
                        _ => {
                            serde_json::json!({"error": {"code": -32601, "message": "unknown method"}})
                        }
                    };
                    answer["jsonrpc"] = "2.0".into();
                    answer["id"] = id;
                    answers.push(answer);
                }
                for answer in answers.iter().rev() {
                    writeln!(out, "{answer}").unwrap();
                }
            }
        });
        (addr, served)
    }

    /// Three watched addresses, subscribed in one batch; the scripthash of
    /// the middle one.
    fn three_addresses(url: String) -> (ElectrumSource, Vec<String>) {
        let params = Params::new(Network::Litecoin, Chain::Regtest).unwrap();
        let watch = Arc::new(
            WatchSet::new(Network::Litecoin)
                .keyed(crate::scan::watch_key(Network::Litecoin))
                .listing(),
        );
        let mut hashes = Vec::new();
        for i in 0..3u8 {
            let mut script = vec![0x00, 0x14];
            script.extend([i + 1; 20]);
            let script = ScriptBuf::from_bytes(script);
            hashes.push(super::scripthash_hex(&script));
            watch.insert(&crate::address::address_for_script(&params, &script).unwrap());
        }
        let cfg = ElectrumConfig {
            params,
            url,
            confirmations: 6,
            batch_size: 10,
            max_subscriptions: 10,
            mempool: true,
        };
        (ElectrumSource::new(cfg, watch).unwrap(), hashes)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_subscription_refused_mid_batch_is_asked_again_not_read_as_no_history() {
        let hashes = three_addresses("tcp://127.0.0.1:1".to_owned()).1;
        let (addr, served) = refusing_server(hashes[1].clone(), 1);
        let (source, _) = three_addresses(addr);
        source.tip().await.expect("the second asking is answered");
        let served = served.lock().unwrap();
        let mut subscribed = served.subscribed.clone();
        subscribed.sort();
        let mut all = hashes.clone();
        all.sort();
        assert_eq!(
            subscribed, all,
            "every address is subscribed on the server, so it notifies about each"
        );
        assert_eq!(
            served.histories,
            vec![hashes[1].clone()],
            "the refused address's history is read, not taken as empty"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_subscription_refused_again_alone_is_an_error_never_an_empty_history() {
        let hashes = three_addresses("tcp://127.0.0.1:1".to_owned()).1;
        let (addr, served) = refusing_server(hashes[1].clone(), usize::MAX);
        let (source, _) = three_addresses(addr);
        let err = source
            .tip()
            .await
            .expect_err("an address whose status is unknown cannot be followed");
        assert!(err.to_string().contains("history too large"), "{err}");
        assert!(served.lock().unwrap().histories.is_empty());
    }

    #[test]
    fn subscription_limits_are_recognised() {
        for m in [
            "your address subscription limit 50,000 reached",
            "server subscription limit 250,000 reached",
            "Subscription limit reached (code 50)",
            "too many subscriptions",
        ] {
            assert!(is_subscription_limit(m), "{m}");
        }
        for m in [
            "history too large",
            "excessive resource usage",
            "unknown method",
        ] {
            assert!(!is_subscription_limit(m), "{m}");
        }
    }
}

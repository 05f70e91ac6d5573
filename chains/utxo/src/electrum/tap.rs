//! The connection's socket, with the subscriptions the server refused noted
//! on the way in.
//!
//! electrum-client sends a batch as separate requests and hands each answer
//! to whoever waits for it. An error answer read while waiting for another
//! request loses its error and reads as `null`; and `null` is also what a
//! subscription answers for an address with no history. So a subscription
//! refused in the middle of a batch (ElectrumX: "history too large", a
//! request over its cost, a server busy) looks like an empty history, and
//! the server never notifies about the address. Asking every `null` again
//! alone would double the requests of each reconnect (most watched
//! addresses have no history yet) and ElectrumX charges each one. The tap
//! reads the answers as they pass instead: while a subscription batch is
//! out, it notes the id of each subscription written and of each error
//! answer read, so the refused ones are known by name.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

const SUBSCRIBE: &str = "blockchain.scripthash.subscribe";

/// The socket electrum-client reads and writes through.
pub(super) struct Tapped {
    stream: TcpStream,
    log: Arc<Mutex<Refusals>>,
}

/// What the tap saw while a subscription batch was out.
#[derive(Default)]
pub(super) struct Refusals {
    watching: bool,
    /// Subscriptions written and not yet answered: id → scripthash.
    asked: HashMap<u64, String>,
    /// Scripthashes whose subscription the server refused, with its message.
    refused: Vec<(String, String)>,
    incoming: Vec<u8>,
    outgoing: Vec<u8>,
    /// The last byte read ended no line: what follows, up to the next line
    /// end, is the rest of an answer read before the tap watched.
    mid_line: bool,
    skipping: bool,
}

impl Tapped {
    pub(super) fn new(stream: TcpStream) -> (Tapped, Arc<Mutex<Refusals>>) {
        let log = Arc::new(Mutex::new(Refusals::default()));
        (
            Tapped {
                stream,
                log: Arc::clone(&log),
            },
            log,
        )
    }

    fn log(&self) -> MutexGuard<'_, Refusals> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Read for Tapped {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.log().read(&buf[..n]);
        Ok(n)
    }
}

impl Write for Tapped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.stream.write(buf)?;
        self.log().written(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Locks the log of one connection.
pub(super) fn lock(log: &Mutex<Refusals>) -> MutexGuard<'_, Refusals> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

impl Refusals {
    /// Starts noting refusals, before a subscription batch is written.
    pub(super) fn watch(&mut self) {
        self.watching = true;
        self.asked.clear();
        self.refused.clear();
        self.outgoing.clear();
        self.incoming.clear();
        self.skipping = self.mid_line;
    }

    /// Stops, once every answer of the batch was read; the refused
    /// scripthashes (hex) and the server's messages.
    pub(super) fn take(&mut self) -> Vec<(String, String)> {
        self.watching = false;
        self.asked.clear();
        self.incoming.clear();
        self.outgoing.clear();
        std::mem::take(&mut self.refused)
    }

    fn read(&mut self, bytes: &[u8]) {
        if let Some(last) = bytes.last() {
            self.mid_line = *last != b'\n';
        }
        if !self.watching {
            return;
        }
        for &b in bytes {
            if b != b'\n' {
                if !self.skipping {
                    self.incoming.push(b);
                }
                continue;
            }
            if !std::mem::take(&mut self.skipping) {
                let line = std::mem::take(&mut self.incoming);
                self.answer(&line);
            }
        }
    }

    fn written(&mut self, bytes: &[u8]) {
        if !self.watching {
            return;
        }
        for &b in bytes {
            if b != b'\n' {
                self.outgoing.push(b);
                continue;
            }
            let line = std::mem::take(&mut self.outgoing);
            let Ok(request) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if request.get("method").and_then(Value::as_str) != Some(SUBSCRIBE) {
                continue;
            }
            let scripthash = request
                .get("params")
                .and_then(|p| p.get(0))
                .and_then(Value::as_str);
            if let (Some(id), Some(scripthash)) = (id_of(&request), scripthash) {
                self.asked.insert(id, scripthash.to_owned());
            }
        }
    }

    fn answer(&mut self, line: &[u8]) {
        // Histories and transactions pass here too: only a line that can
        // hold an error is parsed.
        if !line.windows(7).any(|w| w == b"\"error\"") {
            return;
        }
        let Ok(answer) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let Some(id) = id_of(&answer) else {
            return;
        };
        let Some(scripthash) = self.asked.remove(&id) else {
            return;
        };
        match answer.get("error") {
            None | Some(Value::Null) => {}
            Some(error) => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_owned);
                self.refused.push((scripthash, message));
            }
        }
    }
}

/// electrum-client numbers its requests; servers echo the id as given.
fn id_of(v: &Value) -> Option<u64> {
    let id = v.get("id")?;
    id.as_u64()
        .or_else(|| id.as_str().and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_to_a_subscription_is_noted_by_scripthash() {
        let mut log = Refusals {
            mid_line: true,
            ..Refusals::default()
        };
        log.watch();
        log.written(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"blockchain.scripthash.subscribe\",\"params\":[\"aa\"]}\n{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"blockchain.scri");
        log.written(b"pthash.subscribe\",\"params\":[\"bb\"]}\n");
        // The rest of an answer read before, then the batch's, split.
        log.read(b"tail of an old answer with \"error\": 1}\n{\"id\":8,\"result\":null}\n{\"jsonrpc\":\"2.0\",\"error\":{\"code\":1,");
        log.read(b"\"message\":\"history too large\"},\"id\":7}\n");
        assert_eq!(
            log.take(),
            vec![("aa".to_owned(), "history too large".to_owned())]
        );
        // Not watching: nothing is noted.
        log.read(b"{\"id\":9,\"error\":{\"message\":\"x\"}}\n");
        assert!(log.take().is_empty());
    }
}

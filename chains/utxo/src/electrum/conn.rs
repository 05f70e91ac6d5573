//! The one connection to the server: opened on first use, checked to
//! serve our chain, and dropped when it can no longer be trusted.

use std::net::{TcpStream, ToSocketAddrs as _};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use electrum_client::raw_client::RawClient;
use electrum_client::{ElectrumApi as _, Param};
use serde_json::Value;
use tracing::debug;

use super::tap::{Refusals, Tapped};
use super::{ElectrumError, Inner, State};

/// How long one read or write on the socket may take.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);
const CLIENT_NAME: &str = concat!("paywatch/", env!("CARGO_PKG_VERSION"));
/// The protocol version asked for: every server in use speaks 1.4, and it
/// still has the `blockchain.scripthash.*` methods (1.7 replaced them).
const PROTOCOL_VERSION: &str = "1.4";

pub(super) struct Conn {
    pub(super) client: RawClient<Tapped>,
    /// The subscriptions the server refused, as the socket saw them.
    pub(super) refusals: Arc<Mutex<Refusals>>,
    /// `watched[..subscribed]` are subscribed on this connection.
    pub(super) subscribed: usize,
    /// Set when the client's idea of its subscriptions may differ from the server's.
    pub(super) broken: bool,
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(guard) => guard,
            Err(poisoned) => {
                // A call panicked halfway: trust nothing it may have left.
                self.state.clear_poison();
                let mut guard = poisoned.into_inner();
                guard.conn = None;
                guard.snapshot = None;
                guard.ahead = None;
                guard.dirty = (0..guard.watched.len()).collect();
                guard
            }
        }
    }

    pub(super) fn with_conn<T>(
        &self,
        st: &mut State,
        f: impl Fn(&Inner, &mut Conn, &mut State) -> Result<T, ElectrumError>,
    ) -> Result<T, ElectrumError> {
        if self.follow_removals(st) {
            st.conn = None;
        }
        let mut conn = match st.conn.take() {
            Some(c) => c,
            None => {
                // Notifications sent before are lost: subscribing again
                // brings every status, and the tip is read afresh.
                st.snapshot = None;
                self.connect()?
            }
        };
        let result = f(self, &mut conn, st);
        if result.is_err() {
            // Whatever failed, headers read ahead are not trusted past it.
            st.ahead = None;
        }
        let keep = !conn.broken && result.as_ref().err().is_none_or(|e| !e.drops_connection());
        if keep {
            st.conn = Some(conn);
        } else {
            debug!(url = %self.url, "dropping the Electrum connection");
            st.snapshot = None;
        }
        result
    }

    fn connect(&self) -> Result<Conn, ElectrumError> {
        let (socket, refusals) = Tapped::new(self.open_socket()?);
        let client = RawClient::from(socket);
        client
            .raw_call(
                "server.version",
                [
                    Param::String(CLIENT_NAME.to_owned()),
                    Param::String(PROTOCOL_VERSION.to_owned()),
                ],
            )
            .map_err(|e| self.error("server.version", e))?;
        let features = client
            .raw_call("server.features", Vec::new())
            .map_err(|e| self.error("server.features", e))?;
        let genesis = features
            .get("genesis_hash")
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad("server.features", format!("no genesis_hash in {features}")))?;
        self.check_genesis(genesis)?;
        debug!(url = %self.url, "connected to the Electrum server");
        Ok(Conn {
            client,
            refusals,
            subscribed: 0,
            broken: false,
        })
    }

    /// The socket, as `RawClient::new` opens it: each address the name
    /// resolves to in turn, and reads and writes bounded by [`TIMEOUT`].
    fn open_socket(&self) -> Result<TcpStream, ElectrumError> {
        use electrum_client::Error as E;
        let addrs = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.error("connect", E::IOError(e)))?;
        let mut errors = Vec::new();
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, TIMEOUT) {
                Ok(socket) => {
                    let timeouts = socket
                        .set_read_timeout(Some(TIMEOUT))
                        .and_then(|()| socket.set_write_timeout(Some(TIMEOUT)));
                    timeouts.map_err(|e| self.error("connect", E::IOError(e)))?;
                    return Ok(socket);
                }
                Err(e) => errors.push(E::IOError(e)),
            }
        }
        Err(self.error("connect", E::AllAttemptsErrored(errors)))
    }

    pub(super) fn batch_size(&self) -> usize {
        self.cfg.batch_size.max(1)
    }
}

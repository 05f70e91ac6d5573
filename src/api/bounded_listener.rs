//! Admission to the API: at most `api.max_connections` connections are
//! served at once, at most `api.max_connections_per_client` of them from
//! one client (per_client.rs). When every slot is taken and another
//! connection arrives, the connection idle the longest is asked to close
//! to make room (idle_connections.rs); when every served connection is
//! busy, the next one waits for one to close, as a burst of requests
//! slows down rather than growing memory with every connection or being
//! refused. Within the served connections, requests queue for the
//! database pool, which is bounded too.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::client_addr::TrustedProxies;
use super::idle_connections::{IdleConnections, Tracked};
use super::per_client::{Held, PerClient};
use super::refusals::{refused, Refusal};

pub(crate) struct BoundedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    idle: Arc<IdleConnections>,
    per_client: PerClient,
    /// Peers not capped per client: trusted proxies, which carry every
    /// client's connections and cap their own clients.
    uncapped: TrustedProxies,
    /// A connection accepted while every slot was taken, kept here while
    /// room is made, so a cancelled `accept` loses nothing.
    waiting: Option<Waiting>,
}

type Waiting = (TcpStream, SocketAddr, Option<Held>);

/// A connection admitted to be served.
pub(crate) struct Admitted {
    pub(crate) io: TcpStream,
    pub(crate) addr: SocketAddr,
    pub(crate) places: Places,
}

/// What an admitted connection holds for as long as it is open: its slot,
/// its place under its client's cap, its line in the idle table.
pub(crate) struct Places {
    pub(crate) tracked: Tracked,
    _slot: OwnedSemaphorePermit,
    _held: Option<Held>,
}

impl BoundedListener {
    pub(crate) fn new(
        inner: TcpListener,
        max_connections: usize,
        max_per_client: usize,
        uncapped: TrustedProxies,
    ) -> BoundedListener {
        BoundedListener {
            inner,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
            idle: IdleConnections::new(),
            per_client: PerClient::new(max_per_client),
            uncapped,
            waiting: None,
        }
    }

    /// The next connection to serve. Cancel-safe: a connection accepted
    /// but still waiting for a slot is served by the next call.
    pub(crate) async fn accept(&mut self) -> Admitted {
        loop {
            let (io, addr, held) = match self.waiting.take() {
                Some(waiting) => waiting,
                None => {
                    let (io, addr) = self.next().await;
                    let held = if self.uncapped.contains(addr.ip()) {
                        None
                    } else {
                        let Some(held) = self.per_client.enter(addr) else {
                            debug!(client = %addr.ip(), "too many connections from one client; closed");
                            refused(Refusal::ConnectionsPerClient);
                            continue;
                        };
                        Some(held)
                    };
                    (io, addr, held)
                }
            };
            let slot = match Arc::clone(&self.slots).try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    self.waiting = Some((io, addr, held));
                    let slot = self.make_room().await;
                    let (io, addr, held) = self.waiting.take().expect("kept while room was made");
                    return self.admit(io, addr, held, slot);
                }
            };
            return self.admit(io, addr, held, slot);
        }
    }

    fn admit(
        &self,
        io: TcpStream,
        addr: SocketAddr,
        held: Option<Held>,
        slot: OwnedSemaphorePermit,
    ) -> Admitted {
        Admitted {
            io,
            addr,
            places: Places {
                tracked: self.idle.track(),
                _slot: slot,
                _held: held,
            },
        }
    }

    /// Every slot is taken and a connection is waiting: the one idle the
    /// longest closes (on its own task, at once) and gives its slot to the
    /// waiting one. While every connection is busy, it waits for one.
    async fn make_room(&self) -> OwnedSemaphorePermit {
        loop {
            let asked = self.idle.close_longest_idle();
            let wait = Duration::from_millis(if asked { 100 } else { 250 });
            tokio::select! {
                slot = Arc::clone(&self.slots).acquire_owned() => {
                    return slot.expect("the semaphore is never closed");
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn next(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    return (io, addr);
                }
                // Out of file descriptors and the like: the connection in
                // question is lost to the client, not to us; wait and go on
                // rather than spin.
                Err(e) => {
                    warn!(error = %e, "cannot accept an API connection; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn listener(inner: TcpListener, max: usize) -> BoundedListener {
        BoundedListener::new(inner, max, 64, TrustedProxies::default())
    }

    #[tokio::test]
    async fn a_full_listener_of_busy_connections_serves_the_next_only_when_one_closes() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut listener = listener(inner, 1);
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let mut c2 = TcpStream::connect(addr).await.unwrap();
        let first = listener.accept().await;
        let busy = first.places.tracked.activity.begin();
        // The second client connected but is not served while the first
        // holds the only slot with a request in flight.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(400), listener.accept()).await;
        assert!(waiting.is_err(), "a second connection was served");
        drop((busy, first));
        let mut second = tokio::time::timeout(std::time::Duration::from_secs(5), listener.accept())
            .await
            .expect("served once the first closed");
        c2.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut second.io, &mut buf)
            .await
            .unwrap();
        assert_eq!(&buf, b"x", "and nothing it sent was lost");
    }

    #[tokio::test]
    async fn a_full_listener_asks_the_longest_idle_connection_to_make_room() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut listener = listener(inner, 1);
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let first = listener.accept().await;
        let _c2 = TcpStream::connect(addr).await.unwrap();
        let activity = Arc::clone(&first.places.tracked.activity);
        // The first's own task: closes when asked, if idle.
        let closer = tokio::spawn(async move {
            activity.close_asked().await;
            assert!(activity.may_close());
            drop(first);
        });
        tokio::time::timeout(std::time::Duration::from_secs(2), listener.accept())
            .await
            .expect("the idle one made room");
        closer.await.unwrap();
    }
}

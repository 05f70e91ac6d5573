//! Backpressure for the API: at most `api.max_connections` connections are
//! served at once. When all are taken, the next is not accepted until one
//! closes: it waits in the kernel's accept queue and its client waits, so a
//! burst of requests slows down rather than growing memory with every
//! connection or being refused. Within the served connections, requests
//! queue for the database pool, which is bounded too.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::warn;

pub(crate) struct BoundedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
}

impl BoundedListener {
    pub(crate) fn new(inner: TcpListener, max_connections: usize) -> BoundedListener {
        BoundedListener {
            inner,
            slots: Arc::new(Semaphore::new(max_connections.max(1))),
        }
    }
}

/// A served connection; its slot frees when it closes.
pub(crate) struct Slotted {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl axum::serve::Listener for BoundedListener {
    type Io = Slotted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.inner.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    return (Slotted { io, _slot: slot }, addr);
                }
                // Out of file descriptors and the like: the connection in
                // question is lost to the client, not to us; wait and go on
                // rather than spin.
                Err(e) => {
                    warn!(error = %e, "cannot accept an API connection; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for Slotted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Slotted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_full_listener_accepts_the_next_connection_only_when_one_closes() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut listener = BoundedListener::new(inner, 1);
        let _c1 = TcpStream::connect(addr).await.unwrap();
        let mut c2 = TcpStream::connect(addr).await.unwrap();
        let (first, _) = listener.accept().await;
        // The second client connected (the kernel queued it) but is not
        // served while the first holds the only slot.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
        assert!(waiting.is_err(), "a second connection was served");
        drop(first);
        let (mut second, _) =
            tokio::time::timeout(std::time::Duration::from_secs(5), listener.accept())
                .await
                .expect("served once the first closed");
        c2.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut second, &mut buf)
            .await
            .unwrap();
        assert_eq!(&buf, b"x", "and nothing it sent was lost");
    }
}

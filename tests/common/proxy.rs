//! A loopback TCP proxy that a test puts between paywatch and a real server
//! (PostgreSQL, a chain node) to break the link the ways networks and
//! servers do: cut every connection mid-stream, refuse new ones for a
//! while (a restart), or hang (accept and forward nothing).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Up,
    /// New connections are closed at once, as by a server that is down.
    Refusing,
    /// Connections are accepted and nothing is forwarded either way.
    Hung,
    /// Everything is forwarded, each message (a read after a pause) held
    /// back this many milliseconds: a node that answers late.
    Slow(u64),
}

pub struct FaultProxy {
    pub port: u16,
    link: Arc<Mutex<Link>>,
    /// Bumped by `cut`: every connection open before it closes.
    generation: watch::Sender<u64>,
    pub connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Forwards 127.0.0.1:`port` (a fresh one) to `target` (`host:port`).
    pub async fn start(target: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let link = Arc::new(Mutex::new(Link::Up));
        let (generation, _) = watch::channel(0u64);
        let connections = Arc::new(AtomicU64::new(0));
        let target = target.to_owned();
        let task = {
            let link = link.clone();
            let generation = generation.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = *link.lock().unwrap();
                    match state {
                        Link::Refusing => {
                            let _ = inbound.shutdown().await;
                            continue;
                        }
                        Link::Hung | Link::Up | Link::Slow(_) => {}
                    }
                    connections.fetch_add(1, Ordering::Relaxed);
                    let mut cut = generation.subscribe();
                    let link = link.clone();
                    let target = target.clone();
                    tokio::spawn(async move {
                        // A hung link holds the connection open and silent
                        // until it is cut or the link comes back.
                        while *link.lock().unwrap() == Link::Hung {
                            tokio::select! {
                                _ = cut.changed() => return,
                                _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
                            }
                        }
                        let Ok(mut outbound) = TcpStream::connect(&target).await else {
                            return;
                        };
                        let (mut ri, mut wi) = inbound.split();
                        let (mut ro, mut wo) = outbound.split();
                        let hung = || async {
                            loop {
                                if *link.lock().unwrap() == Link::Hung {
                                    return;
                                }
                                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                            }
                        };
                        tokio::select! {
                            _ = pace(&link, &mut ri, &mut wo) => {}
                            _ = pace(&link, &mut ro, &mut wi) => {}
                            _ = cut.changed() => {}
                            // An open connection hangs too: kept, silent.
                            _ = hung() => {
                                let _ = cut.changed().await;
                            }
                        }
                    });
                }
            })
        };
        FaultProxy {
            port,
            link,
            generation,
            connections,
            task,
        }
    }

    /// Closes every open connection, mid-transaction or not.
    pub fn cut(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn set(&self, state: Link) {
        *self.link.lock().unwrap() = state;
    }

    /// A server restart: every connection cut, new ones refused until `up`.
    pub fn go_down(&self) {
        self.set(Link::Refusing);
        self.cut();
    }

    pub fn up(&self) {
        self.set(Link::Up);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// Copies `from` to `to`. While the link is slow, the first read after a
/// pause (a new request or answer) is held back; the rest of that message
/// follows at once, so this is latency, not bandwidth.
async fn pace(
    link: &Mutex<Link>,
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut last_read: Option<std::time::Instant> = None;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let new_message =
            last_read.is_none_or(|t| t.elapsed() > std::time::Duration::from_millis(20));
        last_read = Some(std::time::Instant::now());
        let delay = match *link.lock().unwrap() {
            Link::Slow(ms) if new_message => ms,
            _ => 0,
        };
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

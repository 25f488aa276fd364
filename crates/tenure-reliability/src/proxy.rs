//! A TCP proxy inside the test, between one contender and the database, that can stall or cut
//! that contender's connections: a network partition of one process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Bytes flow both ways.
    Up,
    /// Connections stay open but no byte moves (packets dropped): calls hang.
    Stalled,
    /// Every connection is closed and new ones are refused at once.
    Cut,
}

/// A proxy listening on a loopback port, forwarding to `upstream`.
#[derive(Debug)]
pub struct Proxy {
    address: SocketAddr,
    link: watch::Sender<Link>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `upstream` on a free loopback port.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (link, state) = watch::channel(Link::Up);
        let state = Arc::new(state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&state);
                if *state.borrow() == Link::Cut {
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, (*state).clone()).await;
                    }
                });
            }
        });
        Ok(Proxy {
            address,
            link,
            task,
        })
    }

    /// The address contenders connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets what the link does from now on.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Moves bytes between `a` and `b` while the link is up; holds them while it is stalled;
/// closes both when it is cut.
async fn relay(a: TcpStream, b: TcpStream, link: watch::Receiver<Link>) {
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let one = tokio::spawn(pump(ar, bw, link.clone()));
    let two = tokio::spawn(pump(br, aw, link));
    let _ = tokio::join!(one, two);
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut link: watch::Receiver<Link>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        // Wait while stalled; stop when cut.
        loop {
            let state = *link.borrow_and_update();
            match state {
                Link::Up => break,
                Link::Cut => return,
                Link::Stalled => {
                    if link.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = link.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // A stall that begins now holds these bytes until it ends.
        while *link.borrow() == Link::Stalled {
            if tokio::time::timeout(Duration::from_secs(3600), link.changed())
                .await
                .map_or(true, |r| r.is_err())
            {
                return;
            }
        }
        if *link.borrow() == Link::Cut || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

//! A TCP proxy a test can cut, to put one daemon on the far side of a partition: every
//! connection through it is passed on to its upstream until the test cuts it; from then on
//! nothing passes either way (connections stay open and silent, new ones are accepted and
//! never answered), as when a network drops packets. Healed, the silent connections are
//! closed and new ones pass again.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    /// Where clients connect: `http://127.0.0.1:port`.
    pub url: String,
    cut: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `upstream` (`http://host:port` or `https://…`: it relays bytes, so TLS
    /// passes through), on a port of its own, under the upstream's scheme.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (scheme, upstream) = upstream.split_once("://").expect("a URL");
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let upstream = upstream.to_owned();
        let cut = Arc::new(watch::Sender::new(false));
        let state = cut.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let (upstream, state) = (upstream.clone(), state.clone());
                tokio::spawn(async move { relay(client, &upstream, state).await });
            }
        });
        Proxy { url, cut, task }
    }

    /// Nothing passes from now on.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Connections pass again; those held silent while cut are closed.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes bytes between `client` and `upstream` while not cut; once cut, holds the
/// connection silent until healed, then closes it.
async fn relay(mut client: TcpStream, upstream: &str, state: Arc<watch::Sender<bool>>) {
    let mut cut = state.subscribe();
    if *cut.borrow_and_update() {
        until_healed(&mut cut).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = from_client.read(&mut up) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if to_server.write_all(&up[..n]).await.is_err() { return },
            },
            read = from_server.read(&mut down) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => if to_client.write_all(&down[..n]).await.is_err() { return },
            },
            changed = cut.changed() => if changed.is_err() || *cut.borrow() { break },
        }
    }
    // Silent until healed, then closed.
    until_healed(&mut cut).await;
}

async fn until_healed(cut: &mut watch::Receiver<bool>) {
    while *cut.borrow_and_update() {
        if cut.changed().await.is_err() {
            return;
        }
    }
}

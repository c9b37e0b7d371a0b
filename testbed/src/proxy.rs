//! A round-robin TCP proxy: two extender replicas behind one URL, as a Service would put
//! them. Each accepted connection goes to the next backend that accepts it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(backends: Vec<u16>) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let backends = backends.clone();
                let next = next.clone();
                tokio::spawn(async move {
                    for _ in 0..backends.len() {
                        let i = next.fetch_add(1, Ordering::Relaxed) % backends.len();
                        let addr = SocketAddr::from(([127, 0, 0, 1], backends[i]));
                        if let Ok(outbound) = TcpStream::connect(addr).await {
                            let (mut a, mut b) = (inbound, outbound);
                            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                            return;
                        }
                    }
                });
            }
        });
        Ok(Proxy { port, task })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

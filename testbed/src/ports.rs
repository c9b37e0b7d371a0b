//! Free loopback ports and a temporary directory that removes itself.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Ports handed out lie below Linux's ephemeral range (32768 and up by default): an
/// outgoing connection's source port can never take one between this check and the
/// component's bind (kube-apiserver once failed to start that way).
const FIRST: u16 = 20_000;
const SPAN: u16 = 12_000;

/// A port nothing listens on now, below the ephemeral range. Each process starts at its
/// own offset and never hands out a port twice, so concurrent cases and test binaries
/// do not pick the same one.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = (std::process::id() % u32::from(SPAN)) * 7;
    for _ in 0..SPAN {
        let n = start + NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (n % u32::from(SPAN)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("bind 127.0.0.1:0")
}

/// A directory under `/dev/shm` when it exists (etcd fsyncs; memory is fast), removed on
/// drop unless `COLOC_E2E_KEEP` is set (then its path is printed, for the logs).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let path = base.join(format!("{prefix}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("COLOC_E2E_KEEP").is_some() {
            eprintln!("testbed: kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

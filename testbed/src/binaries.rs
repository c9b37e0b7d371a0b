//! Where the control-plane binaries are: `KUBE_BIN_DIR`, else the documented default
//! directory; etcd also from `PATH` (Debian's `etcd-server` installs `/usr/bin/etcd`).

use std::path::{Path, PathBuf};

/// Used when `KUBE_BIN_DIR` is not set.
pub const DEFAULT_DIR: &str = "/opt/kubernetes/v1.36/bin";

#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubectl: PathBuf,
}

impl Binaries {
    /// The binaries, or one sentence saying why they cannot be used (the caller skips).
    pub fn find() -> Result<Binaries, String> {
        let (dir, from) = match std::env::var_os("KUBE_BIN_DIR") {
            Some(d) if !d.is_empty() => (PathBuf::from(d), "KUBE_BIN_DIR"),
            _ => (PathBuf::from(DEFAULT_DIR), "the default location (KUBE_BIN_DIR is not set)"),
        };
        let need = |name: &str| -> Result<PathBuf, String> {
            let p = dir.join(name);
            if is_executable(&p) {
                Ok(p)
            } else {
                Err(format!("no executable {name} in {} ({from}); see README \"End-to-end tests\"", dir.display()))
            }
        };
        let kube_apiserver = need("kube-apiserver")?;
        let kube_controller_manager = need("kube-controller-manager")?;
        let kube_scheduler = need("kube-scheduler")?;
        let kubectl = need("kubectl")?;
        let etcd = std::iter::once(dir.join("etcd"))
            .chain(std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join("etcd")))
            .find(|p| is_executable(p))
            .ok_or_else(|| format!("no etcd in {} or on PATH (Debian: apt-get install etcd-server)", dir.display()))?;
        Ok(Binaries { dir, etcd, kube_apiserver, kube_controller_manager, kube_scheduler, kubectl })
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

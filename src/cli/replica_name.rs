//! A replica's own name, for the requeue controller's Lease and the Events it reports as:
//! the name given (`--name`, `--pod-name` or $POD_NAME through clap), else $HOSTNAME, else
//! the host's own name, so that a controller run by hand from a shell that does not export
//! HOSTNAME still has one.

/// The first non-empty of `given`, `hostname_env` and what `host` reads.
pub fn replica_name(
    given: Option<String>,
    hostname_env: Option<String>,
    host: impl FnOnce() -> Option<String>,
) -> Option<String> {
    let named = |n: &Option<String>| n.as_deref().is_some_and(|n| !n.trim().is_empty());
    [given, hostname_env].into_iter().find(named).flatten().or_else(|| Some(host()).filter(named).flatten())
}

/// This replica's name as the process finds it: `given`, else $HOSTNAME, else the host's.
pub fn this_replica(given: Option<String>) -> Option<String> {
    replica_name(given, std::env::var("HOSTNAME").ok(), host_name)
}

/// The host's own name (gethostname), `None` if it cannot be read or is not UTF-8.
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what gethostname is told.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn the_name_given_comes_first_then_hostname_then_the_hosts_own() {
        assert_eq!(replica_name(some("coloc-requeue-0"), some("box"), || some("host")), some("coloc-requeue-0"));
        assert_eq!(replica_name(None, some("box"), || some("host")), some("box"));
        assert_eq!(replica_name(None, None, || some("host")), some("host"), "a shell that exports no HOSTNAME");
        assert_eq!(replica_name(some(""), some(" "), || some("host")), some("host"), "empty names are no names");
        assert_eq!(replica_name(None, None, || None), None);
    }

    #[test]
    fn the_hosts_own_name_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(host_name().as_deref(), Some(kernel.trim()));
    }
}

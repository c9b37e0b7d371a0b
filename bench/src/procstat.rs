//! A process's memory and CPU time from /proc (Linux), by pid or `"self"`.

/// A `kB` field of /proc/PID/status (e.g. `"VmRSS:"`, `"VmHWM:"` for the peak).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

/// utime + stime of a process in clock ticks (USER_HZ, 100 on Linux), from /proc/PID/stat.
pub fn cpu_ticks(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count fields after its closing ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The 1-minute load average: how busy the shared machine was around a measurement.
pub fn load_avg_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// utime + stime in seconds.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(cpu_ticks(pid)? as f64 / hz)
}

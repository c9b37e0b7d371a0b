//! coloc-hostile: measures what hostile request bodies cost a real `coloc-extender serve`
//! process: peak RSS, the answer, log bytes written, and `/healthz` latency meanwhile.
//!
//!     coloc-hostile [--server target/release/coloc-extender] [--mib 16] [--concurrent 10]
//!                   [--case NAME ...] [-- EXTRA SERVE FLAGS]
//!
//! Each case starts a fresh server on loopback (so VmHWM is that case's peak), waits for
//! `/healthz`, then sends the body once, and then `--concurrent` copies at the same time.
//! A thread polls `/healthz` on the health port (`--health-listen`, where the shipped
//! Deployment's probes go) every 2 ms on a new connection for the whole case and keeps
//! the slowest answer; the senders run at nice 10 so that they do not starve the prober
//! on a small machine. The server's log is counted, not kept. Loopback only, no cluster.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Parser;
use coloc_bench::procstat;

#[derive(Parser, Debug)]
#[command(
    name = "coloc-hostile",
    about = "Peak RSS, answers, log volume and /healthz latency of coloc-extender under hostile bodies"
)]
struct Args {
    /// The server binary (a release build).
    #[arg(long, default_value = "target/release/coloc-extender")]
    server: PathBuf,
    /// Size of each generated body, in MiB.
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Copies of the body sent at once after the single request.
    #[arg(long, default_value_t = 10)]
    concurrent: usize,
    /// Only these cases (default: all).
    #[arg(long)]
    case: Vec<String>,
    /// Extra flags for `serve`.
    #[arg(last = true)]
    serve_flags: Vec<String>,
}

struct Case {
    name: &'static str,
    verb: &'static str,
    body: Vec<u8>,
}

const POD: &str = r#"{"metadata":{"name":"online-1","namespace":"online","uid":"p-1"},"spec":{"priority":10000,"containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}}"#;

/// `prefix`, then `item(i)` joined by commas until the body reaches `size`, then `suffix`.
fn repeat(prefix: &str, item: impl Fn(usize) -> String, suffix: &str, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 64);
    out.extend_from_slice(prefix.as_bytes());
    let mut i = 0;
    while out.len() + suffix.len() < size {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item(i).as_bytes());
        i += 1;
    }
    out.extend_from_slice(suffix.as_bytes());
    out
}

const RECORDED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/payloads/r1-nodecache-false");

/// Realistic bodies of `size`, within the caps: a recorded Node object and a recorded victim
/// pod, repeated under new names (what a large cluster sends in `nodeCacheCapable: false`).
fn realistic(size: usize) -> anyhow::Result<Vec<Case>> {
    let read = |f: &str| -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(format!("{RECORDED}/{f}"))?)?)
    };
    let filter = read("0001-filter.json")?;
    let node = serde_json::to_string(&filter["Nodes"]["items"][0])?;
    let preempt = read("0037-preempt.json")?;
    let victim = serde_json::to_string(&preempt["NodeNameToVictims"]["node-a1"]["Pods"][0])?;
    let uid =
        preempt["NodeNameToVictims"]["node-a1"]["Pods"][0]["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let pod = serde_json::to_string(&preempt["Pod"])?;
    let per_node = 100;
    Ok(vec![
        Case {
            name: "filter-recorded-nodes",
            verb: "filter",
            body: repeat(
                &format!(r#"{{"Pod":{pod},"Nodes":{{"items":["#),
                |i| node.replace("\"node-a1\"", &format!("\"n{i}\"")),
                "]}}",
                size,
            ),
        },
        Case {
            name: "preempt-recorded-victims",
            verb: "preempt",
            body: {
                let nodes = (size / (victim.len() * per_node)).max(1);
                let mut body = format!(r#"{{"Pod":{pod},"NodeNameToVictims":{{"#).into_bytes();
                for n in 0..nodes {
                    let pods: Vec<String> = (0..per_node)
                        .map(|i| {
                            victim.replace("\"node-a1\"", &format!("\"n{n}\"")).replace(&uid, &format!("u-{n}-{i}"))
                        })
                        .collect();
                    body.extend_from_slice(
                        format!(
                            r#"{}"n{n}":{{"Pods":[{}],"NumPDBViolations":0}}"#,
                            if n > 0 { "," } else { "" },
                            pods.join(",")
                        )
                        .as_bytes(),
                    );
                }
                body.extend_from_slice(b"}}");
                body
            },
        },
    ])
}

fn cases(size: usize) -> Vec<Case> {
    let full = |pods: &str| format!(r#"{{"Pod":{POD},"NodeNameToVictims":{{"n1":{{"Pods":[{pods}"#);
    vec![
        Case { name: "victims-empty-objects", verb: "preempt", body: repeat(&full(""), |_| "{}".into(), "]}}}", size) },
        Case {
            name: "victims-minimal-uids",
            verb: "preempt",
            body: repeat(&full(""), |i| format!(r#"{{"metadata":{{"uid":"u{i}"}}}}"#), "]}}}", size),
        },
        Case {
            name: "victims-spread-over-nodes",
            verb: "preempt",
            body: repeat(
                &format!(r#"{{"Pod":{POD},"NodeNameToVictims":{{"#),
                |i| format!(r#""n{i}":{{"Pods":[{{"metadata":{{"uid":"u{i}"}}}}]}}"#),
                "}}",
                size,
            ),
        },
        Case {
            name: "victim-nodes-empty",
            verb: "preempt",
            body: repeat(
                &format!(r#"{{"Pod":{POD},"NodeNameToVictims":{{"#),
                |i| format!(r#""n{i}":{{}}"#),
                "}}",
                size,
            ),
        },
        Case {
            name: "meta-victims",
            verb: "preempt",
            body: repeat(
                &format!(r#"{{"Pod":{POD},"NodeNameToMetaVictims":{{"n1":{{"Pods":["#),
                |i| format!(r#"{{"UID":"u{i}"}}"#),
                "]}}}",
                size,
            ),
        },
        Case {
            name: "prioritize-short-names",
            verb: "prioritize",
            body: repeat(&format!(r#"{{"Pod":{POD},"NodeNames":["#), |i| format!(r#""{i}""#), "]}", size),
        },
        Case {
            name: "filter-minimal-nodes",
            verb: "filter",
            body: repeat(
                &format!(r#"{{"Pod":{POD},"Nodes":{{"items":["#),
                |i| format!(r#"{{"metadata":{{"name":"n{i}"}}}}"#),
                "]}}",
                size,
            ),
        },
        Case {
            name: "pod-as-long-string",
            verb: "filter",
            body: format!(r#"{{"Pod":"{}","NodeNames":["a"]}}"#, "x".repeat(size.saturating_sub(40))).into_bytes(),
        },
    ]
}

/// A free loopback port (bound, then released for the server).
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One HTTP/1.1 request on a new connection; (status, body).
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
    // The server may answer (413, 503) before the whole body is sent.
    let _ = s.write_all(body);
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).context("no HTTP status line in the answer")?;
    let body = match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => out[i + 4..].to_vec(),
        None => Vec::new(),
    };
    Ok((status, body))
}

fn status_kib(pid: u32, field: &str) -> u64 {
    procstat::status_kib(&pid.to_string(), field).unwrap_or(0)
}

struct Server {
    child: Child,
    addr: SocketAddr,
    /// `--health-listen`, as in the shipped Deployment (probes go there).
    health: SocketAddr,
    log_bytes: Arc<AtomicU64>,
}

impl Server {
    fn start(args: &Args) -> anyhow::Result<Server> {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let health: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        // Not the default 127.0.0.1:8082: a server still stopping would hold it.
        let admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
        let mut child = Command::new(&args.server)
            .arg("serve")
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--health-listen")
            .arg(health.to_string())
            .arg("--admin-listen")
            .arg(admin.to_string())
            .args(&args.serve_flags)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", args.server.display()))?;
        let log_bytes = Arc::new(AtomicU64::new(0));
        for pipe in [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let counter = log_bytes.clone();
            thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = vec![0u8; 1 << 16];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(request(health, "GET", "/healthz", b"", Duration::from_millis(200)), Ok((200, _))) {
                return Ok(Server { child, addr, health, log_bytes });
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        bail!("the server did not answer /healthz within 10 s")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `/healthz` until stopped; the slowest answer in microseconds (failures count as
/// the time they took, and are counted).
fn poll_health(addr: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<(u64, u64, u64)> {
    thread::spawn(move || {
        let (mut worst, mut polls, mut failures) = (0u64, 0u64, 0u64);
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let ok = matches!(request(addr, "GET", "/healthz", b"", Duration::from_secs(30)), Ok((200, _)));
            worst = worst.max(started.elapsed().as_micros() as u64);
            polls += 1;
            failures += u64::from(!ok);
            thread::sleep(Duration::from_millis(2));
        }
        (worst, polls, failures)
    })
}

/// Senders run at a lower CPU priority than the prober: on a two-core machine the load
/// generator would otherwise delay the prober itself, and the figure would measure the
/// client. The server's threads are left as they are.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain system call on the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
    }
}

fn summary(status: u16, body: &[u8]) -> String {
    let code = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
        .unwrap_or_else(|| format!("{} B answer", body.len()));
    format!("{status} {code}")
}

fn run_case(args: &Args, case: &Case) -> anyhow::Result<()> {
    let server = Server::start(args)?;
    let pid = server.child.id();
    let base_kib = status_kib(pid, "VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let health = poll_health(server.health, stop.clone());
    let path = format!("/{}", case.verb);
    let started = Instant::now();
    let (status, body) = thread::scope(|s| {
        s.spawn(|| {
            lower_priority();
            request(server.addr, "POST", &path, &case.body, Duration::from_secs(60))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("client thread panicked"))
    })??;
    let single_ms = started.elapsed().as_millis();
    let single_hwm = status_kib(pid, "VmHWM:");
    let started = Instant::now();
    let answers: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = (0..args.concurrent)
            .map(|_| {
                s.spawn(|| {
                    lower_priority();
                    request(server.addr, "POST", &path, &case.body, Duration::from_secs(60))
                        .map(|(st, b)| summary(st, &b))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("client thread panicked"))
                    .and_then(|r| r)
                    .unwrap_or_else(|e| format!("error: {e}"))
            })
            .collect()
    });
    let concurrent_ms = started.elapsed().as_millis();
    let concurrent_hwm = status_kib(pid, "VmHWM:");
    thread::sleep(Duration::from_millis(200));
    let after_kib = status_kib(pid, "VmRSS:");
    stop.store(true, Ordering::Relaxed);
    let (worst_us, polls, failures) = health.join().map_err(|_| anyhow::anyhow!("health poller panicked"))?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let body_mib = case.body.len() as f64 / (1 << 20) as f64;
    let mut distinct = answers.clone();
    distinct.sort();
    distinct.dedup();
    println!(
        "{:<26} {:>10} {:>6.1} MiB  {:<28} {:>6} ms  peak {:>7.1} MiB ({:>4.1}x body, limit {:>6.1})  x{} {:>6} ms peak {:>7.1} MiB [{}]  rss after {:>6.1} (base {:.1})  log {:>8} B  healthz worst {:>6.1} ms over {} polls, {} failed",
        case.name,
        case.verb,
        body_mib,
        summary(status, &body),
        single_ms,
        mib(single_hwm),
        mib(single_hwm) / body_mib,
        8.0 * body_mib + 64.0,
        args.concurrent,
        concurrent_ms,
        mib(concurrent_hwm),
        distinct.join(", "),
        mib(after_kib),
        mib(base_kib),
        server.log_bytes.load(Ordering::Relaxed),
        worst_us as f64 / 1000.0,
        polls,
        failures,
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let size = args.mib << 20;
    for case in cases(size).into_iter().chain(realistic(size)?) {
        if args.case.is_empty() || args.case.iter().any(|c| c == case.name) {
            run_case(&args, &case).with_context(|| format!("case {}", case.name))?;
        }
    }
    Ok(())
}

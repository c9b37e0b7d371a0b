//! coloc-load: a loopback HTTP/1.1 load generator for the extender's verbs.
//!
//!     coloc-load --url http://127.0.0.1:8888/filter --body filter.json \
//!                --concurrency 64 --duration 10s [--warmup 2s] [--requests N] [--rss-pid PID]
//!
//! Keeps `--concurrency` keep-alive connections busy, each posting the body
//! (`Content-Type: application/json`) as soon as its previous answer has arrived — the way
//! kube-scheduler's extender client behaves, one request per connection at a time. Stops at
//! `--duration` (after `--warmup`) or after `--requests` measured requests, whichever comes
//! first. Prints requests, errors (non-200 answers and transport errors), throughput and
//! latency percentiles computed exactly from every recorded sample. With `--rss-pid`,
//! samples VmRSS/VmHWM of that process from /proc once a second.
//!
//! Only loopback targets (127.0.0.0/8, localhost, ::1) are accepted: this is a tool for
//! measuring a local build, not for loading someone's cluster.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Parser;
use coloc_bench::procstat::{cpu_ticks, status_kib};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "coloc-load", about = "Loopback HTTP/1.1 load generator for coloc-extender verbs")]
struct Args {
    /// Target, e.g. http://127.0.0.1:8888/filter (loopback only; http only).
    #[arg(long)]
    url: String,
    /// Request body file (posted as application/json).
    #[arg(long)]
    body: PathBuf,
    /// Keep-alive connections, each with one request in flight at a time.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Measurement time after the warm-up, e.g. 10s, 500ms, 2m. Always a bound: with
    /// --requests the default is 300s.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Warm-up before measuring (requests sent then are not recorded).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    warmup: Duration,
    /// Stop after this many measured requests.
    #[arg(long)]
    requests: Option<u64>,
    /// Per-request time limit (a slower answer counts as an error, as with kube-scheduler's
    /// httpTimeout).
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    timeout: Duration,
    /// Sample VmRSS/VmHWM of this process (e.g. the server) once a second.
    #[arg(long)]
    rss_pid: Option<u32>,
    /// Client runtime worker threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?}: expected a duration like 10s, 500ms or 2m"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m)")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?}: must be a non-negative duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Target address and Host header, refusing anything that is not loopback.
fn loopback_target(url: &str) -> anyhow::Result<(Uri, SocketAddr, String)> {
    let uri: Uri = url.parse().with_context(|| format!("--url {url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => bail!("--url {url:?}: scheme {other:?} is not supported (plain http on loopback only)"),
        None => bail!("--url {url:?}: expected http://127.0.0.1:PORT/verb"),
    }
    let authority = uri.authority().context("--url has no host")?.clone();
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(80);
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(IpAddr::V4(v4)) if v4.is_loopback() => IpAddr::V4(v4),
            Ok(IpAddr::V6(v6)) if v6 == Ipv6Addr::LOCALHOST => IpAddr::V6(v6),
            _ => bail!("--url host {host:?} is not loopback: coloc-load only targets 127.0.0.0/8, localhost or ::1"),
        }
    };
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let path_uri: Uri = path.parse()?;
    Ok((path_uri, SocketAddr::new(ip, port), authority.as_str().to_string()))
}

/// A whole body in one frame; cloning `Bytes` shares the buffer (no copy per request).
struct Full(Option<Bytes>);

impl Body for Full {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }
    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
    }
}

/// Reads the answer to the end (a request is done when its whole answer is in).
async fn drain(mut body: Incoming) -> Result<u64, hyper::Error> {
    let mut n = 0;
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(data) = frame?.into_data() {
            n += data.len() as u64;
        }
    }
    Ok(n)
}

struct Shared {
    addr: SocketAddr,
    path: Uri,
    host: String,
    body: Bytes,
    timeout: Duration,
    measure_from: Instant,
    deadline: Instant,
    /// Measured requests started so far (for --requests).
    started: AtomicU64,
    limit: u64,
    errors: AtomicU64,
    warmup_requests: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

impl Shared {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().unwrap();
        if first.len() < 5 {
            first.push(what);
        }
    }
}

struct WorkerResult {
    /// Latency of each measured 200 answer, nanoseconds.
    samples: Vec<u64>,
    last_done: Option<Instant>,
    bytes_in: u64,
}

async fn worker(s: Arc<Shared>) -> WorkerResult {
    let mut out = WorkerResult { samples: Vec::with_capacity(1 << 16), last_done: None, bytes_in: 0 };
    'connect: loop {
        if Instant::now() >= s.deadline {
            return out;
        }
        let stream = match TcpStream::connect(s.addr).await {
            Ok(st) => st,
            Err(e) => {
                s.error(format!("connect {}: {e}", s.addr));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue 'connect;
            }
        };
        let _ = stream.set_nodelay(true);
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(x) => x,
            Err(e) => {
                s.error(format!("handshake: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue 'connect;
            }
        };
        let conn_task = tokio::spawn(conn);
        loop {
            let now = Instant::now();
            if now >= s.deadline {
                conn_task.abort();
                return out;
            }
            let measured = now >= s.measure_from;
            if measured && s.started.fetch_add(1, Ordering::Relaxed) >= s.limit {
                conn_task.abort();
                return out;
            }
            if sender.ready().await.is_err() {
                s.error("connection closed by server".into());
                continue 'connect;
            }
            let req = Request::builder()
                .method(Method::POST)
                .uri(s.path.clone())
                .header(hyper::header::HOST, s.host.as_str())
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full(Some(s.body.clone())))
                .expect("valid request");
            let t0 = Instant::now();
            let result = tokio::time::timeout(s.timeout, async {
                let resp = sender.send_request(req).await?;
                let status = resp.status();
                let n = drain(resp.into_body()).await?;
                Ok::<_, hyper::Error>((status, n))
            })
            .await;
            let done = Instant::now();
            match result {
                Ok(Ok((StatusCode::OK, n))) => {
                    if measured {
                        out.samples.push((done - t0).as_nanos() as u64);
                        out.last_done = Some(done);
                        out.bytes_in += n;
                    } else {
                        s.warmup_requests.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Ok((status, _))) => {
                    if measured {
                        out.last_done = Some(done);
                    }
                    s.error(format!("HTTP {status}"));
                }
                Ok(Err(e)) => {
                    s.error(format!("transport: {e}"));
                    conn_task.abort();
                    continue 'connect;
                }
                Err(_) => {
                    s.error(format!("no answer within {:?}", s.timeout));
                    conn_task.abort();
                    continue 'connect;
                }
            }
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Mem {
    rss_kb: u64,
    hwm_kb: u64,
}

fn read_mem(pid: u32) -> Option<Mem> {
    let pid = pid.to_string();
    Some(Mem { rss_kb: status_kib(&pid, "VmRSS:")?, hwm_kb: status_kib(&pid, "VmHWM:")? })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    // Nearest rank: the smallest sample with at least p of all samples at or below it.
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

fn main() -> std::process::ExitCode {
    match try_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("coloc-load: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn try_main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let (path, addr, host) = loopback_target(&args.url)?;
    let body = std::fs::read(&args.body).with_context(|| format!("cannot read --body {}", args.body.display()))?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(t) = args.threads {
        rt.worker_threads(t.max(1));
    }
    let rt = rt.enable_all().build()?;
    rt.block_on(run(args, path, addr, host, Bytes::from(body)))
}

async fn run(args: Args, path: Uri, addr: SocketAddr, host: String, body: Bytes) -> anyhow::Result<()> {
    let duration = args.duration.unwrap_or(if args.requests.is_some() {
        Duration::from_secs(300)
    } else {
        Duration::from_secs(10)
    });
    let start = Instant::now();
    let measure_from = start + args.warmup;
    let body_len = body.len();
    let shared = Arc::new(Shared {
        addr,
        path,
        host,
        body,
        timeout: args.timeout,
        measure_from,
        deadline: measure_from + duration,
        started: AtomicU64::new(0),
        limit: args.requests.unwrap_or(u64::MAX),
        errors: AtomicU64::new(0),
        warmup_requests: AtomicU64::new(0),
        first_errors: Mutex::new(Vec::new()),
    });

    let mem_samples: Arc<Mutex<Vec<Mem>>> = Arc::default();
    let sampler = args.rss_pid.map(|pid| {
        let samples = mem_samples.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                match read_mem(pid) {
                    Some(m) => samples.lock().unwrap().push(m),
                    None => {
                        eprintln!("coloc-load: cannot read /proc/{pid}/status; RSS sampling stopped");
                        return;
                    }
                }
            }
        })
    });

    // CPU time of this client and of the server over the measured window: on a small
    // machine they share the cores, and the split tells who the bottleneck is.
    let server_pid = args.rss_pid.map(|p| p.to_string());
    let cpu_at_start = {
        let server_pid = server_pid.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from).await;
            (cpu_ticks("self"), server_pid.as_deref().and_then(cpu_ticks))
        })
    };
    let workers: Vec<_> = (0..args.concurrency).map(|_| tokio::spawn(worker(shared.clone()))).collect();
    let mut samples = Vec::new();
    let mut last_done: Option<Instant> = None;
    let mut bytes_in = 0;
    for w in workers {
        let r = w.await?;
        samples.extend(r.samples);
        bytes_in += r.bytes_in;
        last_done = last_done.max(r.last_done);
    }
    if let Some(s) = sampler {
        s.abort();
        if let Some(pid) = args.rss_pid {
            if let Some(m) = read_mem(pid) {
                mem_samples.lock().unwrap().push(m);
            }
        }
    }

    let cpu_at_end = (cpu_ticks("self"), server_pid.as_deref().and_then(cpu_ticks));
    let cpu_at_start = cpu_at_start.await?;
    let errors = shared.errors.load(Ordering::Relaxed);
    let elapsed = last_done.map_or(Duration::ZERO, |t| t.saturating_duration_since(measure_from));
    samples.sort_unstable();
    println!("target       {} ({} connections, body {} bytes)", args.url, args.concurrency, body_len);
    println!(
        "warm-up      {:?} ({} requests, not recorded)",
        args.warmup,
        shared.warmup_requests.load(Ordering::Relaxed)
    );
    println!("measured     {:.3} s", elapsed.as_secs_f64());
    println!("requests     {} ok", samples.len());
    println!("errors       {errors}");
    for e in shared.first_errors.lock().unwrap().iter() {
        println!("  e.g.       {e}");
    }
    if !samples.is_empty() && elapsed > Duration::ZERO {
        println!("throughput   {:.1} req/s", samples.len() as f64 / elapsed.as_secs_f64());
        println!("answers      {:.1} bytes/request", bytes_in as f64 / samples.len() as f64);
        println!(
            "latency      p50 {}  p90 {}  p99 {}  max {}  (min {}, mean {})",
            ms(percentile(&samples, 0.50)),
            ms(percentile(&samples, 0.90)),
            ms(percentile(&samples, 0.99)),
            ms(*samples.last().unwrap()),
            ms(samples[0]),
            ms(samples.iter().sum::<u64>() / samples.len() as u64),
        );
    }
    let cpu_line = |who: &str, a: Option<u64>, b: Option<u64>| {
        if let (Some(a), Some(b)) = (a, b) {
            let secs = b.saturating_sub(a) as f64 / 100.0;
            let per_req = if samples.is_empty() { 0.0 } else { secs * 1e6 / samples.len() as f64 };
            println!(
                "cpu {who:<8} {secs:.2} s ({:.0}% of one core, {per_req:.1} us/request)",
                100.0 * secs / elapsed.as_secs_f64().max(1e-9)
            );
        }
    };
    cpu_line("client", cpu_at_start.0, cpu_at_end.0);
    cpu_line("server", cpu_at_start.1, cpu_at_end.1);
    if let Some(pid) = args.rss_pid {
        let m = mem_samples.lock().unwrap();
        if let (Some(first), Some(last)) = (m.first(), m.last()) {
            let peak = m.iter().map(|x| x.rss_kb).max().unwrap_or(0);
            println!(
                "rss pid {pid}  VmRSS first {}  last {}  peak sampled {}  VmHWM {} ({} samples)",
                mib(first.rss_kb),
                mib(last.rss_kb),
                mib(peak),
                mib(last.hwm_kb),
                m.len()
            );
        }
    }
    if samples.is_empty() {
        bail!("no successful request");
    }
    Ok(())
}

//! The binary as a user runs it: check-policy, replay, serve and SIGTERM.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_coloc-extender");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_policy_accepts_the_shipped_policies() {
    for f in [
        "policy/default.yaml",
        "policy/koordinator.yaml",
        "policy/custom-priority-classes.yaml",
        "manifests/policy.yaml",
    ] {
        let out = Command::new(BIN).arg("check-policy").arg(root().join(f)).output().unwrap();
        assert!(out.status.success(), "{f}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
    }
}

#[test]
fn check_policy_names_the_bad_field_and_line() {
    let dir = std::env::temp_dir().join(format!("coloc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "defaultClass: a\nclasses:\n  - name: a\n    preempts: [ghost]\n").unwrap();
    let out = Command::new(BIN).arg("check-policy").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("classes[0].preempts[0]") && err.contains("ghost") && err.contains("line 4"), "{err}");
}

/// `replay --verb preempt` of `payload` on `snapshot` (default policy unless given).
fn replay_preempt(policy: Option<&str>, snapshot: &std::path::Path, payload: &std::path::Path) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["replay", "--verb", "preempt", "--now", "2026-11-21T19:00:00Z"]);
    if let Some(policy) = policy {
        cmd.arg("--policy").arg(root().join(policy));
    }
    cmd.arg("--snapshot").arg(snapshot).arg(payload).output().unwrap()
}

#[test]
fn replay_prints_the_answer_and_the_reasons() {
    let p = root().join("tests/fixtures/payloads/r1-nodecache-false");
    let out = replay_preempt(
        Some("policy/custom-priority-classes.yaml"),
        &p.join("0037-preempt.snapshot.json"),
        &p.join("0037-preempt.json"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["NodeNameToMetaVictims"].as_object().unwrap().keys().collect::<Vec<_>>(), vec!["node-a2"]);
    let why = String::from_utf8_lossy(&out.stderr);
    for expected in ["[selected]", "[outranked]", "[does_not_fit]", "[not_recreatable]", "[pdb_violation]"] {
        assert!(why.contains(expected), "missing {expected} in:\n{why}");
    }
}

#[test]
fn replay_rejects_a_malformed_payload_with_its_name() {
    let dir = std::env::temp_dir().join(format!("coloc-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("broken.json");
    std::fs::write(&bad, "{\"Pod\": ").unwrap();
    let out = Command::new(BIN).args(["replay", "--verb", "filter"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.json") && err.contains("JSON"), "{err}");
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Starts `serve` on a free loopback port with `args` after `--listen`, stderr captured,
/// and waits until it accepts connections. The admin port is a free one too unless `args`
/// name it (tests run at once; the default 127.0.0.1:8082 would be shared).
fn start_serve(args: &[&std::ffi::OsStr]) -> (std::process::Child, String) {
    let addr = free_addr();
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", &addr]).args(args);
    if !args.iter().any(|a| *a == "--admin-listen") {
        cmd.args(["--admin-listen", &free_addr()]);
    }
    let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, addr)
}

fn http(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[cfg(unix)]
#[test]
fn serve_answers_and_stops_cleanly_on_sigterm() {
    let snapshot = root().join("tests/fixtures/payloads/r1-nodecache-false/0037-preempt.snapshot.json");
    let (mut child, addr) =
        start_serve(&["--path-prefix".as_ref(), "/scheduler".as_ref(), "--snapshot".as_ref(), snapshot.as_os_str()]);
    assert!(http(&addr, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200"));
    let body =
        std::fs::read_to_string(root().join("tests/fixtures/payloads/r1-nodecache-false/0001-filter.json")).unwrap();
    let reply = http(
        &addr,
        &format!("POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()),
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{}", &reply[..reply.len().min(300)]);
    assert!(reply.contains("\"FailedAndUnresolvableNodes\""));

    // SIGTERM: stop accepting, drain, exit 0.
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.contains("draining"), "{log}");
}

#[test]
fn serve_refuses_bad_settings_with_a_clear_error() {
    for (args, expected) in [
        (vec!["--path-prefix", "/{x}"], "is not allowed"),
        (vec!["--path-prefix", "/{*x}"], "is not allowed"),
        (vec!["--path-prefix", "sched"], "must start with '/'"),
        (vec!["--max-concurrency", "0"], "would refuse every request"),
        (vec!["--io-threads", "0"], "would serve nothing"),
        (vec!["--io-threads", "many"], "\"many\""),
        (vec!["--request-timeout", "0s"], "is zero"),
        (vec!["--requeue"], "--kube"),
        // The controller's own flags are not serve's: it runs apart (`requeue`).
        (vec!["--kube", "--requeue", "--requeue-stuck-after", "60s"], "unexpected argument '--requeue-stuck-after'"),
    ] {
        let out = Command::new(BIN).arg("serve").args(["--listen", "127.0.0.1:0"]).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[cfg(unix)]
#[test]
fn sighup_reloads_the_policy_and_a_vanished_policy_file_is_reported() {
    let dir = std::env::temp_dir().join(format!("coloc-cli-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::copy(root().join("policy/default.yaml"), &policy).unwrap();
    let (mut child, addr) = start_serve(&["--policy".as_ref(), policy.as_os_str()]);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP must not end the process");
    // The file goes away: the last good policy stays, /readyz says why.
    std::fs::remove_file(&policy).unwrap();
    let started = Instant::now();
    loop {
        let ready = http(&addr, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if ready.contains("unreadable") {
            assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "vanished policy not reported: {ready}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = child.wait();
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.contains("SIGHUP: reloading policy and certificates"), "{log}");
    assert!(log.contains("policy reloaded"), "SIGHUP re-reads the policy: {log}");
    assert!(log.contains("policy file unreadable"), "{log}");
    assert!(log.contains("listener closed"), "{log}");
}

#[cfg(unix)]
#[test]
fn an_invalid_policy_at_start_is_served_as_the_default_in_shadow_until_fixed() {
    // A replica restarted (drain, OOM kill) after someone broke the ConfigMap must not
    // crash-loop: it serves kube-scheduler's own answers and says why, loudly.
    let dir = std::env::temp_dir().join(format!("coloc-cli-badpolicy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, "defaultClass: a\nclasses: [{name: a, preempts: [ghost]}]\n").unwrap();
    let admin = free_addr();
    let (mut child, addr) =
        start_serve(&["--policy".as_ref(), policy.as_os_str(), "--admin-listen".as_ref(), admin.as_ref()]);
    let get = |at: &str, path: &str| http(at, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    let ready = get(&addr, "/readyz");
    assert!(
        ready.starts_with("HTTP/1.1 200")
            && ready.contains("invalid")
            && ready.contains("built-in default policy in shadow mode"),
        "{ready}"
    );
    assert!(get(&admin, "/metrics").contains("coloc_policy_fallback 1"));
    // Answers are kube-scheduler's own: every node kept.
    let body =
        std::fs::read_to_string(root().join("tests/fixtures/payloads/r1-nodecache-false/0001-filter.json")).unwrap();
    let reply = http(&addr, &format!("POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()));
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.contains("\"FailedAndUnresolvableNodes\":{}"),
        "{}",
        &reply[..reply.len().min(400)]
    );
    // Fixed: taken at the next look, the fallback over.
    std::fs::copy(root().join("policy/default.yaml"), &policy).unwrap();
    let started = Instant::now();
    while get(&addr, "/readyz").contains("invalid") {
        assert!(started.elapsed() < Duration::from_secs(10), "the fixed policy was not taken");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(get(&admin, "/metrics").contains("coloc_policy_fallback 0"));
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = child.wait();
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.contains("invalid policy at start") && log.contains("ghost"), "{log}");
    assert_eq!(
        log.matches("policy reload failed").count(),
        0,
        "the start-up problem is said once, not on every look: {log}"
    );
    assert!(log.contains("policy reloaded"), "{log}");
}

#[cfg(unix)]
#[test]
fn one_request_logs_one_line_at_info() {
    // 1,000 unknown UIDs (the per-node cap) on a known node: one "ignored" decision each.
    // At the default level the log gets one line for the request, counting them.
    let snapshot = root().join("tests/fixtures/payloads/r2-nodecache-true/0037-preempt.snapshot.json");
    let (mut child, addr) = start_serve(&["--snapshot".as_ref(), snapshot.as_os_str()]);
    let request: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root().join("tests/fixtures/payloads/r2-nodecache-true/0037-preempt.json")).unwrap(),
    )
    .unwrap();
    let uids: Vec<serde_json::Value> = (0..1000).map(|i| serde_json::json!({"UID": format!("unknown-{i}")})).collect();
    let body = serde_json::json!({"Pod": request["Pod"], "NodeNameToMetaVictims": {"node-a1": {"Pods": uids, "NumPDBViolations": 0}}}).to_string();
    let reply = http(&addr, &format!("POST /preempt HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()));
    assert!(reply.starts_with("HTTP/1.1 200"), "{}", &reply[..reply.len().min(300)]);
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let _ = child.wait();
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    let request_lines: Vec<&str> = log.lines().filter(|l| l.contains("verb=")).collect();
    assert_eq!(request_lines.len(), 1, "{log}");
    assert!(request_lines[0].contains("answered") && request_lines[0].contains("×1000"), "{log}");
    assert!(log.len() < 8 << 10, "{} bytes of log for one request", log.len());
}

#[test]
fn replay_reads_podgroups_from_the_snapshot() {
    let p = root().join("tests/fixtures/gangs");
    let out = replay_preempt(None, &p.join("snapshot.json"), &p.join("preempt.json"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["NodeNameToMetaVictims"].as_object().unwrap().keys().collect::<Vec<_>>(), vec!["n2"]);
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("[gang_all_split] PodGroup ml/train-7 (native, disruptionMode All)"), "{why}");
    assert!(why.contains("PodGroup ml/vc (volcano, minMember 0, 0 would remain)"), "{why}");
}

#[cfg(unix)]
#[test]
fn explain_prints_a_pods_recent_decisions_from_the_admin_port() {
    let (health, admin) = (free_addr(), free_addr());
    let snapshot = root().join("tests/fixtures/payloads/r1-nodecache-false/0037-preempt.snapshot.json");
    let (mut child, addr) = start_serve(&[
        "--snapshot".as_ref(),
        snapshot.as_os_str(),
        "--health-listen".as_ref(),
        health.as_ref(),
        "--admin-listen".as_ref(),
        admin.as_ref(),
        "--mode".as_ref(),
        "enforce".as_ref(),
    ]);
    let body =
        std::fs::read_to_string(root().join("tests/fixtures/payloads/r1-nodecache-false/0037-preempt.json")).unwrap();
    let reply = http(&addr, &format!("POST /preempt HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()));
    assert!(reply.starts_with("HTTP/1.1 200"), "{}", &reply[..reply.len().min(300)]);
    // Decisions and metrics are on the admin port alone; probes on the health port.
    let get = |at: &str, path: &str| http(at, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    for path in ["/decisions?pod=online/online-2", "/metrics"] {
        assert!(get(&admin, path).starts_with("HTTP/1.1 200"), "{path} on the admin port");
        assert!(get(&health, path).starts_with("HTTP/1.1 404"), "{path} on the health port");
        assert!(get(&addr, path).starts_with("HTTP/1.1 404"), "{path} on the scheduler port");
    }
    assert!(get(&health, "/readyz").starts_with("HTTP/1.1 200"));
    assert!(get(&admin, "/readyz").starts_with("HTTP/1.1 404"));

    let out = Command::new(BIN).args(["explain", "--help"]).output().unwrap();
    // Whatever the width clap wraps at.
    let help = String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("port-forward deploy/coloc-scheduler 8082") && help.contains("[default: http://127.0.0.1:8082]"),
        "{help}"
    );

    let server = format!("http://{admin}");
    let out = Command::new(BIN).args(["explain", "online/online-2", "--server", &server]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("online/online-2: 1 decision(s)"), "{text}");
    assert!(text.contains(" preempt: ") && text.contains("[classified]"), "{text}");

    let out = Command::new(BIN).args(["explain", "online/nobody", "--server", &server]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("no decisions about online/nobody"));
    let out = Command::new(BIN).args(["explain", "not-a-pod", "--server", &server]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("is not NAMESPACE/NAME"));
    let _ = child.kill();
    let _ = child.wait();
    let out = Command::new(BIN).args(["explain", "online/online-2", "--server", &server]).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("cannot connect to"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_refuses_a_bad_admin_listen_address_naming_the_flag() {
    for (value, expected) in [
        ("nonsense", "\"nonsense\" is not ADDR:PORT (e.g. 127.0.0.1:8082) or off"),
        ("8082", "\"8082\" is not ADDR:PORT"),
        ("localhost:8082", "is not ADDR:PORT"),
        ("127.0.0.1:99999", "is not ADDR:PORT"),
        ("OFF", "is not ADDR:PORT"),
        ("", "is not ADDR:PORT"),
    ] {
        let out =
            Command::new(BIN).args(["serve", "--listen", "127.0.0.1:0", "--admin-listen", value]).output().unwrap();
        assert!(!out.status.success(), "{value:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--admin-listen") && err.contains(expected), "{value:?}: {err}");
    }
}

#[cfg(unix)]
#[test]
fn the_admin_port_off_loopback_is_open_only_when_asked_and_can_be_turned_off() {
    /// Starts serve with `args`, stops it once it answers, returns its log.
    fn log_of(args: &[&str]) -> String {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (mut child, addr) = start_serve(&args);
        assert!(
            http(&addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200")
        );
        let _ = child.kill();
        let _ = child.wait();
        let mut log = String::new();
        child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        log
    }
    let refused = |args: &[&str]| {
        let out = Command::new(BIN).args(["serve", "--listen", &free_addr()]).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let port = free_addr().rsplit_once(':').unwrap().1.to_string();
    let anywhere = format!("0.0.0.0:{port}");
    // Off loopback, the flags must say who may read it.
    let err = refused(&["--admin-listen", &anywhere]);
    assert!(
        err.contains("is not on loopback") && err.contains("--admin-auth kube") && err.contains("--admin-auth none"),
        "{err}"
    );
    // Tokens are checked with the API server: not without one.
    let err = refused(&["--admin-auth", "kube"]);
    assert!(err.contains("--admin-auth kube") && err.contains("it needs --kube"), "{err}");
    let open = log_of(&["--admin-listen", &anywhere, "--admin-auth", "none"]);
    assert!(open.contains("the admin port is not on loopback") && open.contains("/decisions"), "{open}");
    assert!(open.contains("admin_auth=\"none\""), "{open}");
    let off = log_of(&["--admin-listen", "off"]);
    assert!(off.contains("admin=None") && !off.contains("not on loopback"), "{off}");
    let local = log_of(&["--admin-listen", &free_addr()]);
    assert!(!local.contains("not on loopback"), "{local}");

    // A taken port is named, with the flag.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let out = Command::new(BIN).args(["serve", "--listen", &free_addr(), "--admin-listen", &at]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("cannot listen on {at} (--admin-listen")), "{err}");
}

/// `explain` against a stand-in admin port that refuses every request with 401, as
/// `--admin-auth kube` does a missing or rejected token: the request it sent, and what it
/// printed.
#[cfg(unix)]
fn explain_refused(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("http://{}", listener.local_addr().unwrap());
    let stand_in = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0; 4096];
        while !request.ends_with(b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the request ended early");
            request.extend_from_slice(&buf[..n]);
        }
        let body = r#"{"code":"unauthenticated","error":"the API server does not accept the bearer token"}"#;
        let reply = format!("HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        conn.write_all(reply.as_bytes()).unwrap();
        String::from_utf8(request).unwrap()
    });
    let mut cmd = Command::new(BIN);
    cmd.args(["explain", "online/web-0", "--server", &server]).args(args).env_remove("COLOC_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    (stand_in.join().unwrap().to_ascii_lowercase(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[cfg(unix)]
#[test]
fn explain_sends_the_token_of_its_file_or_the_environment_and_says_how_to_give_one() {
    let dir = std::env::temp_dir().join(format!("coloc-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "from-the-file\n").unwrap();
    let file = file.to_str().unwrap();

    let (request, err) = explain_refused(&["--token-file", file], &[("COLOC_TOKEN", "from-the-env")]);
    assert!(request.contains("\r\nauthorization: bearer from-the-file\r\n"), "the file wins: {request}");
    assert!(err.contains("401") && err.contains("does not accept the bearer token"), "{err}");
    assert!(!err.contains("--token-file FILE"), "a token was sent: no hint to send one\n{err}");

    let (request, _) = explain_refused(&[], &[("COLOC_TOKEN", "from-the-env")]);
    assert!(request.contains("\r\nauthorization: bearer from-the-env\r\n"), "{request}");

    let (request, err) = explain_refused(&[], &[]);
    assert!(!request.contains("authorization:"), "{request}");
    assert!(err.contains("--token-file FILE or $COLOC_TOKEN"), "{err}");

    std::fs::write(dir.join("empty"), "\n").unwrap();
    let out =
        Command::new(BIN).args(["explain", "online/web-0", "--token-file"]).arg(dir.join("empty")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is empty"), "{err}");
}

#[test]
fn check_policy_says_which_classes_need_filter_and_prioritize() {
    let out = Command::new(BIN).arg("check-policy").arg(root().join("policy/default.yaml")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Placement rules and scoring live only in the offline classes of the default policy.
    assert!(text.contains("needed by: batch (placement, packing, preferred nodes), free (placement, packing); the other classes need only preempt"), "{text}");
    for advice in [
        "kube-scheduler-config-per-pod-verbs.yaml",
        "coloc-extender.io/per-pod-verbs",
        "priorityClassName in [offline-batch, koord-batch, free, free-tier, koord-free]",
    ] {
        assert!(text.contains(advice), "missing {advice} in:\n{text}");
    }

    let dir = std::env::temp_dir().join(format!("coloc-cli-verbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No placement, no scoring: preempt alone carries the policy.
    let plain = dir.join("plain.yaml");
    std::fs::write(&plain, "defaultClass: a\nclasses:\n  - name: online\n    match: [{priority: {min: 9000}}]\n    preempts: [a]\n  - name: a\n    victim: {allowed: true}\n").unwrap();
    let text = String::from_utf8_lossy(&Command::new(BIN).arg("check-policy").arg(&plain).output().unwrap().stdout)
        .into_owned();
    assert!(text.contains("no class needs filter/prioritize"), "{text}");
    // A class found by labels cannot be marked by PriorityClass or priority.
    let labelled = dir.join("labelled.yaml");
    std::fs::write(&labelled, "defaultClass: a\nclasses:\n  - name: spot\n    match: [{labels: {tier: spot}}]\n    placement: {requireNodeLabels: {spot: \"true\"}}\n  - name: a\n").unwrap();
    let text = String::from_utf8_lossy(&Command::new(BIN).arg("check-policy").arg(&labelled).output().unwrap().stdout)
        .into_owned();
    assert!(
        text.contains("needed by: spot (placement)")
            && text.contains("note: class spot also matches pods by namespace or labels"),
        "{text}"
    );
}

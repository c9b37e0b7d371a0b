//! HTTPS with generated certificates: server auth, client-certificate checks, reload.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use coloc_extender::cluster::ViewCell;
use coloc_extender::http::state::{AppState, ViewSource};
use coloc_extender::http::{self, server::ServeOptions};
use coloc_extender::policy::Policy;
use coloc_extender::tls::{self, TlsAcceptorCell, TlsFiles};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

type Ca = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// (certificate PEM, key PEM, certificate DER, key DER)
fn leaf(ca: &Ca, cn: &str, client: bool) -> (String, String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages =
        vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, ca).unwrap();
    let key_der = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    (cert.pem(), key.serialize_pem(), cert.der().clone(), key_der)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("coloc-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Server {
    addr: SocketAddr,
    cell: Arc<TlsAcceptorCell>,
}

async fn start(files: &TlsFiles) -> Server {
    let cell = Arc::new(TlsAcceptorCell::new(files.load().unwrap()));
    let state = AppState::new(Policy::builtin_default().enforced(), Arc::new(ViewCell::default()), ViewSource::None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = ServeOptions { tls: Some(cell.clone()), ..ServeOptions::default() };
    tokio::spawn(http::server::serve(
        listener,
        http::router(state, "", decision_workers()),
        opts,
        std::future::pending(),
    ));
    Server { addr, cell }
}

/// GET /healthz over TLS; the server's certificate CN and the response's first line.
async fn get(
    addr: SocketAddr,
    trust: &Ca,
    client: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
) -> Result<(String, String), String> {
    let mut roots = RootCertStore::empty();
    roots.add(trust.der().clone()).unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    let cn = x509_cn(&peer);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    tls.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf).to_string();
    Ok((cn, text.lines().next().unwrap_or("").to_string()))
}

/// The CN as it appears in the DER (good enough to tell two test certificates apart).
fn x509_cn(der: &CertificateDer) -> String {
    let bytes = der.as_ref();
    for name in ["server-one", "server-two"] {
        if bytes.windows(name.len()).any(|w| w == name.as_bytes()) {
            return name.to_string();
        }
    }
    "unknown".into()
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[tokio::test]
async fn serves_https_with_the_given_certificate() {
    let dir = temp_dir("plain");
    let root = ca("root");
    let (cert, key, _, _) = leaf(&root, "server-one", false);
    let files = TlsFiles { cert: write(&dir, "tls.crt", &cert), key: write(&dir, "tls.key", &key), client_ca: None };
    let server = start(&files).await;
    let (cn, status) = get(server.addr, &root, None).await.unwrap();
    assert_eq!(cn, "server-one");
    assert_eq!(status, "HTTP/1.1 200 OK");
    // A client that trusts another CA refuses the server.
    assert!(get(server.addr, &ca("other"), None).await.is_err());
}

#[tokio::test]
async fn client_certificates_are_required_when_a_client_ca_is_set() {
    let dir = temp_dir("mtls");
    let root = ca("root");
    let clients = ca("scheduler-ca");
    let (cert, key, _, _) = leaf(&root, "server-one", false);
    let files = TlsFiles {
        cert: write(&dir, "tls.crt", &cert),
        key: write(&dir, "tls.key", &key),
        client_ca: Some(write(&dir, "ca.crt", &clients.pem())),
    };
    let server = start(&files).await;
    let (_, _, sched_der, sched_key) = leaf(&clients, "kube-scheduler", true);
    let (_, status) = get(server.addr, &root, Some((sched_der, sched_key))).await.unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK", "kube-scheduler's certificate is accepted");

    let anonymous = get(server.addr, &root, None).await;
    assert!(anonymous.is_err() || !anonymous.as_ref().unwrap().1.contains("200"), "no certificate: {anonymous:?}");
    let (_, _, rogue_der, rogue_key) = leaf(&ca("rogue"), "intruder", true);
    let rogue = get(server.addr, &root, Some((rogue_der, rogue_key))).await;
    assert!(rogue.is_err() || !rogue.as_ref().unwrap().1.contains("200"), "foreign CA: {rogue:?}");
}

#[tokio::test]
async fn certificates_are_reloaded_and_a_broken_reload_keeps_the_old_one() {
    let dir = temp_dir("reload");
    let root = ca("root");
    let (cert, key, _, _) = leaf(&root, "server-one", false);
    let files = TlsFiles { cert: write(&dir, "tls.crt", &cert), key: write(&dir, "tls.key", &key), client_ca: None };
    let server = start(&files).await;
    tokio::spawn(tls::watch(
        files.clone(),
        server.cell.clone(),
        Duration::from_millis(20),
        tokio::sync::watch::channel(0).1,
    ));

    // Broken: the certificate file is garbage.
    write(&dir, "tls.crt", "not a certificate");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(get(server.addr, &root, None).await.unwrap().0, "server-one", "broken files keep the old certificate");

    // Rotated, the way a Secret update lands: both files replaced.
    let (cert2, key2, _, _) = leaf(&root, "server-two", false);
    write(&dir, "tls.key", &key2);
    write(&dir, "tls.crt", &cert2);
    let mut served = String::new();
    for _ in 0..50 {
        served = get(server.addr, &root, None).await.unwrap().0;
        if served == "server-two" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(served, "server-two");
}

#[test]
fn unreadable_files_are_named_in_the_error() {
    let files = TlsFiles { cert: "/nonexistent/tls.crt".into(), key: "/nonexistent/tls.key".into(), client_ca: None };
    let err = files.load().unwrap_err().to_string();
    assert!(err.contains("/nonexistent/tls.crt"), "{err}");
}

/// The decision workers `serve` starts beside the router.
fn decision_workers() -> std::sync::Arc<coloc_extender::workers::Workers> {
    std::sync::Arc::new(coloc_extender::workers::Workers::new(1).unwrap())
}

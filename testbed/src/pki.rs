//! Certificates for the local API server: a CA, a serving certificate for 127.0.0.1 and
//! localhost, and the service-account signing key kube-apiserver requires.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// A certificate authority of its own, named `cn`.
fn self_signed_ca(cn: &str) -> anyhow::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, cn);
    Ok(CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?)
}

pub fn write(dir: &Path) -> anyhow::Result<Pki> {
    let ca = self_signed_ca("coloc-testbed-ca")?;
    let mut serving = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    let serving_key = KeyPair::generate()?;
    let serving_cert = serving.signed_by(&serving_key, &ca)?;
    let sa_key = KeyPair::generate()?;
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        service_account_key: dir.join("sa.key"),
        service_account_pub: dir.join("sa.pub"),
    };
    std::fs::write(&pki.ca_cert, ca.pem())?;
    std::fs::write(&pki.serving_cert, serving_cert.pem())?;
    std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
    std::fs::write(&pki.service_account_key, sa_key.serialize_pem())?;
    std::fs::write(&pki.service_account_pub, sa_key.public_key_pem())?;
    Ok(pki)
}

/// The scheduler-to-extender hop over mutual TLS, as the standalone install runs it: one CA
/// signs the extender's serving certificate (for `server_name`) and kube-scheduler's client
/// certificate.
pub struct HopTls {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub server_name: String,
}

pub fn write_hop(dir: &Path, server_name: &str) -> anyhow::Result<HopTls> {
    use rcgen::ExtendedKeyUsagePurpose;
    let ca = self_signed_ca("coloc-hop-ca")?;
    let leaf = |cn: &str, usage: ExtendedKeyUsagePurpose| -> anyhow::Result<(String, String)> {
        let mut p = CertificateParams::new(vec![server_name.to_string()])?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate()?;
        Ok((p.signed_by(&key, &ca)?.pem(), key.serialize_pem()))
    };
    let (serving_cert, serving_key) = leaf(server_name, ExtendedKeyUsagePurpose::ServerAuth)?;
    let (client_cert, client_key) = leaf("kube-scheduler", ExtendedKeyUsagePurpose::ClientAuth)?;
    let hop = HopTls {
        ca_cert: dir.join("hop-ca.crt"),
        serving_cert: dir.join("hop-serving.crt"),
        serving_key: dir.join("hop-serving.key"),
        client_cert: dir.join("hop-client.crt"),
        client_key: dir.join("hop-client.key"),
        server_name: server_name.to_string(),
    };
    std::fs::write(&hop.ca_cert, ca.pem())?;
    std::fs::write(&hop.serving_cert, serving_cert)?;
    std::fs::write(&hop.serving_key, serving_key)?;
    std::fs::write(&hop.client_cert, client_cert)?;
    std::fs::write(&hop.client_key, client_key)?;
    Ok(hop)
}

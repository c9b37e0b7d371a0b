//! The single-file install (deploy/coloc-extender.yaml) is `kubectl kustomize manifests`,
//! kept in step, and a real API server accepts every object of it (server-side dry run).
//! Needs kubectl and the control plane's binaries (`KUBE_BIN_DIR`); without them each
//! test says in one line that it skipped.
//!
//! After changing manifests/: `COLOC_BLESS=1 cargo test --test install_manifest`.

use std::path::{Path, PathBuf};

use coloc_testbed::control_plane::Options;
use coloc_testbed::{Binaries, ControlPlane};

const HEADER: &str = "\
# coloc-extender, rendered from manifests/ (kubectl kustomize manifests): the extender in
# shadow mode behind a scheduler of its own. Do not edit: change manifests/ and run
# COLOC_BLESS=1 cargo test --test install_manifest. Needs the Secrets coloc-extender-tls
# and coloc-scheduler-client (manifests/cert-manager, or docs/deploy.md's openssl recipe).
";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn rendered(bins: &Binaries) -> String {
    let out = std::process::Command::new(&bins.kubectl)
        .args(["kustomize", &repo("manifests").display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "kubectl kustomize manifests: {}", String::from_utf8_lossy(&out.stderr));
    format!("{HEADER}{}", String::from_utf8(out.stdout).unwrap())
}

#[test]
fn the_install_file_is_the_rendered_manifests() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let want = rendered(&bins);
    let path = repo("deploy/coloc-extender.yaml");
    if std::env::var_os("COLOC_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(have == want, "deploy/coloc-extender.yaml is not `kubectl kustomize manifests`: COLOC_BLESS=1 cargo test --test install_manifest");
}

#[tokio::test]
async fn a_real_api_server_accepts_the_install_file() {
    let bins = match Binaries::find() {
        Ok(b) => b,
        Err(why) => return println!("install_manifest: skipped: {why}"),
    };
    let plane = ControlPlane::start(&bins, Options { controllers: false, ..Default::default() }).await.unwrap();
    let file = repo("deploy/coloc-extender.yaml").display().to_string();
    // --validate=false skips only kubectl's client-side schema check (ControlPlane::apply
    // says why); the API server validates and admits each object in full.
    let out = plane.kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "--validate=false",
        "--field-manager=coloc-install-check",
        "-f",
        &file,
    ]);
    let out = out.unwrap_or_else(|e| panic!("server-side dry run refused the install file: {e:#}"));
    // Every object, the cluster-scoped admission policies included, is named in the answer.
    for kind in [
        "deployment.apps/coloc-extender",
        "deployment.apps/coloc-scheduler",
        "mutatingadmissionpolicy.admissionregistration.k8s.io/coloc-scheduler",
        "validatingadmissionpolicy.admissionregistration.k8s.io/coloc-extender",
    ] {
        assert!(out.contains(&format!("{kind} serverside-applied (server dry run)")), "{kind} missing from:\n{out}");
    }
}

//! coloc-demo: a scenario on a local control plane, stock kube-scheduler beside the
//! extender; what it does and its flags: `coloc_testbed::demo`.

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    coloc_testbed::demo::main().await
}

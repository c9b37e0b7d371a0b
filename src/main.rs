use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = coloc_extender::cli::Cli::parse();
    match coloc_extender::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

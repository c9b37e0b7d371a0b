//! Measuring tools for coloc-extender (binaries in `src/bin/`), kept out of the product
//! crate so that its build and image carry none of them. What they share lives here.

pub mod procstat;
pub mod prom;

/// `given`, or the binary `name` beside this executable (`cargo build --release
/// --workspace` puts them together); it must exist.
pub fn sibling_program(given: Option<std::path::PathBuf>, name: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = match given {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name(name),
    };
    anyhow::ensure!(path.is_file(), "no {} (build it: cargo build --release --locked --workspace)", path.display());
    Ok(path)
}

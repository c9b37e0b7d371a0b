//! Measuring tools for coloc-extender (binaries in `src/bin/`), kept out of the product
//! crate so that its build and image carry none of them. What they share lives here.

pub mod ids;
pub mod procstat;
pub mod prom;

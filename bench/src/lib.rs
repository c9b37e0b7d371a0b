//! Measuring tools for coloc-extender (binaries in `src/bin/`), kept out of the product
//! crate so that its build and image carry none of them. What they share lives here.

// Deterministic ids live in the test bed (coloc_testbed::ids): the view benchmark uses them too.
pub use coloc_testbed::ids;
pub mod procstat;
pub mod prom;

//! Arrows run downward only: a top-level module of `src/` names (`crate::x`) only modules
//! listed below it here. A new module takes its place in `LAYERS`; an import that runs
//! upward fails this test with the file that makes it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first: plain types, the wire, the policy, the view, then decisions, then the edges.
const LAYERS: &[&str] = &[
    "model",
    "quantity",
    "reload",
    "clock",
    "wire",
    "policy",
    "cluster",
    "wake",
    "explanation",
    "events",
    "requeue",
    "decide",
    "shadow",
    "discarded",
    "pipeline",
    "service",
    "tls",
    "http",
    "uninstall",
    "cli",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs and main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.trim_end_matches(".rs").to_string();
    (first != "lib" && first != "main").then_some(first)
}

/// Every `crate::name` a text names.
fn named(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .map(|(i, m)| text[i + m.len()..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect())
        .collect()
}

#[test]
fn top_level_modules_import_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else { continue };
        let own = rank(&module).unwrap_or_else(|| panic!("src/{module} has no place in LAYERS"));
        for other in named(&std::fs::read_to_string(file).unwrap()) {
            if other == module {
                continue;
            }
            if let Some(theirs) = rank(&other) {
                if theirs > own {
                    upward.push(format!("{} names crate::{other}, a layer above {module}", file.display()));
                }
            }
        }
    }
    assert!(upward.is_empty(), "imports that run upward:\n{}", upward.join("\n"));
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let listed: BTreeSet<String> = LAYERS.iter().map(|l| l.to_string()).collect();
    assert_eq!(modules, listed);
}

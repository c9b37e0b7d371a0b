//! Docs name only files that exist: every path of this repository a doc names (in code
//! spans or as a link target) is there, so a file moved or removed fails here rather than
//! sending a reader nowhere. The journal (`docs/journal/`) is history and names files as
//! they were; it is not checked.

use std::path::{Path, PathBuf};

/// The top-level places a path of this repository starts with.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "testbed/",
    "bench/",
    "benches/",
    "manifests/",
    "deploy/",
    "docs/",
    "policy/",
    "tools/",
    "fuzz/",
    ".ci/",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every doc checked: the README, ARCHITECTURE and docs/*.md (the CHANGELOG names files a
/// change removed, on purpose).
fn docs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md"].iter().map(|f| repo().join(f)).collect();
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// The paths `text` names: the contents of code spans and link targets that start with
/// one of `ROOTS`, cut at the first character a path does not hold; patterns (`*`, `{`,
/// `<`, `…`) and anchors left out, and names that are no file's or folder's (no extension,
/// no trailing `/`: `deploy/coloc-scheduler` is a kubectl object).
fn named_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let spans = text.split('`').skip(1).step_by(2);
    let links = text.split("](").skip(1).filter_map(|rest| rest.split(')').next());
    for candidate in spans.chain(links) {
        let candidate = candidate.trim();
        if !ROOTS.iter().any(|r| candidate.starts_with(r)) {
            continue;
        }
        let path: String =
            candidate.chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-')).collect();
        let rest = &candidate[path.len()..];
        let last = path.rsplit('/').next().unwrap_or_default();
        if rest.starts_with(['*', '{', '<', '…']) || path.ends_with('-') || !(last.contains('.') || path.ends_with('/'))
        {
            continue;
        }
        found.push(path.trim_end_matches('.').to_string());
    }
    found
}

/// Relative links of a file under docs/ are relative to docs/; a module's path
/// (`policy/mod.rs`) is under src/.
fn resolves(doc: &Path, path: &str) -> bool {
    let root = repo();
    let here = doc.parent().unwrap_or(&root);
    [root.join(path), here.join(path), root.join("src").join(path)].iter().any(|p| p.exists())
}

#[test]
fn every_file_a_doc_names_exists() {
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for path in named_paths(&text) {
            if !resolves(&doc, &path) {
                missing.push(format!("{}: {path}", doc.strip_prefix(repo()).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "docs name files that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn the_check_finds_a_missing_file_and_passes_patterns_by() {
    let text = "see `src/cli/serve.rs`, [x](docs/nowhere.md), `tests/e2e/*.rs`, `requeue/{a,b}.rs`, `manifests/<yours>/x` and `deploy/coloc-scheduler`";
    assert_eq!(named_paths(text), ["src/cli/serve.rs", "docs/nowhere.md"]);
    let doc = repo().join("README.md");
    assert!(resolves(&doc, "src/cli/serve.rs"));
    assert!(!resolves(&doc, "docs/nowhere.md"));
}

/// The README is the front door: it links every doc.
#[test]
fn the_readme_lists_every_doc() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let unlisted: Vec<String> = docs()
        .iter()
        .filter(|d| d.parent().is_some_and(|p| p.ends_with("docs")))
        .map(|d| format!("docs/{}", d.file_name().unwrap().to_string_lossy()))
        .filter(|d| !readme.contains(&format!("({d})")))
        .collect();
    assert!(unlisted.is_empty(), "README.md does not link {unlisted:?}");
}

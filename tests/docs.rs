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

/// Every path of the repository (files and folders, as `a/b/c.rs` and `a/b/`), build
/// output and git's own left out.
fn repo_paths() -> Vec<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if rel.is_empty() && matches!(name.as_str(), "target" | ".git") {
                continue;
            }
            let path = format!("{rel}{name}");
            if entry.path().is_dir() {
                out.push(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo(), "", &mut out);
    out
}

/// `requeue/{mod,plan}.rs` as `requeue/mod.rs` and `requeue/plan.rs` (one group).
fn expand_braces(span: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (span.find('{'), span.find('}')) else { return vec![span.to_string()] };
    span[open + 1..close]
        .split(',')
        .map(|alt| format!("{}{}{}", &span[..open], alt.trim(), &span[close + 1..]))
        .collect()
}

/// The files and folders ARCHITECTURE.md names in its code spans, as it names them: from
/// the repository's root (`src/cli/serve.rs`), from `src/` (`http/handlers.rs`) or from a
/// folder the text is about (`preempt/rank.rs`, `reselect.rs`). A span is a path when it
/// ends in `.rs` or `/` and holds nothing a path does not.
fn architecture_paths(text: &str) -> Vec<String> {
    let outside_blocks: String = text.split("```").step_by(2).collect::<Vec<_>>().join("\n");
    let is_path = |s: &str| {
        (s.ends_with(".rs") || s.ends_with('/'))
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '{' | '}' | ','))
    };
    outside_blocks.split('`').skip(1).step_by(2).filter(|s| is_path(s)).flat_map(expand_braces).collect()
}

/// A path named from some folder resolves when a file or folder of the repository ends
/// with it.
fn resolves_in(paths: &[String], named: &str) -> bool {
    paths.iter().any(|p| p == named || p.ends_with(&format!("/{named}")))
}

#[test]
fn every_file_architecture_names_exists() {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let paths = repo_paths();
    let missing: Vec<String> = architecture_paths(&text).into_iter().filter(|p| !resolves_in(&paths, p)).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md names files that do not exist: {missing:?}");
}

#[test]
fn the_architecture_check_reads_short_paths_and_finds_a_missing_one() {
    let text =
        "`preempt/rank.rs` `requeue/{mod,plan}.rs` `crate::x` `--flag` `decide/nowhere.rs`\n```\nsrc/\n```\n`src/`";
    let named = architecture_paths(text);
    assert_eq!(named, ["preempt/rank.rs", "requeue/mod.rs", "requeue/plan.rs", "decide/nowhere.rs", "src/"]);
    let paths = repo_paths();
    let missing: Vec<&String> = named.iter().filter(|p| !resolves_in(&paths, p)).collect();
    assert_eq!(missing, ["decide/nowhere.rs"]);
}

/// The layers `tests/layers.rs` keeps, bottom first, read from its `LAYERS`.
fn layers() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("tests/layers.rs")).unwrap();
    let start = text.find("const LAYERS").expect("tests/layers.rs has LAYERS");
    let list = &text[start..start + text[start..].find("];").unwrap()];
    list.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('"'))
        .map(|l| l.trim_matches(|c| c == '"' || c == ',').to_string())
        .collect()
}

/// ARCHITECTURE.md lists every layer: in the order its arrows run, as `tests/layers.rs`
/// keeps them, and in its layout, as a file (`x.rs`) or a folder (`x/`) of `src/`.
#[test]
fn architecture_lists_every_layer() {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let layers = layers();
    assert!(layers.len() > 10, "LAYERS read from tests/layers.rs: {layers:?}");
    let order = text.split("in this order (bottom first):").nth(1).expect("ARCHITECTURE.md says the layers' order");
    let order: Vec<String> =
        order.split(':').next().unwrap().split(',').map(|l| l.split_whitespace().collect::<String>()).collect();
    assert_eq!(order, layers, "ARCHITECTURE.md's order of the layers is not tests/layers.rs's");
    let layout =
        text.split("## Layout").nth(1).and_then(|l| l.split("```").nth(1)).expect("ARCHITECTURE.md has a layout");
    let src = layout.split("\ntests/").next().unwrap();
    let listed = |l: &str| {
        src.split(|c: char| c.is_whitespace() || c == ',').any(|w| w == format!("{l}/") || w == format!("{l}.rs"))
    };
    let missing: Vec<&String> = layers.iter().filter(|l| !listed(l)).collect();
    assert!(missing.is_empty(), "ARCHITECTURE.md's layout leaves out {missing:?}");
}

//! Arrows run downward only: a top-level module of `src/` names (`crate::x`) only modules
//! listed below it here. A new module takes its place in `LAYERS`; an import that runs
//! upward fails this test with the file that makes it. Inside a module, its files import
//! each other in no circle.

use std::collections::{BTreeMap, BTreeSet};
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
    // Decisions name nothing of the edge that carries their intents out (plain data in `model`).
    "decide",
    "requeue",
    "routing",
    "shadow",
    "discarded",
    "waiting",
    "pipeline",
    "workers",
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

/// The names a `use` or a path takes first in `rest`: `x` of `x::…`, or each item of a
/// `{x, y::{…}, z}` group.
fn names_at(rest: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let Some(group) = rest.strip_prefix('{') else { return vec![ident(rest)] };
    let (mut depth, mut items, mut start) = (0, Vec::new(), 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.into_iter().map(|item| ident(item.trim())).collect()
}

/// The files of `dir` that `file` (inside `dir`) names, by the sibling they belong to: a
/// sibling is `x.rs` with its folder `x/`. Read from the text, as `named` does: `super::x`
/// from `dir`'s depth, and `crate::<dir>::x`.
fn siblings_named(src: &Path, dir: &Path, file: &Path, text: &str) -> BTreeSet<String> {
    let rel = file.strip_prefix(dir).unwrap();
    let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
    let in_crate: Vec<String> =
        dir.strip_prefix(src).unwrap().components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let from_crate = format!("crate::{}::", in_crate.join("::"));
    let mut found = BTreeSet::new();
    for (i, _) in text.match_indices("super::") {
        // Only where a chain of `super::` starts, and it climbs exactly to `dir`.
        if text[..i].ends_with("super::") {
            continue;
        }
        let (mut rest, mut supers) = (&text[i..], 0);
        while let Some(after) = rest.strip_prefix("super::") {
            (rest, supers) = (after, supers + 1);
        }
        if supers == depth {
            found.extend(names_at(rest));
        }
    }
    for (i, m) in text.match_indices(&from_crate) {
        found.extend(names_at(&text[i + m.len()..]));
    }
    found
}

/// The sibling a file of `dir` belongs to (`None` for `dir/mod.rs`, the module itself).
fn sibling_of(dir: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(dir).unwrap().components().next()?.as_os_str().to_str()?;
    (first != "mod.rs").then(|| first.trim_end_matches(".rs").to_string())
}

/// A circle among `edges` (sibling → siblings it names, with the file that names each), as
/// the files that close it.
fn a_circle(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|p| p == at) {
            let circle = &path[start..];
            let hops = circle.iter().zip(circle.iter().cycle().skip(1));
            return Some(hops.map(|(a, b)| format!("{} names {b}", edges[a][b])).collect());
        }
        if !done.insert(at.to_string()) {
            return None;
        }
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flat_map(|e| e.keys()) {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_files_of_a_module_import_each_other_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src.clone()];
    let mut circles = Vec::new();
    while let Some(dir) = dirs.pop() {
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for file in &files {
            let Some(own) = sibling_of(&dir, file) else { continue };
            let text = std::fs::read_to_string(file).unwrap();
            for other in siblings_named(&src, &dir, file, &text) {
                let exists = dir.join(format!("{other}.rs")).exists() || dir.join(&other).is_dir();
                if other != own && exists {
                    edges.entry(own.clone()).or_default().entry(other).or_insert_with(|| file.display().to_string());
                }
            }
        }
        if dir != src {
            circles.extend(a_circle(&edges).map(|c| c.join("; ")));
        }
        dirs.extend(std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()));
    }
    assert!(circles.is_empty(), "files of one module that import each other in a circle:\n{}", circles.join("\n"));
}

/// preempt's steps, in the order `decide::preempt` takes them, each a file or a folder of
/// `src/decide/preempt/`. A step names only the steps before it; the files beside them
/// that are no step (the plans' vocabulary, room held or on its way) name no step.
const PREEMPT_STEPS: &[&str] = &["refuse", "candidates", "select", "wait_or_evict", "rank"];

#[test]
fn a_preempt_step_names_only_the_steps_before_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let dir = src.join("decide/preempt");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut forward = Vec::new();
    for step in PREEMPT_STEPS {
        assert!(
            dir.join(format!("{step}.rs")).exists() || dir.join(step).is_dir(),
            "preempt's step {step} is no file or folder of {}",
            dir.display()
        );
    }
    for file in &files {
        let Some(own) = sibling_of(&dir, file) else { continue };
        // A step may name the steps before it; the rest name none.
        let allowed = PREEMPT_STEPS.iter().position(|s| *s == own).unwrap_or(0);
        let text = std::fs::read_to_string(file).unwrap();
        for other in siblings_named(&src, &dir, file, &text) {
            if PREEMPT_STEPS[allowed..].contains(&other.as_str()) && other != own {
                forward.push(format!("{} ({own}) names the step {other}", file.display()));
            }
        }
    }
    assert!(forward.is_empty(), "preempt's steps call a later step:\n{}", forward.join("\n"));
}

/// `decide::preempt` takes its steps in order, one comment and one call each.
#[test]
fn preempt_takes_its_steps_in_order() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/decide/preempt.rs")).unwrap();
    let body = &text[text.find("pub fn preempt(").expect("decide::preempt")..];
    let mut at = 0;
    for (i, step) in PREEMPT_STEPS.iter().enumerate() {
        let comment = format!("// {}. ", i + 1);
        let found = body[at..].find(&comment).unwrap_or_else(|| panic!("no comment `{comment}` after step {i}"));
        at += found + comment.len();
        let next = body[at..].find(&format!("// {}. ", i + 2)).map_or(body.len(), |n| at + n);
        let import = format!("use self::{step}::");
        assert!(text.contains(&import), "decide::preempt does not take step {} from {step}", i + 1);
        let function = text[text.find(&import).unwrap() + import.len()..].split(';').next().unwrap().to_string();
        assert!(body[at..next].contains(&format!("{function}(")), "step {} does not call {function}", i + 1);
    }
}

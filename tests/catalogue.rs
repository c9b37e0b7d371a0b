//! The catalogue of explanation codes is documented: docs/decisions.md lists every `Code`
//! with its meaning, and nothing else.

use std::collections::BTreeMap;

use coloc_extender::explanation::Code;

#[test]
fn every_code_is_listed_with_its_meaning_in_the_decision_docs() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/decisions.md")).unwrap();
    let table = doc.split("## Codes").nth(1).expect("docs/decisions.md has a Codes section");
    let listed: BTreeMap<String, String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` | "))
        .map(|(code, meaning)| (code.to_string(), meaning.trim_end_matches(" |").to_string()))
        .collect();
    let catalogue: BTreeMap<String, String> =
        Code::ALL.iter().map(|c| (c.as_str().to_string(), c.meaning().to_string())).collect();
    assert_eq!(listed, catalogue);
}

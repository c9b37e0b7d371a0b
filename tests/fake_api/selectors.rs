//! `labelSelector` and `fieldSelector` query parameters, parsed and matched like the API server.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Requirements ANDed together; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// `path=value`, `path==value`, `path!=value` terms ANDed together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            reqs.push(Self::parse_term(term).ok_or_else(|| format!("unable to parse requirement: {term:?}"))?);
        }
        Ok(LabelSelector(reqs))
    }

    fn parse_term(t: &str) -> Option<Req> {
        if let Some(open) = t.find('(') {
            let close = t.rfind(')')?;
            let values: Vec<String> =
                t[open + 1..close].split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
            let head = t[..open].trim_end();
            if let Some(key) = head.strip_suffix("notin").filter(|k| k.ends_with(char::is_whitespace)) {
                return Some(Req::NotIn(key.trim().to_string(), values));
            }
            if let Some(key) = head.strip_suffix("in").filter(|k| k.ends_with(char::is_whitespace)) {
                return Some(Req::In(key.trim().to_string(), values));
            }
            return None;
        }
        if let Some((k, v)) = t.split_once("!=") {
            return Some(Req::NotEq(k.trim().to_string(), v.trim().to_string()));
        }
        if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
            return Some(Req::Eq(k.trim().to_string(), v.trim().to_string()));
        }
        if let Some(k) = t.strip_prefix('!') {
            return Some(Req::NotExists(k.trim().to_string()));
        }
        if t.contains(char::is_whitespace) {
            return None;
        }
        Some(Req::Exists(t.to_string()))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => label(k) == Some(v.as_str()),
            Req::NotEq(k, v) => label(k) != Some(v.as_str()),
            Req::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Req::Exists(k) => label(k).is_some(),
            Req::NotExists(k) => label(k).is_none(),
        })
    }
}

/// The value at a dotted field path as the API server compares it; a missing field reads as "".
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut v = obj;
    for part in path.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_terms(s) {
            let (path, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {term:?}"));
            };
            terms.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, value)| (field_value(obj, path) == *value) == *eq)
    }
}

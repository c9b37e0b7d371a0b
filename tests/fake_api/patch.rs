//! Patch bodies: RFC 7386 merge patch (also used for strategic merge and server-side apply)
//! and RFC 6902 JSON patch.

use serde_json::{Map, Value};

/// Lists of strings a strategic merge patch merges as sets (`patchStrategy:"merge"` on a
/// list of primitives), by field name: what the fake needs of the real schema.
const MERGED_STRING_LISTS: &[&str] = &["finalizers"];

/// RFC 7386: objects merge recursively, `null` removes, anything else replaces.
/// With `strategic`: `finalizers` merge as a set, `$deleteFromPrimitiveList/finalizers`
/// removes from it, and other `$` directives are ignored.
pub fn merge(target: &mut Value, patch: &Value, strategic: bool) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if strategic {
            if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/").filter(|f| MERGED_STRING_LISTS.contains(f))
            {
                if let (Some(list), Some(gone)) = (t.get_mut(field).and_then(Value::as_array_mut), v.as_array()) {
                    list.retain(|x| !gone.contains(x));
                    if list.is_empty() {
                        t.remove(field);
                    }
                }
                continue;
            }
            if k.starts_with('$') {
                continue;
            }
            if let (true, Some(add)) = (MERGED_STRING_LISTS.contains(&k.as_str()), v.as_array()) {
                let list = t.entry(k.clone()).or_insert_with(|| Value::Array(Vec::new()));
                if let Some(list) = list.as_array_mut() {
                    for x in add {
                        if !list.contains(x) {
                            list.push(x.clone());
                        }
                    }
                }
                continue;
            }
        }
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v, strategic);
        }
    }
}

/// A JSON patch that could not be applied: a failed `test`, a missing path, a bad op.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchError(pub String);

fn pointer_tokens(ptr: &str) -> Result<Vec<String>, PatchError> {
    if ptr.is_empty() {
        return Ok(Vec::new());
    }
    let rest = ptr.strip_prefix('/').ok_or_else(|| PatchError(format!("invalid JSON pointer {ptr:?}")))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn array_index(tok: &str, len: usize, allow_end: bool) -> Result<usize, PatchError> {
    if allow_end && tok == "-" {
        return Ok(len);
    }
    let i: usize = tok.parse().map_err(|_| PatchError(format!("invalid array index {tok:?}")))?;
    if i > len || (!allow_end && i == len) {
        return Err(PatchError(format!("array index {i} out of bounds (len {len})")));
    }
    Ok(i)
}

/// The parent container of the pointer's last token, and that token.
fn parent<'a>(doc: &'a mut Value, ptr: &str) -> Result<(&'a mut Value, String), PatchError> {
    let mut toks = pointer_tokens(ptr)?;
    let last = toks.pop().ok_or_else(|| PatchError("the root cannot be the target of this operation".into()))?;
    let mut cur = doc;
    for t in &toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t.as_str()),
            Value::Array(a) => {
                let i = array_index(t, a.len(), false)?;
                a.get_mut(i)
            }
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("path {ptr:?} does not exist")))?;
    }
    Ok((cur, last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), PatchError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (p, last) = parent(doc, path)?;
    match p {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let i = array_index(&last, a.len(), true)?;
            a.insert(i, value);
        }
        _ => return Err(PatchError(format!("path {path:?} does not exist"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (p, last) = parent(doc, path)?;
    match p {
        Value::Object(m) => m.remove(&last),
        Value::Array(a) => {
            let i = array_index(&last, a.len(), false)?;
            Some(a.remove(i))
        }
        _ => None,
    }
    .ok_or_else(|| PatchError(format!("path {path:?} does not exist")))
}

fn get<'a>(doc: &'a Value, path: &str) -> Result<&'a Value, PatchError> {
    let mut cur = doc;
    for t in pointer_tokens(path)? {
        cur = match cur {
            Value::Object(m) => m.get(t.as_str()),
            Value::Array(a) => a.get(array_index(&t, a.len(), false)?),
            _ => None,
        }
        .ok_or_else(|| PatchError(format!("path {path:?} does not exist")))?;
    }
    Ok(cur)
}

/// Applies RFC 6902 operations (add, remove, replace, move, copy, test) in order, all or nothing.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), PatchError> {
    let ops = ops.as_array().ok_or_else(|| PatchError("a JSON patch must be an array of operations".into()))?;
    let mut out = doc.clone();
    for op in ops {
        let path = op["path"].as_str().ok_or_else(|| PatchError(format!("operation without a path: {op}")))?;
        let value = || op.get("value").cloned().ok_or_else(|| PatchError(format!("operation without a value: {op}")));
        let from = || op["from"].as_str().ok_or_else(|| PatchError(format!("operation without from: {op}")));
        match op["op"].as_str().unwrap_or_default() {
            "add" => add(&mut out, path, value()?)?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                let v = value()?;
                if path.is_empty() {
                    out = v;
                } else {
                    remove(&mut out, path)?;
                    add(&mut out, path, v)?;
                }
            }
            "move" => {
                let v = remove(&mut out, from()?)?;
                add(&mut out, path, v)?;
            }
            "copy" => {
                let v = get(&out, from()?)?.clone();
                add(&mut out, path, v)?;
            }
            "test" => {
                let want = value()?;
                if *get(&out, path)? != want {
                    return Err(PatchError(format!("testing value {path} failed")));
                }
            }
            other => return Err(PatchError(format!("unknown JSON patch operation {other:?}"))),
        }
    }
    *doc = out;
    Ok(())
}

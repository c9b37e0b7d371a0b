//! The in-memory state: objects, the full change history, faults and the request log.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use serde_json::{json, Value};

use super::patch;
use super::resources::{self, Resource, RESOURCES};
use super::watch::Filter;

/// A Kubernetes `Status` failure.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

/// The `reason` the API server gives with an HTTP status code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

impl ApiError {
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        ApiError { code, reason: reason_for(code).to_string(), message: message.into() }
    }
    pub fn with_reason(mut self, reason: &str) -> Self {
        self.reason = reason.to_string();
        self
    }
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
    fn not_found(res: usize, name: &str) -> Self {
        ApiError::new(404, format!("{} {name:?} not found", qualified(&RESOURCES[res])))
    }
    fn conflict(res: usize, name: &str) -> Self {
        ApiError::new(
            409,
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                qualified(&RESOURCES[res])
            ),
        )
    }
}

fn qualified(r: &Resource) -> String {
    if r.group.is_empty() {
        r.plural.to_string()
    } else {
        format!("{}.{}", r.plural, r.group)
    }
}

/// One write, kept forever so a watch can resume from any resourceVersion.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub res: usize,
    pub ns: String,
    pub typ: &'static str,
    /// The object after the change (for DELETED: its last state, at the deletion's RV).
    pub obj: Value,
    /// The object before the change, if it existed.
    pub prev: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub verb: String,
    pub kind: String,
    pub status: u16,
    pub remaining: u32,
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub verb: String,
    pub kind: String,
}

fn hits(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

type Key = (usize, String, String);

#[derive(Default)]
pub struct Store {
    pub rv: u64,
    pub objects: BTreeMap<Key, Value>,
    pub history: Vec<Change>,
    pub faults: Vec<Fault>,
    pub delays: Vec<(String, String, Duration)>,
    pub requests: Vec<Recorded>,
    /// Bumped by `break_watches`: open watch streams end.
    pub break_gen: u64,
    /// Bumped by `expire_watches`: open watch streams get a 410 ERROR event and end.
    pub expire_gen: u64,
    /// Resources whose next watches answer 410 until they are listed again.
    pub expired: HashSet<usize>,
    /// The server is going away: watches end.
    pub closed: bool,
    /// Group versions (`group/version`) the server does not serve now: discovery and
    /// their resource paths answer 404, as for a CRD not installed.
    pub unserved: HashSet<String>,
    uids: u64,
    hasher: RandomState,
}

pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj["metadata"][field].as_str().filter(|s| !s.is_empty())
}

fn has_finalizers(obj: &Value) -> bool {
    obj["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty())
}

/// A write may not change an object's UID: the API server answers 422 (immutable field),
/// which makes a UID in a patch a precondition.
fn check_uid(res: usize, name: &str, obj: &Value, current: &Value) -> Result<(), ApiError> {
    match (meta_str(obj, "uid"), meta_str(current, "uid")) {
        (Some(want), Some(have)) if want != have => Err(ApiError::new(
            422,
            format!(
                "{} {name:?} is invalid: metadata.uid: Invalid value: {want:?}: field is immutable",
                RESOURCES[res].kind
            ),
        )),
        _ => Ok(()),
    }
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if !obj.is_object() {
        *obj = json!({});
    }
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"][field] = value;
}

impl Store {
    pub fn fault_for(&mut self, verb: &str, kind: &str) -> Option<u16> {
        let f = self.faults.iter_mut().find(|f| f.remaining > 0 && hits(&f.verb, verb) && hits(&f.kind, kind))?;
        if f.remaining != u32::MAX {
            f.remaining -= 1;
        }
        let status = f.status;
        self.faults.retain(|f| f.remaining > 0);
        Some(status)
    }

    pub fn delay_for(&self, verb: &str, kind: &str) -> Duration {
        self.delays.iter().filter(|(v, k, _)| hits(v, verb) && hits(k, kind)).map(|(_, _, d)| *d).sum()
    }

    fn random(&mut self) -> u64 {
        self.uids += 1;
        self.hasher.hash_one(self.uids)
    }

    pub fn new_uid(&mut self) -> String {
        let (a, b) = (self.random(), self.random());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_name(&mut self, res: usize, ns: &str, prefix: &str) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        loop {
            let mut r = self.random();
            let mut name = prefix.to_string();
            for _ in 0..5 {
                name.push(ALPHABET[(r % ALPHABET.len() as u64) as usize] as char);
                r /= ALPHABET.len() as u64;
            }
            if !self.objects.contains_key(&(res, ns.to_string(), name.clone())) {
                return name;
            }
        }
    }

    /// Sets kind/apiVersion, the namespace (or none when cluster-scoped), and uid and
    /// creationTimestamp (from `prev`, else new) when missing.
    fn complete(&mut self, res: usize, ns: &str, obj: &mut Value, prev: Option<&Value>) {
        let r = RESOURCES[res];
        if !obj.is_object() {
            *obj = json!({});
        }
        obj["kind"] = json!(r.kind);
        obj["apiVersion"] = json!(r.api_version());
        if r.namespaced {
            set_meta(obj, "namespace", json!(ns));
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        for field in ["uid", "creationTimestamp"] {
            if meta_str(obj, field).is_none() {
                let value = match prev.and_then(|p| meta_str(p, field)) {
                    Some(v) => v.to_string(),
                    None if field == "uid" => self.new_uid(),
                    None => now_rfc3339(),
                };
                set_meta(obj, field, json!(value));
            }
        }
    }

    /// Stores `obj` at the next resourceVersion (or `rv`, if newer than every write so far)
    /// and records the change for watchers.
    fn commit(&mut self, res: usize, ns: &str, name: &str, mut obj: Value, rv: Option<u64>) -> Value {
        if obj["metadata"]["deletionTimestamp"].is_string()
            && !has_finalizers(&obj)
            && self.objects.contains_key(&(res, ns.to_string(), name.to_string()))
        {
            // The last finalizer of a terminating object is gone: the API server deletes it.
            self.objects.insert((res, ns.to_string(), name.to_string()), obj);
            return self.delete_now(res, ns, name).expect("inserted above");
        }
        self.rv = match rv {
            Some(rv) if rv > self.rv => rv,
            _ => self.rv + 1,
        };
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        let prev = self.objects.insert((res, ns.to_string(), name.to_string()), obj.clone());
        let typ = if prev.is_some() { "MODIFIED" } else { "ADDED" };
        self.history.push(Change { rv: self.rv, res, ns: ns.to_string(), typ, obj: obj.clone(), prev });
        obj
    }

    fn delete_now(&mut self, res: usize, ns: &str, name: &str) -> Option<Value> {
        let mut obj = self.objects.remove(&(res, ns.to_string(), name.to_string()))?;
        self.rv += 1;
        let prev = obj.clone();
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        self.history.push(Change {
            rv: self.rv,
            res,
            ns: ns.to_string(),
            typ: "DELETED",
            obj: obj.clone(),
            prev: Some(prev),
        });
        Some(obj)
    }

    fn resource_of(obj: &Value) -> usize {
        let kind = obj["kind"].as_str().unwrap_or_default();
        resources::for_object(kind, obj["apiVersion"].as_str()).unwrap_or_else(|| {
            panic!("FakeApi: no resource serves kind {kind:?} ({}); add a line to RESOURCES in tests/fake_api/resources.rs", obj["apiVersion"])
        })
    }

    fn identity(obj: &Value) -> (usize, String, String) {
        let res = Self::resource_of(obj);
        let name =
            meta_str(obj, "name").unwrap_or_else(|| panic!("FakeApi: object without metadata.name: {obj}")).to_string();
        let ns = if RESOURCES[res].namespaced {
            meta_str(obj, "namespace").unwrap_or("default").to_string()
        } else {
            String::new()
        };
        (res, ns, name)
    }

    /// `FakeApi::seed`: keeps a numeric resourceVersion when it is newer than every write so far.
    pub fn seed(&mut self, mut obj: Value) -> Value {
        let (res, ns, name) = Self::identity(&obj);
        let rv = meta_str(&obj, "resourceVersion").and_then(|s| s.parse().ok());
        let prev = self.objects.get(&(res, ns.clone(), name.clone())).cloned();
        self.complete(res, &ns, &mut obj, prev.as_ref());
        self.commit(res, &ns, &name, obj, rv)
    }

    /// `FakeApi::apply`: create or replace.
    pub fn put(&mut self, mut obj: Value) -> Value {
        let (res, ns, name) = Self::identity(&obj);
        let prev = self.objects.get(&(res, ns.clone(), name.clone())).cloned();
        self.complete(res, &ns, &mut obj, prev.as_ref());
        self.commit(res, &ns, &name, obj, None)
    }

    pub fn remove(&mut self, kind: &str, ns: &str, name: &str) -> bool {
        resources::by_kind(kind).collect::<Vec<_>>().into_iter().any(|res| {
            let ns = if RESOURCES[res].namespaced { ns } else { "" };
            self.delete_now(res, ns, name).is_some()
        })
    }

    pub fn get(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        resources::by_kind(kind).find_map(|res| {
            let ns = if RESOURCES[res].namespaced { ns } else { "" };
            self.objects.get(&(res, ns.to_string(), name.to_string())).cloned()
        })
    }

    pub fn list_kind(&self, kind: &str) -> Vec<Value> {
        let ids: Vec<usize> = resources::by_kind(kind).collect();
        self.objects.iter().filter(|((res, _, _), _)| ids.contains(res)).map(|(_, o)| o.clone()).collect()
    }

    pub fn matching(&self, f: &Filter) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((res, ns, _), o)| *res == f.res && f.matches(ns, o))
            .map(|(_, o)| o.clone())
            .collect()
    }

    pub fn list(&self, f: &Filter) -> Value {
        let r = RESOURCES[f.res];
        json!({
            "apiVersion": r.api_version(),
            "kind": format!("{}List", r.kind),
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": self.matching(f),
        })
    }

    pub fn read(&self, res: usize, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.objects
            .get(&(res, ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    pub fn create(&mut self, res: usize, ns: &str, mut obj: Value, dry: bool) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "the body of a create must be a JSON object"));
        }
        let ns = if RESOURCES[res].namespaced {
            Some(ns).filter(|n| !n.is_empty()).or(meta_str(&obj, "namespace")).unwrap_or("default").to_string()
        } else {
            String::new()
        };
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) => n.to_string(),
            (None, Some(prefix)) => {
                let prefix = prefix.to_string();
                self.generated_name(res, &ns, &prefix)
            }
            (None, None) => {
                return Err(ApiError::new(
                    422,
                    format!(
                        "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                        RESOURCES[res].kind
                    ),
                ))
            }
        };
        if self.objects.contains_key(&(res, ns.clone(), name.clone())) {
            return Err(ApiError::new(409, format!("{} {name:?} already exists", qualified(&RESOURCES[res])))
                .with_reason("AlreadyExists"));
        }
        set_meta(&mut obj, "name", json!(name));
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("uid");
            m.remove("creationTimestamp");
        }
        self.complete(res, &ns, &mut obj, None);
        if dry {
            return Ok(obj);
        }
        Ok(self.commit(res, &ns, &name, obj, None))
    }

    /// PATCH in any of the four content types. Returns the HTTP code (201 when apply created).
    pub fn patch(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        dry: bool,
    ) -> Result<(u16, Value), ApiError> {
        let apply = content_type == "application/apply-patch+yaml";
        let doc: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) if apply => {
                serde_yaml_ng::from_slice(body).map_err(|e| ApiError::new(400, format!("invalid apply body: {e}")))?
            }
            Err(e) => return Err(ApiError::new(400, format!("invalid patch body: {e}"))),
        };
        let current = self.objects.get(&(res, ns.to_string(), name.to_string())).cloned();
        let mut obj = match (&current, apply) {
            (Some(c), _) => c.clone(),
            (None, true) => json!({}),
            (None, false) => return Err(ApiError::not_found(res, name)),
        };
        match content_type {
            "application/json-patch+json" => patch::json_patch(&mut obj, &doc).map_err(|e| ApiError::new(422, e.0))?,
            "application/merge-patch+json" => patch::merge(&mut obj, &doc, false),
            "application/strategic-merge-patch+json" => patch::merge(&mut obj, &doc, true),
            "application/apply-patch+yaml" => patch::merge(&mut obj, &doc, false),
            other => return Err(ApiError::new(415, format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"))),
        }
        if !obj.is_object() {
            return Err(ApiError::new(422, "the patched object is not a JSON object"));
        }
        if let Some(c) = &current {
            if meta_str(&obj, "resourceVersion") != meta_str(c, "resourceVersion") {
                return Err(ApiError::conflict(res, name));
            }
        }
        set_meta(&mut obj, "name", json!(name));
        if let Some(c) = &current {
            check_uid(res, name, &obj, c)?;
            for field in ["uid", "creationTimestamp"] {
                set_meta(&mut obj, field, c["metadata"][field].clone());
            }
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        self.complete(res, ns, &mut obj, current.as_ref());
        let code = if current.is_some() { 200 } else { 201 };
        if dry {
            return Ok((code, obj));
        }
        Ok((code, self.commit(res, ns, name, obj, None)))
    }

    /// PUT: replace an existing object.
    pub fn update(&mut self, res: usize, ns: &str, name: &str, mut obj: Value, dry: bool) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "the body of an update must be a JSON object"));
        }
        let current = self.read(res, ns, name)?;
        if let Some(rv) = meta_str(&obj, "resourceVersion") {
            if Some(rv) != meta_str(&current, "resourceVersion") {
                return Err(ApiError::conflict(res, name));
            }
        }
        set_meta(&mut obj, "name", json!(name));
        check_uid(res, name, &obj, &current)?;
        for field in ["uid", "creationTimestamp"] {
            set_meta(&mut obj, field, current["metadata"][field].clone());
        }
        self.complete(res, ns, &mut obj, Some(&current));
        if dry {
            return Ok(obj);
        }
        Ok(self.commit(res, ns, name, obj, None))
    }

    /// DELETE, honouring `preconditions.uid` and `preconditions.resourceVersion` in the body.
    pub fn delete(&mut self, res: usize, ns: &str, name: &str, body: &[u8], dry: bool) -> Result<Value, ApiError> {
        let current = self.read(res, ns, name)?;
        let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_json::from_slice(body).map_err(|e| ApiError::new(400, format!("invalid DeleteOptions: {e}")))?
        };
        for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
            if let Some(want) = opts["preconditions"][field].as_str() {
                let have = meta_str(&current, field).unwrap_or_default();
                if want != have {
                    return Err(ApiError::new(
                        409,
                        format!("Precondition failed: {label} in precondition: {want}, {label} in object meta: {have}"),
                    ));
                }
            }
        }
        if dry || opts["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All")) {
            return Ok(current);
        }
        if has_finalizers(&current) {
            // As the API server does: the object stays, terminating, until its finalizers are gone.
            if current["metadata"]["deletionTimestamp"].is_string() {
                return Ok(current);
            }
            let mut obj = current;
            set_meta(&mut obj, "deletionTimestamp", json!(now_rfc3339()));
            set_meta(&mut obj, "deletionGracePeriodSeconds", json!(opts["gracePeriodSeconds"].as_i64().unwrap_or(0)));
            return Ok(self.commit(res, ns, name, obj, None));
        }
        Ok(self.delete_now(res, ns, name).expect("read above"))
    }

    /// POST pods/{name}/binding: sets spec.nodeName.
    pub fn bind(&mut self, res: usize, ns: &str, name: &str, binding: &Value, dry: bool) -> Result<Value, ApiError> {
        let node =
            binding["target"]["name"].as_str().ok_or_else(|| ApiError::new(400, "binding without target.name"))?;
        let mut obj = self.read(res, ns, name)?;
        if obj["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()) {
            return Err(ApiError::conflict(res, name));
        }
        obj["spec"]["nodeName"] = json!(node);
        if !dry {
            self.commit(res, ns, name, obj, None);
        }
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    }
}

//! Labels and annotations: a small sorted string map packed into two allocations.
//!
//! After requests, a pod's labels and annotations are most of what the view keeps of it.
//! A `BTreeMap<String, String>` spends a ~540-byte node plus two allocations per entry,
//! even for one label; 150,000 pods with six labels and four annotations held 190 MiB of
//! them. They are written once, when decoded, and then only looked up and iterated, so
//! keys and values live back to back in one string, found by binary search.

use std::borrow::Cow;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels {
    /// Keys and values back to back, entries sorted by key: `k0 v0 k1 v1 …`.
    text: Box<str>,
    /// Where each key and each value ends in `text` (two per entry).
    ends: Box<[u32]>,
}

impl Labels {
    pub fn new() -> Labels {
        Labels::default()
    }

    /// Packs `entries`; for a key given twice the later value wins, as with inserts.
    fn pack<K: AsRef<str>, V: AsRef<str>>(entries: Vec<(K, V)>) -> Labels {
        let mut entries = entries;
        // Stable: equal keys keep their order, so the last one can win below.
        entries.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut text = String::with_capacity(entries.iter().map(|(k, v)| k.as_ref().len() + v.as_ref().len()).sum());
        let mut ends = Vec::with_capacity(entries.len() * 2);
        for (i, (k, v)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0.as_ref() == k.as_ref()) {
                continue;
            }
            // Kubernetes caps an object's labels and annotations at 256 KiB and requests
            // at the body limit, so `text` stays far below 4 GiB; past it, the rest of the
            // entries could not be addressed and are left out.
            let (Ok(key_end), Ok(value_end)) = (
                u32::try_from(text.len() + k.as_ref().len()),
                u32::try_from(text.len() + k.as_ref().len() + v.as_ref().len()),
            ) else {
                break;
            };
            text.push_str(k.as_ref());
            text.push_str(v.as_ref());
            ends.push(key_end);
            ends.push(value_end);
        }
        Labels { text: text.into_boxed_str(), ends: ends.into_boxed_slice() }
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn at(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { 0 } else { self.ends[2 * i - 1] as usize };
        let key_end = self.ends[2 * i] as usize;
        let value_end = self.ends[2 * i + 1] as usize;
        (&self.text[start..key_end], &self.text[key_end..value_end])
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.at(mid).0.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.at(i).1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { labels: self, next: 0, end: self.len() }
    }

    /// Sets `key` to `value`; the value it had, if any. O(size): for building, not for
    /// hot paths.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.get(&key).map(str::to_owned);
        let mut entries: Vec<(&str, &str)> = self.iter().filter(|(k, _)| *k != key).collect();
        entries.push((&key, &value));
        *self = Labels::pack(entries);
        old
    }
}

pub struct Iter<'a> {
    labels: &'a Labels,
    next: usize,
    end: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        (self.next < self.end).then(|| {
            self.next += 1;
            self.labels.at(self.next - 1)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.end - self.next, Some(self.end - self.next))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Labels {
        Labels::pack(iter.into_iter().collect())
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for Labels {
    fn from(entries: [(K, V); N]) -> Labels {
        Labels::pack(entries.into())
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        d.deserialize_map(LabelsVisitor { skip: None })
    }
}

/// Reads a JSON/YAML map of strings into `Labels`, leaving out the key `skip` (its value
/// is skipped unread).
pub(crate) struct LabelsVisitor {
    pub skip: Option<&'static str>,
}

impl<'de> Visitor<'de> for LabelsVisitor {
    type Value = Labels;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
        let mut entries: Vec<(Text<'de>, Text<'de>)> = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(k) = map.next_key::<Text<'de>>()? {
            if self.skip.is_some_and(|s| s == k.as_ref()) {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else {
                entries.push((k, map.next_value()?));
            }
        }
        Ok(Labels::pack(entries))
    }
}

/// A string borrowed from the input when it has no escapes (watch events and lists are
/// decoded from a byte buffer), so packing copies each key and value once.
struct Text<'de>(Cow<'de, str>);

impl AsRef<str> for Text<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_entry_and_nothing_else() {
        let l = Labels::from([("team", "ml"), ("app", "web"), ("a", ""), ("", "empty key")]);
        assert_eq!(l.len(), 4);
        assert_eq!(l.get("app"), Some("web"));
        assert_eq!(l.get("team"), Some("ml"));
        assert_eq!(l.get("a"), Some(""));
        assert_eq!(l.get(""), Some("empty key"));
        assert_eq!(l.get("ap"), None);
        assert_eq!(l.get("zzz"), None);
        assert_eq!(l.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["", "a", "app", "team"]);
        assert!(Labels::new().get("").is_none() && Labels::new().is_empty());
    }

    #[test]
    fn a_later_value_wins_as_in_a_map() {
        let l: Labels = [("k", "1"), ("j", "x"), ("k", "2")].into_iter().collect();
        assert_eq!(l.get("k"), Some("2"));
        assert_eq!(l.len(), 2);
        let decoded: Labels = serde_json::from_str(r#"{"k":"1","k":"2"}"#).unwrap();
        assert_eq!(decoded.get("k"), Some("2"));
    }

    #[test]
    fn insert_keeps_it_sorted() {
        let mut l = Labels::from([("b", "2")]);
        assert_eq!(l.insert("a".into(), "1".into()), None);
        assert_eq!(l.insert("b".into(), "3".into()), Some("2".into()));
        assert_eq!(l.insert("c".into(), "4".into()), None);
        assert_eq!(format!("{l:?}"), r#"{"a": "1", "b": "3", "c": "4"}"#);
        assert_eq!(l, Labels::from([("c", "4"), ("b", "3"), ("a", "1")]));
    }

    #[test]
    fn round_trips_through_json_as_a_map() {
        let l: Labels = serde_json::from_str(r#"{"z":"1","é":"ü","a":"2"}"#).unwrap();
        assert_eq!(serde_json::to_string(&l).unwrap(), r#"{"a":"2","z":"1","é":"ü"}"#);
        assert_eq!(l.iter().collect::<Vec<_>>(), [("a", "2"), ("z", "1"), ("é", "ü")]);
        let escaped: Labels = serde_json::from_slice(br#"{"k\u0031":"v\n"}"#).unwrap();
        assert_eq!(escaped.get("k1"), Some("v\n"));
        let yaml: Labels = serde_yaml_ng::from_str("b: x\na: 'y'\n").unwrap();
        assert_eq!(yaml.iter().collect::<Vec<_>>(), [("a", "y"), ("b", "x")]);
        let err = serde_json::from_str::<Labels>(r#"{"a":1}"#).unwrap_err().to_string();
        assert!(err.contains("invalid type"), "{err}");
    }
}

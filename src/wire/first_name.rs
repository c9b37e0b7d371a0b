//! `metadata.name` of an object, read without the rest: an object's metadata comes first
//! and its name first within it (as the API server and kube-scheduler write them), so the
//! name of a 20 KB Node object is found in its first hundred bytes and the read stops
//! there. Where the name comes later, the object is read until it is found.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer;

/// The name of `json` (an object already known to be valid JSON), if it has a non-empty
/// `metadata.name`.
pub fn first_name(json: &str) -> Option<String> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_str(json);
    // Finding the name ends the read with a deliberate error: the rest is never looked at.
    let _ = Object { want: Want::Metadata, found: &mut found }.deserialize(&mut de);
    found.filter(|n: &String| !n.is_empty())
}

/// What the read looks for at this level.
#[derive(Clone, Copy)]
enum Want {
    Metadata,
    Name,
}

struct Object<'f> {
    want: Want,
    found: &'f mut Option<String>,
}

/// Not an error: the name was found.
const FOUND: &str = "found";

impl<'de> DeserializeSeed<'de> for Object<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Object<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match (self.want, key.as_ref()) {
                (Want::Metadata, "metadata") => {
                    return map.next_value_seed(Object { want: Want::Name, found: self.found });
                }
                (Want::Name, "name") => {
                    *self.found = map.next_value::<Option<String>>()?;
                    return Err(de::Error::custom(FOUND));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_read_wherever_it_is_and_only_metadatas() {
        assert_eq!(first_name(r#"{"metadata":{"name":"n1","labels":{"a":"b"}},"status":{}}"#).as_deref(), Some("n1"));
        assert_eq!(first_name(r#"{"spec":{"name":"x"},"metadata":{"uid":"u","name":"n2"}}"#).as_deref(), Some("n2"));
        assert_eq!(first_name(r#"{"metadata":{"name":""}}"#), None);
        assert_eq!(first_name(r#"{"metadata":{"name":null}}"#), None);
        assert_eq!(first_name(r#"{"status":{"metadata":{"name":"nested"}}}"#), None);
        assert_eq!(first_name(r#"{"metadata":{"name":"w\u00e9b"}}"#).as_deref(), Some("wéb"));
    }

    #[test]
    fn the_read_stops_at_the_name() {
        // What follows the name is never read: here it is not even JSON.
        assert_eq!(first_name(r#"{"metadata":{"name":"n1"}, this is not read"#).as_deref(), Some("n1"));
    }
}

//! A `Deserializer` adapter under which a struct is read only from a JSON object.
//! serde's derive asks for `deserialize_struct`, which serde_json also answers from an
//! array (fields by position): `"Pod": [{..}, {..}]` would be read as a Pod whose
//! metadata is the first element. Under `Strict`, `deserialize_struct` is
//! `deserialize_map`, at every depth (nested deserializers, seqs and maps are wrapped
//! too), so an array where an object belongs is "invalid type: sequence, expected struct
//! X". Everything else is forwarded unchanged, borrowed strings included.

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

pub struct Strict<D>(pub D);
pub struct Seed<S>(pub S);
struct V<W>(W);
struct Access<A>(A);

/// `T` decoded strictly, as a seed.
pub struct Of<T>(PhantomData<T>);

// Not derived: a derive would ask `T: Clone`.
impl<T> Clone for Of<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Of<T> {}

impl<T> Of<T> {
    pub fn new() -> Self {
        Of(PhantomData)
    }
}

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for Of<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::deserialize(Strict(d))
    }
}

/// `serde_json::from_str`, strictly.
pub fn from_str<'a, T: de::Deserialize<'a>>(s: &'a str) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_str(s);
    let value = T::deserialize(Strict(&mut de))?;
    de.end()?;
    Ok(value)
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Strict(d))
    }
}

macro_rules! forward_deserialize {
    ($($m:ident)*) => {$(
        fn $m<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Self::Error> {
            self.0.$m(V(v))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward_deserialize!(
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string deserialize_bytes
        deserialize_byte_buf deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier
    );

    fn deserialize_ignored_any<W: Visitor<'de>>(self, v: W) -> Result<W::Value, Self::Error> {
        // Skipped values are not built: nothing to be strict about.
        self.0.deserialize_ignored_any(v)
    }
    fn deserialize_unit_struct<W: Visitor<'de>>(self, name: &'static str, v: W) -> Result<W::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, V(v))
    }
    fn deserialize_newtype_struct<W: Visitor<'de>>(self, name: &'static str, v: W) -> Result<W::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, V(v))
    }
    fn deserialize_tuple<W: Visitor<'de>>(self, len: usize, v: W) -> Result<W::Value, Self::Error> {
        self.0.deserialize_tuple(len, V(v))
    }
    fn deserialize_tuple_struct<W: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        v: W,
    ) -> Result<W::Value, Self::Error> {
        self.0.deserialize_tuple_struct(name, len, V(v))
    }
    fn deserialize_struct<W: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: W,
    ) -> Result<W::Value, Self::Error> {
        // The point of `Strict`: a struct comes from an object, never from an array.
        self.0.deserialize_map(V(v))
    }
    fn deserialize_enum<W: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: W,
    ) -> Result<W::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, V(v))
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($m:ident: $t:ty),*) => {$(
        fn $m<E: de::Error>(self, v: $t) -> Result<Self::Value, E> {
            self.0.$m(v)
        }
    )*};
}

impl<'de, W: Visitor<'de>> Visitor<'de> for V<W> {
    type Value = W::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64, visit_i128: i128,
        visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64, visit_u128: u128,
        visit_f32: f32, visit_f64: f64, visit_char: char,
        visit_str: &str, visit_borrowed_str: &'de str, visit_string: String,
        visit_bytes: &[u8], visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>
    );

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_some(Strict(d))
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.visit_newtype_struct(Strict(d))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(Access(a))
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Access(a))
    }
    fn visit_enum<A: EnumAccess<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
        self.0.visit_enum(Access(a))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Access<A> {
    type Error = A::Error;
    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Access<A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        // Keys are strings: nothing to wrap.
        self.0.next_key_seed(seed)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Access<A> {
    type Error = A::Error;
    type Variant = Access<A::Variant>;
    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self::Variant), A::Error> {
        self.0.variant_seed(seed).map(|(v, a)| (v, Access(a)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Access<A> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }
    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }
    fn tuple_variant<W: Visitor<'de>>(self, len: usize, v: W) -> Result<W::Value, A::Error> {
        self.0.tuple_variant(len, V(v))
    }
    fn struct_variant<W: Visitor<'de>>(self, fields: &'static [&'static str], v: W) -> Result<W::Value, A::Error> {
        // No request type has enums; a struct variant would still accept an array here.
        self.0.struct_variant(fields, V(v))
    }
}

//! A Kubernetes List (`{"kind": …, "metadata": {…}, "items": [{…}, …]}`) cut into its
//! `metadata` and its items as the bytes arrive, so a list of 150,000 pods is decoded one
//! item at a time while the API server is still sending it, and never held whole.
//!
//! Only the structure is followed (strings, escapes, nesting); each piece is handed out as
//! the exact bytes of one JSON value, for serde to decode from a slice.

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum SplitError {
    #[error("the list is not a JSON object (found {found:?} at byte {at})")]
    NotAnObject { found: char, at: u64 },
    #[error("unbalanced {found:?} at byte {at}")]
    Unbalanced { found: char, at: u64 },
    #[error("one item is over {limit} bytes (at byte {at})")]
    ItemTooLarge { limit: usize, at: u64 },
    #[error("the list ended early, {depth} level(s) still open after {read} bytes")]
    Truncated { depth: u32, read: u64 },
    #[error("bytes after the end of the list (at byte {at})")]
    TrailingBytes { at: u64 },
}

/// One whole value of the list, as sent.
#[derive(Debug, PartialEq)]
pub enum Piece<'a> {
    /// The list's `metadata` object (resourceVersion, continue).
    Metadata(&'a [u8]),
    /// One element of `items`.
    Item(&'a [u8]),
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Field {
    Metadata,
    Items,
    Other,
}

/// Cuts a List into pieces, chunk by chunk; chunks may end anywhere.
#[derive(Debug)]
pub struct ListSplitter {
    /// Bytes not yet handed out: from the start of an unfinished piece (or key) on.
    buf: Vec<u8>,
    /// Next byte of `buf` to look at.
    pos: usize,
    /// Bytes dropped from the front of `buf` so far (for positions in errors).
    dropped: u64,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At the top level, the next string is a key.
    expect_key: bool,
    key_start: Option<usize>,
    field: Field,
    /// Start of the piece being read (`metadata`'s object, or an item).
    piece_start: Option<usize>,
    limit: usize,
    done: bool,
}

impl ListSplitter {
    /// `limit`: the largest item (or `metadata`) accepted, in bytes.
    pub fn new(limit: usize) -> ListSplitter {
        ListSplitter {
            buf: Vec::new(),
            pos: 0,
            dropped: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            expect_key: false,
            key_start: None,
            field: Field::Other,
            piece_start: None,
            limit,
            done: false,
        }
    }

    /// Reads `chunk`, handing each piece it completes to `each`, in order.
    pub fn push<E: From<SplitError>>(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(Piece<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.buf.extend_from_slice(chunk);
        while self.pos < self.buf.len() {
            let i = self.pos;
            self.pos += 1;
            if self.in_string {
                // Most bytes are inside strings: jump to the next quote or backslash.
                if self.escaped {
                    self.escaped = false;
                    continue;
                }
                match memchr::memchr2(b'"', b'\\', &self.buf[i..]) {
                    None => self.pos = self.buf.len(),
                    Some(n) if self.buf[i + n] == b'\\' => {
                        self.escaped = true;
                        self.pos = i + n + 1;
                    }
                    Some(n) => {
                        self.in_string = false;
                        self.pos = i + n + 1;
                        if let Some(start) = self.key_start.take() {
                            self.field = match &self.buf[start..i + n] {
                                b"metadata" => Field::Metadata,
                                b"items" => Field::Items,
                                _ => Field::Other,
                            };
                        }
                    }
                }
                continue;
            }
            let b = self.buf[i];
            if self.done {
                if !b.is_ascii_whitespace() {
                    return Err(SplitError::TrailingBytes { at: self.at(i) }.into());
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    if self.depth == 1 && self.expect_key {
                        self.key_start = Some(i + 1);
                    }
                }
                b'{' | b'[' => {
                    if self.depth == 0 && b != b'{' {
                        return Err(SplitError::NotAnObject { found: b as char, at: self.at(i) }.into());
                    }
                    if self.at_piece_level() && self.piece_start.is_none() {
                        self.piece_start = Some(i);
                    }
                    self.depth += 1;
                    if self.depth == 1 {
                        self.expect_key = true;
                    }
                }
                b'}' | b']' => {
                    if self.depth == 0 {
                        return Err(SplitError::Unbalanced { found: b as char, at: self.at(i) }.into());
                    }
                    self.depth -= 1;
                    if self.at_piece_level() {
                        if let Some(start) = self.piece_start.take() {
                            let bytes = &self.buf[start..=i];
                            each(if self.field == Field::Metadata {
                                Piece::Metadata(bytes)
                            } else {
                                Piece::Item(bytes)
                            })?;
                        }
                    }
                    if self.depth == 0 {
                        self.done = true;
                    }
                }
                b':' if self.depth == 1 => self.expect_key = false,
                b',' if self.depth == 1 => {
                    self.expect_key = true;
                    self.field = Field::Other;
                }
                c if self.depth == 0 && !c.is_ascii_whitespace() => {
                    return Err(SplitError::NotAnObject { found: c as char, at: self.at(i) }.into());
                }
                _ => {}
            }
        }
        self.compact();
        if let Some(start) = self.piece_start {
            if self.buf.len() - start > self.limit {
                return Err(SplitError::ItemTooLarge { limit: self.limit, at: self.at(start) }.into());
            }
        }
        Ok(())
    }

    /// The list was read to its end: the whole object closed.
    pub fn finish(&self) -> Result<(), SplitError> {
        if self.done {
            Ok(())
        } else {
            Err(SplitError::Truncated { depth: self.depth, read: self.at(self.buf.len()) })
        }
    }

    /// A value opening or closing here is a whole piece: `metadata`'s object, or an item.
    fn at_piece_level(&self) -> bool {
        matches!((self.depth, self.field), (1, Field::Metadata) | (2, Field::Items))
    }

    fn at(&self, i: usize) -> u64 {
        self.dropped + i as u64
    }

    /// Drops what no unfinished piece or key needs.
    fn compact(&mut self) {
        let keep = self.piece_start.into_iter().chain(self.key_start).min().unwrap_or(self.pos);
        if keep == 0 {
            return;
        }
        self.buf.drain(..keep);
        self.dropped += keep as u64;
        self.pos -= keep;
        self.piece_start = self.piece_start.map(|s| s - keep);
        self.key_start = self.key_start.map(|s| s - keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits `doc` fed in chunks of `size`, into (metadata, items) as strings.
    fn split(doc: &str, size: usize) -> Result<(Vec<String>, Vec<String>), SplitError> {
        let mut s = ListSplitter::new(1 << 20);
        let (mut meta, mut items) = (Vec::new(), Vec::new());
        for chunk in doc.as_bytes().chunks(size.max(1)) {
            s.push::<SplitError>(chunk, |p| {
                match p {
                    Piece::Metadata(b) => meta.push(String::from_utf8(b.to_vec()).unwrap()),
                    Piece::Item(b) => items.push(String::from_utf8(b.to_vec()).unwrap()),
                }
                Ok(())
            })?;
        }
        s.finish()?;
        Ok((meta, items))
    }

    const LIST: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":""},
        "items":[{"metadata":{"name":"a","annotations":{"x":"}]\"{[","items":"[{"}},"spec":{"containers":[{"name":"c"}]}},
                 {"metadata":{"name":"b\\"}} ]}"#;

    #[test]
    fn every_item_comes_out_whole_wherever_the_chunks_end() {
        let whole: serde_json::Value = serde_json::from_str(LIST).unwrap();
        for size in 1..=LIST.len() {
            let (meta, items) = split(LIST, size).unwrap();
            assert_eq!(meta.len(), 1, "chunks of {size}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(&meta[0]).unwrap(), whole["metadata"]);
            let items: Vec<serde_json::Value> = items.iter().map(|i| serde_json::from_str(i).unwrap()).collect();
            assert_eq!(items, whole["items"].as_array().unwrap().clone(), "chunks of {size}");
        }
    }

    #[test]
    fn items_before_metadata_and_empty_or_null_items_are_fine() {
        let (meta, items) = split(r#"{"items":[{"a":1}],"metadata":{"resourceVersion":"7"}}"#, 3).unwrap();
        assert_eq!((meta, items), (vec![r#"{"resourceVersion":"7"}"#.to_string()], vec![r#"{"a":1}"#.to_string()]));
        assert_eq!(split(r#"{"metadata":{},"items":[]}"#, 5).unwrap().1.len(), 0);
        assert_eq!(split(r#"{"metadata":{},"items":null}"#, 5).unwrap().1.len(), 0);
    }

    #[test]
    fn a_nested_items_key_is_not_the_lists() {
        let (_, items) =
            split(r#"{"metadata":{"items":[{"no":1}]},"other":{"items":[{"no":2}]},"items":[{"yes":3}]}"#, 4).unwrap();
        assert_eq!(items, vec![r#"{"yes":3}"#.to_string()]);
    }

    #[test]
    fn broken_lists_are_refused_with_where() {
        assert_eq!(split(r#"{"metadata":{},"items":[{"a":1}"#, 4), Err(SplitError::Truncated { depth: 2, read: 31 }));
        assert_eq!(split(r#"[1,2]"#, 4), Err(SplitError::NotAnObject { found: '[', at: 0 }));
        assert_eq!(split(r#"{"a":1}}"#, 4), Err(SplitError::TrailingBytes { at: 7 }));
        assert_eq!(split("", 4), Err(SplitError::Truncated { depth: 0, read: 0 }));
        let mut s = ListSplitter::new(10);
        let r = s.push::<SplitError>(br#"{"items":[{"name":"a long item"#, |_| Ok(()));
        assert_eq!(r, Err(SplitError::ItemTooLarge { limit: 10, at: 10 }));
    }

    #[test]
    fn memory_holds_only_the_unfinished_item() {
        let mut s = ListSplitter::new(1 << 20);
        s.push::<SplitError>(br#"{"metadata":{},"items":["#, |_| Ok(())).unwrap();
        for _ in 0..1000 {
            s.push::<SplitError>(br#"{"metadata":{"name":"some-pod-name"}},"#, |_| Ok(())).unwrap();
        }
        s.push::<SplitError>(br#"{"metadata":{"name":"#, |_| Ok(())).unwrap();
        assert!(s.buf.len() <= 20, "{}", s.buf.len());
    }
}

//! YAML source files and errors that point into them (`file:line:column`).
//!
//! Config and routing-table errors must name the place an operator has to edit. serde's errors
//! carry a position, but only for the first structural problem (bad syntax, unknown key, wrong
//! type), and checks that relate one part of a file to another (an undefined region, a
//! duplicate id) run after deserialization, when positions are gone. Rather than keeping a span
//! on every field, [`locate`] walks the document again along a path (`countries` → `3` →
//! `region`) and makes the YAML deserializer report where that node starts: it fails on purpose
//! at the node, and the error carries the node's mark. This runs only when there is an error.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One error in a YAML source file, displayed as `file:line:column: message` (1-based line and
/// column; `file: message` when no position is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// The file the error is in.
    pub file: PathBuf,
    /// 1-based line and column of the offending node, when known.
    pub position: Option<(usize, usize)>,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(
                    f,
                    "{}:{}:{}: {}",
                    self.file.display(),
                    line,
                    column,
                    self.message
                )
            }
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

impl std::error::Error for SourceError {}

/// Every error found in one file; displayed one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceErrors(pub Vec<SourceError>);

impl fmt::Display for SourceErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SourceErrors {}

/// A YAML file read into memory, with its path for error messages.
#[derive(Debug, Clone)]
pub struct Source {
    /// Where the text came from (as given, for messages).
    pub path: PathBuf,
    /// The whole file.
    pub text: String,
}

/// One step of a path into a YAML document: a mapping key (compared with the key's scalar text,
/// so `3` matches the integer key 3), or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// The value under this mapping key.
    Key(String),
    /// The `n`th (0-based) occurrence of this mapping key itself, not its value: for duplicate
    /// keys and bad keys.
    KeyName(String, usize),
    /// The element at this index of a sequence.
    Index(usize),
}

impl Source {
    /// Reads a file; an I/O failure is a [`SourceError`] without position.
    pub fn read(path: &Path) -> Result<Source, SourceError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Source {
                path: path.to_path_buf(),
                text,
            }),
            Err(e) => Err(SourceError {
                file: path.to_path_buf(),
                position: None,
                message: format!("cannot read file: {e}"),
            }),
        }
    }

    /// Deserializes the whole document; a YAML or shape error keeps the parser's position.
    pub fn parse<T: de::DeserializeOwned>(&self) -> Result<T, SourceError> {
        serde_yaml::from_str(&self.text).map_err(|e| self.serde_error(&e))
    }

    /// Deserializes the node at `path` alone, from the text, so that its errors keep their
    /// position and the YAML path from the document's root (`routes[0].field: …`), as errors
    /// of [`Source::parse`] do. Lets a part of a file be read by the module that owns its
    /// shape (a route by its kind) after the rest was read.
    ///
    /// Errors: the node's YAML or shape error, or "no such node" without position when
    /// `path` is not in the file.
    pub fn parse_at<T: de::DeserializeOwned>(&self, path: &[Seg]) -> Result<T, SourceError> {
        let mut slot = None;
        let de = serde_yaml::Deserializer::from_str(&self.text);
        let walked = (Reader {
            path,
            slot: &mut slot,
        })
        .deserialize(de);
        match (slot, walked) {
            (Some(value), _) => Ok(value),
            (None, Err(e)) if !e.to_string().contains(FOUND) => Err(self.serde_error(&e)),
            (None, _) => Err(self.error_at(path, "no such node")),
        }
    }

    fn serde_error(&self, e: &serde_yaml::Error) -> SourceError {
        let position = e
            .location()
            .map(|l| within(&self.text, (l.line(), l.column())));
        // The message repeats "at line L column C"; the prefix already says where.
        let mut message = e.to_string();
        if let Some(cut) = message.find(" at line ") {
            message.truncate(cut);
        }
        SourceError {
            file: self.path.clone(),
            position,
            message,
        }
    }

    /// An error at the node `path` points to (no position when the path is not in the file).
    pub fn error_at(&self, path: &[Seg], message: impl Into<String>) -> SourceError {
        SourceError {
            file: self.path.clone(),
            position: locate(&self.text, path),
            message: message.into(),
        }
    }
}

/// `at` (1-based line and column), or the end of the last line when it lies past it: the
/// parser's end-of-stream mark on a text that does not end with a line break is on the
/// line after it (found by fuzzing: `router.yaml:2:1` for a one-line file). Lines are
/// YAML's (1.2 §5.4): a break is LF, CRLF or a CR alone.
fn within(text: &str, at: (usize, usize)) -> (usize, usize) {
    let breaks =
        text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count();
    if at.0 <= breaks + 1 {
        return at;
    }
    let last = text.rsplit(['\n', '\r']).next().unwrap_or_default();
    (breaks + 1, last.chars().count() + 1)
}

/// Finds the 1-based `(line, column)` where the node at `path` starts in a YAML document.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    let at = match (Finder { path }).deserialize(de) {
        // The message is prefixed with the YAML path (`a.b: ...`), hence `contains`.
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }?;
    if matches!(path.last(), Some(Seg::KeyName(..))) {
        return Some(key_before(text, at).unwrap_or(at));
    }
    Some(at)
}

/// From a value's 1-based (line, column), the start of the key before it: back over
/// whitespace, the `:`, whitespace again, then the key's text. `None` if the text there does
/// not look like `key: value` (a comment in between, say).
fn key_before(text: &str, (line, column): (usize, usize)) -> Option<(usize, usize)> {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line - 1)
        .map(str::len)
        .sum();
    let offset = line_start
        + text[line_start..]
            .char_indices()
            .nth(column - 1)
            .map(|(i, _)| i)?;
    let before = text[..offset].trim_end();
    let before = before.strip_suffix(':')?.trim_end();
    let key_start = before
        .rfind(|c: char| c.is_whitespace() || matches!(c, '{' | ','))
        .map_or(0, |i| i + 1);
    if key_start >= before.len() {
        return None;
    }
    let key_line = text[..key_start].matches('\n').count() + 1;
    let line_begin = text[..key_start].rfind('\n').map_or(0, |i| i + 1);
    let key_column = text[line_begin..key_start].chars().count() + 1;
    Some((key_line, key_column))
}

const FOUND: &str = "\u{0}found";

struct Finder<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Finder<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Finder<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = 0usize;
        match self.path.first() {
            None => Err(de::Error::custom(FOUND)),
            Some(Seg::Key(want)) => {
                while let Some(key) = map.next_key::<KeyText>()? {
                    if key.0 == *want {
                        return map.next_value_seed(Finder {
                            path: &self.path[1..],
                        });
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(())
            }
            Some(Seg::KeyName(want, nth)) => {
                // Key deserializers carry no mark of their own, so find the value of the
                // wanted occurrence; `locate` then walks back from it to the key.
                while let Some(key) = map.next_key::<KeyText>()? {
                    if key.0 == *want {
                        if seen == *nth {
                            return map.next_value_seed(Finder { path: &[] });
                        }
                        seen += 1;
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(())
            }
            Some(Seg::Index(_)) => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(())
            }
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.path.first() {
            None => Err(de::Error::custom(FOUND)),
            Some(Seg::Index(want)) => {
                let mut i = 0;
                loop {
                    if i == *want {
                        return seq
                            .next_element_seed(Finder {
                                path: &self.path[1..],
                            })
                            .map(|_| ());
                    }
                    if seq.next_element::<IgnoredAny>()?.is_none() {
                        return Ok(());
                    }
                    i += 1;
                }
            }
            Some(_) => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(())
            }
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

impl Finder<'_> {
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.path.is_empty() {
            Err(E::custom(FOUND))
        } else {
            Ok(())
        }
    }
}

/// Walks to the node at `path` like [`Finder`], and there deserializes a `T` into `slot`;
/// then stops the walk with the `FOUND` error.
struct Reader<'p, 's, T> {
    path: &'p [Seg],
    slot: &'s mut Option<T>,
}

impl<'de, T: de::DeserializeOwned> DeserializeSeed<'de> for Reader<'_, '_, T> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.path.is_empty() {
            *self.slot = Some(T::deserialize(d)?);
            return Err(de::Error::custom(FOUND));
        }
        d.deserialize_any(self)
    }
}

impl<'de, T: de::DeserializeOwned> Visitor<'de> for Reader<'_, '_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if let Some(Seg::Key(want)) = self.path.first() {
            while let Some(key) = map.next_key::<KeyText>()? {
                if key.0 == *want {
                    return map.next_value_seed(Reader {
                        path: &self.path[1..],
                        slot: self.slot,
                    });
                }
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(Seg::Index(want)) = self.path.first() {
            for _ in 0..*want {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(());
                }
            }
            return seq
                .next_element_seed(Reader {
                    path: &self.path[1..],
                    slot: self.slot,
                })
                .map(|_| ());
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A mapping key rendered as text, whatever its YAML type.
struct KeyText(String);

impl<'de> de::Deserialize<'de> for KeyText {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<KeyText, D::Error> {
        d.deserialize_any(KeyTextVisitor).map(KeyText)
    }
}

struct KeyTextVisitor;

impl<'de> Visitor<'de> for KeyTextVisitor {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a scalar key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok(String::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "a: 1\nlist:\n  - x\n  - { k: v }\nmap:\n  3: eu\n  4: us\n  3: ap\n";

    fn key(s: &str) -> Seg {
        Seg::Key(s.into())
    }

    /// A shape error found at the end of a text without a final line break points at the
    /// end of its last line, not at a line after it (found by the `config` fuzz target).
    #[test]
    fn an_error_at_the_end_stays_inside_the_text() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Needs {
            listen: String,
        }
        let source = Source {
            path: "r.yaml".into(),
            text: "# no listen".into(),
        };
        let e = source.parse::<Needs>().expect_err("missing field");
        assert_eq!(e.position, Some((1, 12)), "{e}");
        let source = Source {
            path: "r.yaml".into(),
            text: "# no listen\n".into(),
        };
        let e = source.parse::<Needs>().expect_err("missing field");
        assert!(e.position.is_some_and(|(line, _)| line <= 2), "{e}");
    }

    #[test]
    fn finds_values_keys_and_items() {
        assert_eq!(locate(DOC, &[key("a")]), Some((1, 4)));
        assert_eq!(
            locate(DOC, &[key("list"), Seg::Index(1), key("k")]),
            Some((4, 10))
        );
        assert_eq!(locate(DOC, &[key("map"), key("4")]), Some((7, 6)));
        assert_eq!(
            locate(DOC, &[key("map"), Seg::KeyName("3".into(), 1)]),
            Some((8, 3))
        );
        assert_eq!(locate(DOC, &[key("nope")]), None);
        assert_eq!(locate(DOC, &[key("list"), Seg::Index(9)]), None);
    }

    #[test]
    fn parses_one_node_keeping_its_position() {
        let source = Source {
            path: "doc.yaml".into(),
            text: DOC.into(),
        };
        let k: std::collections::BTreeMap<String, String> = source
            .parse_at(&[key("list"), Seg::Index(1)])
            .expect("node");
        assert_eq!(k["k"], "v");
        let e = source
            .parse_at::<u32>(&[key("list"), Seg::Index(1), key("k")])
            .expect_err("not a number");
        assert_eq!(e.position, Some((4, 10)));
        assert!(e.message.starts_with("list[1].k: "), "{}", e.message);
        let e = source.parse_at::<u32>(&[key("nope")]).expect_err("absent");
        assert_eq!(e.position, None);
    }
}

//! The protobuf reader of `grpc:` routes (docs/tls-h2-grpc.md): the id is a field of the call's first
//! request message, read without the schema from the protobuf wire format.
//!
//! `field: 1` is field 1 of the message; `field: 2.1` is field 1 of the message in field 2.
//! The field must be length-delimited (a `string` or `bytes`, or the enclosing message). It is
//! read as the service's protobuf decoder reads it, so that the router and the service agree
//! on the entity: the last occurrence wins, and occurrences of an embedded message merge. The message framing is the gRPC HTTP/2 protocol's: a 1-byte
//! compressed flag, a 4-byte big-endian length, the message.

use serde::Deserialize;

/// `field:` as written: a number (`field: 1`), or a dotted path of numbers, bare
/// (`field: 2.1`, which YAML would read as a float) or quoted (`field: "2.1"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldSpec {
    /// `field: 1`.
    Number(u32),
    /// `field: 2.1` or `field: "2.1"`, as its text.
    Path(String),
}

impl<'de> Deserialize<'de> for FieldSpec {
    /// Asks for the scalar's text, so that `2.10` stays field 10 of field 2 (as a float it
    /// would be 2.1). Errors: anything but a scalar number or string.
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_str(FieldVisitor)
    }
}

struct FieldVisitor;

impl serde::de::Visitor<'_> for FieldVisitor {
    type Value = FieldSpec;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a protobuf field number such as 1, or a path of them such as 2.1")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<FieldSpec, E> {
        Ok(match text.trim().parse::<u32>() {
            Ok(n) => FieldSpec::Number(n),
            Err(_) => FieldSpec::Path(text.to_owned()),
        })
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<FieldSpec, E> {
        u32::try_from(n).map(FieldSpec::Number).map_err(|_| {
            E::custom(format!(
                "{n} is not a protobuf field number (1 to 536870911)"
            ))
        })
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<FieldSpec, E> {
        u64::try_from(n)
            .map_err(|_| {
                E::custom(format!(
                    "{n} is not a protobuf field number (1 to 536870911)"
                ))
            })
            .and_then(|n| self.visit_u64(n))
    }

    /// Only reached through a deserializer that does not keep the scalar's text; the float's
    /// shortest text is then the path.
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<FieldSpec, E> {
        Ok(FieldSpec::Path(n.to_string()))
    }
}

impl FieldSpec {
    /// The field numbers, outer first.
    ///
    /// Errors: a part that is not a field number (1 to 2^29 − 1), or an empty part.
    pub fn path(&self) -> Result<Vec<u32>, String> {
        let check = |n: u32| {
            if (1..(1 << 29)).contains(&n) {
                Ok(n)
            } else {
                Err(format!(
                    "{n} is not a protobuf field number (1 to 536870911)"
                ))
            }
        };
        match self {
            FieldSpec::Number(n) => Ok(vec![check(*n)?]),
            FieldSpec::Path(text) => text
                .split('.')
                .map(|part| {
                    part.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("`{text}` is not a field path such as 2.1"))
                        .and_then(check)
                })
                .collect(),
        }
    }
}

/// The first message of a gRPC request body, once `buf` holds it: `Some(Ok((compressed,
/// message)))`, `None` while more bytes are needed.
///
/// Errors: none today; the length is checked by the caller against its limit first.
pub fn first_message(buf: &[u8]) -> Option<(bool, &[u8])> {
    let header = buf.get(..5)?;
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let message = buf.get(5..5usize.checked_add(len)?)?;
    Some((header[0] & 1 == 1, message))
}

/// The declared length of the first message, once its 5-byte prefix is in `buf`.
pub fn declared_len(buf: &[u8]) -> Option<usize> {
    let h = buf.get(..5)?;
    Some(u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize)
}

/// Whether a request is gRPC: `content-type: application/grpc` (with `+proto` and the
/// like, gRPC over HTTP/2 "Requests"). Its refusals are then gRPC statuses, not problem+json.
pub fn is_grpc(headers: &http::HeaderMap) -> bool {
    is_grpc_content_type(
        headers
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes()),
    )
}

/// [`is_grpc`] on a `Content-Type` value (the first, if any).
pub fn is_grpc_content_type(value: Option<&[u8]>) -> bool {
    value.is_some_and(|v| v.starts_with(b"application/grpc"))
}

/// How deep messages may nest before the reader gives up (protobuf's own decoders stop at
/// 100, e.g. prost's `RECURSION_LIMIT`).
const MAX_DEPTH: usize = 100;

/// The bytes of the length-delimited field at `path` in a protobuf `message`, read as a
/// protobuf decoder reads it (protobuf language guide, "Updating a message type" and
/// encoding: "Last one wins"): of a field that occurs several times the last occurrence
/// wins, and the occurrences of an embedded message merge, so `2.1` is field 1 of every
/// occurrence of field 2 taken together, the last one found winning. Fields of other numbers,
/// groups included, are skipped.
///
/// Errors: the message is not valid wire format (cut short, a varint over 10 bytes, an
/// unmatched group end), a field on the path has a wire type other than length-delimited,
/// or no occurrence holds the field.
pub fn field<'m>(message: &'m [u8], path: &[u32]) -> Result<&'m [u8], String> {
    match last(message, path, 0)? {
        Some(found) => Ok(found),
        None => Err(format!("no field {} in the message", path_text(path))),
    }
}

/// `path` as written in the config (`2.1`).
pub fn path_text(path: &[u32]) -> String {
    let parts: Vec<String> = path.iter().map(u32::to_string).collect();
    parts.join(".")
}

/// The last occurrence of `path` in `message`, `None` if no occurrence has it.
fn last<'m>(message: &'m [u8], path: &[u32], depth: usize) -> Result<Option<&'m [u8]>, String> {
    let Some((&want, inner)) = path.split_first() else {
        return Ok(Some(message));
    };
    if depth >= MAX_DEPTH {
        return Err(format!("messages nested more than {MAX_DEPTH} deep"));
    }
    let mut found = None;
    let mut at = 0usize;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        let (number, wire) = (key >> 3, key & 7);
        if number != u64::from(want) {
            at = skip_field(message, at, number, wire, depth)?;
            continue;
        }
        if wire != 2 {
            return Err(format!(
                "field {want} is not a string, bytes or message field (wire type {wire})"
            ));
        }
        let (start, end) = delimited(message, &mut at)?;
        // Merged occurrences: one without the inner field leaves the value found in an
        // earlier one.
        if let Some(value) = last(&message[start..end], inner, depth + 1)? {
            found = Some(value);
        }
        at = end;
    }
    Ok(found)
}

/// The bounds of a length-delimited value whose key was just read; `at` is left past its
/// length prefix.
fn delimited(message: &[u8], at: &mut usize) -> Result<(usize, usize), String> {
    let len = usize::try_from(varint(message, at)?).map_err(|_| "a length too large".to_owned())?;
    Ok((*at, skip(message, *at, len)?))
}

/// Skips the value of a field whose key (`number`, `wire`) was just read: where the next key
/// starts. A group is skipped to its matching end.
fn skip_field(
    message: &[u8],
    at: usize,
    number: u64,
    wire: u64,
    depth: usize,
) -> Result<usize, String> {
    match wire {
        0 => {
            let mut at = at;
            varint(message, &mut at)?;
            Ok(at)
        }
        1 => skip(message, at, 8),
        5 => skip(message, at, 4),
        2 => {
            let mut at = at;
            delimited(message, &mut at).map(|(_, end)| end)
        }
        3 => skip_group(message, at, number, depth),
        _ => Err(format!("wire type {wire} where a field was expected")),
    }
}

/// Skips a group whose start (field `number`, wire type 3) was just read, up to and past its
/// matching end.
fn skip_group(message: &[u8], mut at: usize, number: u64, depth: usize) -> Result<usize, String> {
    if depth >= MAX_DEPTH {
        return Err(format!("groups nested more than {MAX_DEPTH} deep"));
    }
    loop {
        let key = varint(message, &mut at)?;
        let (inner, wire) = (key >> 3, key & 7);
        if wire == 4 {
            if inner == number {
                return Ok(at);
            }
            return Err(format!("wire type 4 inside group {number}"));
        }
        at = skip_field(message, at, inner, wire, depth + 1)?;
    }
}

fn skip(message: &[u8], at: usize, n: usize) -> Result<usize, String> {
    at.checked_add(n)
        .filter(|end| *end <= message.len())
        .ok_or_else(|| "the message is cut short".to_owned())
}

fn varint(message: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *message
            .get(*at)
            .ok_or_else(|| "the message is cut short".to_owned())?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint longer than 10 bytes".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{ 1: 150 (varint), 2: { 1: "inner-id" }, 3: "outer-id", 4: fixed64 }`.
    fn message() -> Vec<u8> {
        let mut m = vec![0x08, 0x96, 0x01];
        m.extend_from_slice(&[0x12, 10, 0x0a, 8]);
        m.extend_from_slice(b"inner-id");
        m.extend_from_slice(&[0x1a, 8]);
        m.extend_from_slice(b"outer-id");
        m.extend_from_slice(&[0x21, 1, 2, 3, 4, 5, 6, 7, 8]);
        m
    }

    #[test]
    fn fields_and_nested_fields_are_found() {
        let m = message();
        assert_eq!(field(&m, &[3]), Ok(&b"outer-id"[..]));
        assert_eq!(field(&m, &[2, 1]), Ok(&b"inner-id"[..]));
        assert!(field(&m, &[1]).is_err(), "a varint is no id");
        assert!(field(&m, &[9]).is_err());
        assert!(field(&m[..5], &[3]).is_err(), "cut short");
        assert!(field(&[0xff; 12], &[1]).is_err(), "no panic on junk");
    }

    #[test]
    fn framing_and_field_paths() {
        let mut body = vec![0, 0, 0, 0, 3];
        assert_eq!(first_message(&body), None);
        body.extend_from_slice(b"abc");
        assert_eq!(first_message(&body), Some((false, &b"abc"[..])));
        assert_eq!(declared_len(&body), Some(3));
        assert_eq!(FieldSpec::Path("2.1".into()).path(), Ok(vec![2, 1]));
        assert_eq!(FieldSpec::Number(1).path(), Ok(vec![1]));
        assert!(FieldSpec::Path("2.x".into()).path().is_err());
        assert!(FieldSpec::Number(0).path().is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64), a in 1u32..20, b in 1u32..20) {
            let _ = field(&bytes, &[a, b]);
            let _ = first_message(&bytes);
        }
    }
}

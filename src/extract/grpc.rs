//! The `grpc:` route (SPEC §12): the id is a field of the call's first request message, read
//! without the schema from the protobuf wire format.
//!
//! `field: 1` is field 1 of the message; `field: 2.1` is field 1 of the message in field 2.
//! The field must be length-delimited (a `string` or `bytes`, or the enclosing message); its
//! first occurrence is taken. The message framing is the gRPC HTTP/2 protocol's: a 1-byte
//! compressed flag, a 4-byte big-endian length, the message.

use serde::Deserialize;

/// `field:` as written: a number, or a dotted path of numbers.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FieldSpec {
    /// `field: 1`.
    Number(u32),
    /// `field: "2.1"`.
    Path(String),
}

/// A compiled `grpc:` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcRoute {
    /// The method's path, matched exactly (`/orders.v1.Orders/GetOrder`).
    pub path: String,
    /// Field numbers from the outer message inwards.
    pub field: Vec<u32>,
    /// The scheme of the id.
    pub scheme: String,
}

impl FieldSpec {
    /// The field numbers, outer first.
    ///
    /// Errors: a part that is not a field number (1 to 2^29 − 1).
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

/// The bytes of the length-delimited field at `path` in a protobuf `message`.
///
/// Errors: the message is not valid wire format, or has no such field, or the field is not
/// length-delimited.
pub fn field<'m>(message: &'m [u8], path: &[u32]) -> Result<&'m [u8], String> {
    let Some((&want, inner)) = path.split_first() else {
        return Ok(message);
    };
    let mut at = 0usize;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(message, &mut at)?;
            }
            1 => at = skip(message, at, 8)?,
            5 => at = skip(message, at, 4)?,
            2 => {
                let len = usize::try_from(varint(message, &mut at)?)
                    .map_err(|_| "a length too large".to_owned())?;
                let end = skip(message, at, len)?;
                if number == u64::from(want) {
                    return field(&message[at..end], inner);
                }
                at = end;
            }
            _ => return Err(format!("wire type {wire} (groups are not read)")),
        }
        if number == u64::from(want) && wire != 2 {
            return Err(format!(
                "field {want} is not a string, bytes or message field"
            ));
        }
    }
    Err(format!("no field {want} in the message"))
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

//! gRPC framing and the protobuf field reader (`extract/grpc.rs`) on arbitrary bytes: a
//! message found inside the frame's declared length, a field found inside the message.

use crate::extract::grpc::{declared_len, field, first_message};

/// The first byte is a field path's depth (1–3) and the next ones its field numbers; the
/// rest is a request body (5-byte prefix, then the message).
pub fn check(data: &[u8]) {
    let Some((&depth, rest)) = data.split_first() else {
        return;
    };
    let depth = usize::from(depth % 3) + 1;
    let Some((numbers, body)) = rest.split_at_checked(depth) else {
        return;
    };
    // Field numbers 1–31: the ones a short corpus reaches.
    let path: Vec<u32> = numbers.iter().map(|&n| u32::from(n % 31) + 1).collect();
    if let Some((_, message)) = first_message(body) {
        assert_eq!(Some(message.len()), declared_len(body));
        assert!(inside(message, body), "the message is not within the body");
        if let Ok(found) = field(message, &path) {
            assert!(
                inside(found, message),
                "field {path:?} is not within its message"
            );
        }
    }
    // The message reader alone, on the whole input.
    if let Ok(found) = field(body, &path) {
        assert!(
            inside(found, body),
            "field {path:?} is not within its message"
        );
    }
}

/// Whether `part` is a sub-slice of `whole`.
fn inside(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

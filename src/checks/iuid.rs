//! The iUID's text and bytes (docs/iuid.md): every text form parses to the key its
//! canonical text parses to again; 16 bytes that are an iUID print as text that parses
//! back to them, with the same fields.

use ::iuid::{Iuid, Uuid};

use crate::scheme::iuid::parse;

/// Text: parse → print → parse is the same key, and the print is canonical lowercase
/// hyphenated. Bytes (the first 16): an iUID round-trips through its text and its fields.
pub fn check(data: &[u8]) {
    if let Ok(key) = parse(data) {
        let text = key.to_string();
        assert_eq!(text.len(), 36, "{data:?} printed as {text}");
        assert_eq!(text, text.to_ascii_lowercase());
        assert_eq!(parse(text.as_bytes()), Ok(key), "{data:?} → {text}");
    }
    let Some(bytes) = data.get(..16) else { return };
    let mut raw = [0u8; 16];
    raw.copy_from_slice(bytes);
    let Ok(id) = Iuid::try_from_uuid(Uuid(raw)) else {
        return;
    };
    let text = id.to_string();
    assert_eq!(Iuid::parse(text.as_bytes()), Ok(id), "{raw:?} → {text}");
    let again = Iuid::from_fields(
        id.unix_ts_ms(),
        id.country(),
        id.service_entity(),
        id.rand(),
    );
    assert_eq!(again, id, "{raw:?}: fields do not rebuild the id");
}

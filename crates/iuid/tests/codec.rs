//! The codec against docs/iuid.md: the test vector in every text form, each error, round-trips.

use iuid::{Iuid, ParseError, Uuid};
use proptest::prelude::*;

const VECTOR: &str = "017f22e2-79b0-802a-8144-dc0c0c07398f";

fn check_vector(id: Iuid) {
    assert_eq!(id.unix_ts_ms(), 0x017F_22E2_79B0);
    assert_eq!(id.ver1(), 0);
    assert_eq!(id.country(), 42);
    assert_eq!(id.service_entity(), 5);
    assert_eq!(id.rand(), 0x4_DC0C_0C07_398F);
    assert_eq!(id.to_string(), VECTOR);
}

#[test]
fn spec_test_vector_both_ways() {
    let built = Iuid::from_fields(0x017F_22E2_79B0, 42, 5, 0x4_DC0C_0C07_398F);
    assert_eq!(built.to_string(), VECTOR);
    let mut buf = [0u8; 36];
    assert_eq!(built.encode_lower(&mut buf), VECTOR);
    check_vector(Iuid::parse(VECTOR.as_bytes()).expect("vector parses"));
}

#[test]
fn spec_test_vector_in_every_text_form() {
    for form in [
        VECTOR.to_owned(),
        VECTOR.to_uppercase(),
        VECTOR.replace('-', ""),
        format!("{{{VECTOR}}}"),
        format!("urn:uuid:{VECTOR}"),
        format!("URN:UUID:{}", VECTOR.to_uppercase()),
        // Relay global ids: base64("Order:" + uuid), standard padded and URL-safe unpadded.
        "T3JkZXI6MDE3ZjIyZTItNzliMC04MDJhLTgxNDQtZGMwYzBjMDczOThm".to_owned(),
        "Tm9kZT4+OjAxN2YyMmUyLTc5YjAtODAyYS04MTQ0LWRjMGMwYzA3Mzk4Zg==".to_owned(),
        "Tm9kZT4-OjAxN2YyMmUyLTc5YjAtODAyYS04MTQ0LWRjMGMwYzA3Mzk4Zg".to_owned(),
        "UmlkZT8/OjAxN2YyMmUyLTc5YjAtODAyYS04MTQ0LWRjMGMwYzA3Mzk4Zg==".to_owned(),
        "UmlkZT8_OjAxN2YyMmUyLTc5YjAtODAyYS04MTQ0LWRjMGMwYzA3Mzk4Zg".to_owned(),
        // The uuid inside a Relay id may itself be braced and uppercase.
        "V2FsbGV0QWNjb3VudDp7MDE3RjIyRTItNzlCMC04MDJBLTgxNDQtREMwQzBDMDczOThGfQ==".to_owned(),
    ] {
        let id = Iuid::parse(form.as_bytes()).unwrap_or_else(|e| panic!("{form}: {e}"));
        check_vector(id);
        assert_eq!(
            Uuid::parse(form.as_bytes()).map(Iuid::try_from_uuid),
            Ok(Ok(id))
        );
    }
}

fn err(input: &str) -> ParseError {
    Iuid::parse(input.as_bytes()).expect_err(input)
}

#[test]
fn each_error_says_precisely_why() {
    assert_eq!(err(""), ParseError::Empty);
    assert_eq!(err("017f22e2"), ParseError::InvalidLength { len: 8 });
    assert_eq!(
        err("017f22e2-79b0-802a-8144-dc0c0c07398g"),
        ParseError::InvalidChar {
            pos: 36,
            byte: b'g'
        }
    );
    assert_eq!(
        err("017f22e279b0802a8144dc0c0c07398Z"),
        ParseError::InvalidChar {
            pos: 32,
            byte: b'Z'
        }
    );
    assert_eq!(
        err("{017f22e2-79b0-802a-8144-dc0c0c07 398f}"),
        ParseError::InvalidLength { len: 39 }
    );
    assert_eq!(
        err("{017f22e2-79b0-802a-8144-dc0c0c0x398f}"),
        ParseError::InvalidChar {
            pos: 33,
            byte: b'x'
        }
    );
    assert_eq!(
        err("017f22e2_79b0-802a-8144-dc0c0c07398f"),
        ParseError::InvalidGroup { pos: 9 }
    );
    assert_eq!(
        err("{017f22e2-79b0-802a-8144-dc0c0c07398f]"),
        ParseError::InvalidGroup { pos: 38 }
    );
    assert_eq!(
        err("urn:uid:x017f22e2-79b0-802a-8144-dc0c0c07398f"),
        ParseError::InvalidGroup { pos: 1 }
    );
    // Decodes as base64, but holds no "Type:" prefix.
    assert_eq!(
        err("T3JkZXIwMTdmMjJlMi03OWIwLTgwMmEtODE0NC1kYzBjMGMwNzM5OGY="),
        ParseError::InvalidRelay
    );
    assert_eq!(err(&"!".repeat(50)), ParseError::InvalidLength { len: 50 });
    assert_eq!(
        err("017f22e2-79b0-802a-0144-dc0c0c07398f"),
        ParseError::InvalidVariant
    );
    assert_eq!(
        err("017f22e2-79b0-832a-8144-dc0c0c07398f"),
        ParseError::UnsupportedFormat { ver1: 3 }
    );
    let message = err("017f22e2-79b0-802a-8144-dc0c0c07398g").to_string();
    assert!(message.contains("'g' at position 36"), "{message}");
    let message = err("017f22e2-79b0-802a-8144-dc0c0c07398\u{7}").to_string();
    assert!(message.contains("'\\x07'"), "{message}");
}

#[test]
fn other_uuid_versions_are_told_apart_from_non_uuids() {
    for (text, version) in [
        ("9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f", 4),
        ("01932c07-2c4a-7d3e-9f1b-3c5d7e9f1a2b", 7),
        (
            "T3JkZXI6MDE3ZjIyZTItNzliMC00MDJhLTgxNDQtZGMwYzBjMDczOThm",
            4,
        ), // Relay of a v4
    ] {
        let e = err(text);
        assert_eq!(e, ParseError::NotVersion8 { version });
        assert!(e.is_other_uuid());
        assert!(e.to_string().contains(&format!("version {version}")));
        // Still a valid UUID of its own version (routing them is the router's business).
        match Uuid::parse(text.as_bytes()) {
            Ok(u) => assert_eq!(u.version(), version),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert!(!err("nope").is_other_uuid());
    assert_eq!(
        Iuid::parse(b"017f22e2-79b0-802a-0144-dc0c0c07398f"),
        Err(ParseError::InvalidVariant)
    );
    let nil = Uuid::parse(b"00000000-0000-0000-0000-000000000000").expect("nil");
    assert_eq!(Uuid::parse(b"00000000000000000000000000000000"), Ok(nil));
}

proptest! {
    #[test]
    fn fields_round_trip_through_text(
        ts in 0u64..(1 << 48),
        country: u8,
        service: u8,
        rand in 0u64..(1 << 54),
    ) {
        let id = Iuid::from_fields(ts, country, service, rand);
        let text = id.to_string();
        prop_assert_eq!(text.len(), 36);
        prop_assert_eq!(text.as_bytes()[14], b'8');
        let back = Iuid::parse(text.as_bytes()).expect("own text parses");
        prop_assert_eq!(back, id);
        prop_assert_eq!(
            (back.unix_ts_ms(), back.country(), back.service_entity(), back.rand(), back.ver1()),
            (ts, country, service, rand, 0)
        );
        prop_assert_eq!(Iuid::parse(text.to_uppercase().replace('-', "").as_bytes()), Ok(id));
        // Byte order is field order: a later timestamp always sorts later.
        if ts + 1 < (1 << 48) {
            prop_assert!(Iuid::from_fields(ts + 1, 0, 0, 0) > id);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Uuid::parse(&input);
        let _ = Iuid::parse(&input);
    }

    #[test]
    fn mutated_ids_never_panic(pos in 0usize..36, byte: u8) {
        let mut text = VECTOR.as_bytes().to_vec();
        text[pos] = byte;
        let _ = Uuid::parse(&text);
        let _ = Iuid::parse(&text);
    }

    /// The arithmetic hex decoder agrees with the standard library on every byte: any byte
    /// put anywhere in the simple form is accepted exactly when it is a hex digit, decoded to
    /// its value, and otherwise reported at its position.
    #[test]
    fn hex_digits_decode_as_the_standard_library_says(pos in 0usize..32, byte: u8) {
        let mut text = VECTOR.replace('-', "").into_bytes();
        text[pos] = byte;
        match Uuid::parse(&text) {
            Ok(u) => {
                let want = u128::from_str_radix(std::str::from_utf8(&text).expect("hex"), 16)
                    .expect("the standard library agrees it is hex");
                prop_assert_eq!(u128::from_be_bytes(*u.as_bytes()), want);
            }
            Err(e) => {
                prop_assert!(!byte.is_ascii_hexdigit());
                prop_assert_eq!(e, ParseError::InvalidChar { pos: pos + 1, byte });
            }
        }
    }
}

//! The `grpc:` route's field reader against a real protobuf decoder (prost, `proto/orders.proto`):
//! over generated messages whose fields are repeated, split over several occurrences of an
//! embedded message, reordered and mixed with unknown fields and groups, the router must read
//! the very id the service will decode (last occurrence wins, embedded messages merge).

#[path = "proto/orders.rs"]
mod orders;

use iuid_router::extract::grpc::field;
use orders::wire;
use orders::{GetOrderRequest, Ref};
use proptest::prelude::*;
use prost::Message as _;

/// One occurrence of a field of `Ref`.
#[derive(Debug, Clone)]
enum RefPiece {
    Id(String),
    Shard(u32),
    /// `parent`, itself a list of occurrences (no deeper parents).
    Parent(Vec<RefPiece>),
}

/// One occurrence of a field of `GetOrderRequest`, or of a field it does not know.
#[derive(Debug, Clone)]
enum Piece {
    Id(String),
    Ref(Vec<RefPiece>),
    Note(Vec<u8>),
    Version(u64),
    Stamp(u64),
    Small(u32),
    /// An unknown length-delimited field (numbers 7 to 19).
    Unknown(u32, Vec<u8>),
    /// An unknown group (wire types 3 and 4) holding a varint and a string.
    Group(u32, u64, String),
}

fn encode_ref(pieces: &[RefPiece]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            RefPiece::Id(s) => wire::bytes(&mut out, 1, s.as_bytes()),
            RefPiece::Shard(n) => wire::uint(&mut out, 2, u64::from(*n)),
            RefPiece::Parent(inner) => wire::bytes(&mut out, 3, &encode_ref(inner)),
        }
    }
    out
}

fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Id(s) => wire::bytes(&mut out, 1, s.as_bytes()),
            Piece::Ref(inner) => wire::bytes(&mut out, 2, &encode_ref(inner)),
            Piece::Note(b) => wire::bytes(&mut out, 3, b),
            Piece::Version(n) => wire::uint(&mut out, 4, *n),
            Piece::Stamp(n) => {
                wire::key(&mut out, 5, 1);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Piece::Small(n) => {
                wire::key(&mut out, 6, 5);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Piece::Unknown(number, b) => wire::bytes(&mut out, *number, b),
            Piece::Group(number, v, s) => {
                wire::key(&mut out, *number, 3);
                wire::uint(&mut out, 1, *v);
                wire::bytes(&mut out, 2, s.as_bytes());
                wire::key(&mut out, *number, 4);
            }
        }
    }
    out
}

fn id() -> impl Strategy<Value = String> {
    "[a-z0-9-]{0,12}"
}

fn ref_pieces(depth: u32) -> BoxedStrategy<Vec<RefPiece>> {
    let leaf = prop_oneof![
        id().prop_map(RefPiece::Id),
        any::<u32>().prop_map(RefPiece::Shard),
    ];
    let piece = if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![3 => leaf, 1 => ref_pieces(depth - 1).prop_map(RefPiece::Parent)].boxed()
    };
    proptest::collection::vec(piece, 0..4).boxed()
}

fn pieces() -> impl Strategy<Value = Vec<Piece>> {
    let piece = prop_oneof![
        3 => id().prop_map(Piece::Id),
        3 => ref_pieces(1).prop_map(Piece::Ref),
        1 => proptest::collection::vec(any::<u8>(), 0..8).prop_map(Piece::Note),
        1 => any::<u64>().prop_map(Piece::Version),
        1 => any::<u64>().prop_map(Piece::Stamp),
        1 => any::<u32>().prop_map(Piece::Small),
        1 => (7u32..20, proptest::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(n, b)| Piece::Unknown(n, b)),
        1 => (7u32..20, any::<u64>(), id()).prop_map(|(n, v, s)| Piece::Group(n, v, s)),
    ];
    proptest::collection::vec(piece, 0..10)
}

/// What the router reads at `path`, as prost's default when no occurrence holds it (proto3:
/// an absent string is empty), so that it compares with the decoded value.
fn routed(message: &[u8], path: &[u32]) -> Vec<u8> {
    match field(message, path) {
        Ok(value) => value.to_vec(),
        Err(e) => {
            assert!(
                e.starts_with("no field"),
                "a valid message was refused: {e}"
            );
            Vec::new()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if std::env::var_os("CI").is_some() { 512 } else { 2048 }))]

    /// Every field the router can route by reads as prost decodes it.
    #[test]
    fn the_router_reads_what_prost_decodes(pieces in pieces()) {
        let message = encode(&pieces);
        let decoded = GetOrderRequest::decode(message.as_slice()).expect("prost decodes it");
        prop_assert_eq!(routed(&message, &[1]), decoded.id.as_bytes().to_vec());
        let r = decoded.r#ref.clone().unwrap_or_default();
        prop_assert_eq!(routed(&message, &[2, 1]), r.id.as_bytes().to_vec());
        let parent = r.parent.map(|p| *p).unwrap_or_default();
        prop_assert_eq!(routed(&message, &[2, 3, 1]), parent.id.as_bytes().to_vec());
        prop_assert_eq!(routed(&message, &[3]), decoded.note.clone());
    }

    /// A message prost refuses because the id field has the wrong wire type is refused by
    /// the router too: it never routes by a field the service will not accept.
    #[test]
    fn a_field_of_the_wrong_type_is_refused_by_both(pieces in pieces(), at in 0usize..10, v in any::<u64>()) {
        let mut with_bad = pieces.clone();
        let at = at.min(with_bad.len());
        with_bad.insert(at, Piece::Version(0));
        let mut message = encode(&with_bad[..at]);
        wire::uint(&mut message, 1, v);
        message.extend_from_slice(&encode(&with_bad[at + 1..]));
        prop_assert!(GetOrderRequest::decode(message.as_slice()).is_err());
        prop_assert!(field(&message, &[1]).is_err());
    }
}

/// The cases the issue names, spelled out: a repeated id, an embedded message repeated with
/// the id in its first occurrence only, and one repeated with the id in both.
#[test]
fn last_occurrence_wins_and_embedded_messages_merge() {
    let mut m = Vec::new();
    wire::bytes(&mut m, 1, b"eu-id");
    wire::bytes(&mut m, 1, b"us-id");
    assert_eq!(field(&m, &[1]), Ok(&b"us-id"[..]));

    let mut m = Vec::new();
    wire::bytes(&mut m, 2, &encode_ref(&[RefPiece::Id("eu-id".into())]));
    wire::bytes(&mut m, 2, &encode_ref(&[RefPiece::Shard(7)]));
    let decoded = GetOrderRequest::decode(m.as_slice()).expect("decodes");
    assert_eq!(
        decoded.r#ref,
        Some(Ref {
            id: "eu-id".into(),
            shard: 7,
            parent: None
        })
    );
    assert_eq!(field(&m, &[2, 1]), Ok(&b"eu-id"[..]));

    wire::bytes(&mut m, 2, &encode_ref(&[RefPiece::Id("us-id".into())]));
    assert_eq!(field(&m, &[2, 1]), Ok(&b"us-id"[..]));
}

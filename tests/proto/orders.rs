//! `orders.proto` as prost-build generates it (the same attributes), so that the tests decode
//! with prost's real decoder without needing `protoc` at build time.

/// `orders.v1.GetOrderRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetOrderRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub r#ref: Option<Ref>,
    #[prost(bytes = "vec", tag = "3")]
    pub note: Vec<u8>,
    #[prost(uint64, tag = "4")]
    pub version: u64,
    #[prost(fixed64, tag = "5")]
    pub stamp: u64,
    #[prost(fixed32, tag = "6")]
    pub small: u32,
}

/// `orders.v1.Ref`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Ref {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(uint32, tag = "2")]
    pub shard: u32,
    #[prost(message, optional, boxed, tag = "3")]
    pub parent: Option<Box<Ref>>,
}

/// Protobuf wire-format pieces, written by hand so that a test can repeat, split and reorder
/// fields as a real encoder never would (but any decoder must accept).
pub mod wire {
    /// A varint (protobuf encoding, "Base 128 Varints").
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A field key: number and wire type.
    pub fn key(out: &mut Vec<u8>, number: u32, wire: u8) {
        varint(out, (u64::from(number) << 3) | u64::from(wire));
    }

    /// A length-delimited field (string, bytes, embedded message).
    pub fn bytes(out: &mut Vec<u8>, number: u32, value: &[u8]) {
        key(out, number, 2);
        varint(out, value.len() as u64);
        out.extend_from_slice(value);
    }

    /// A varint field.
    pub fn uint(out: &mut Vec<u8>, number: u32, value: u64) {
        key(out, number, 0);
        varint(out, value);
    }
}

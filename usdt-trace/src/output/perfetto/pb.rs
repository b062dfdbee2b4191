//! Protobuf wire encoding: just what the trace needs.

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, ((field as u64) << 3) | wire as u64);
}

/// uint32/uint64/enum/bool fields.
pub fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    varint(out, v);
}

/// int32/int64 fields: two's complement as a 10-byte varint when negative.
pub fn int(out: &mut Vec<u8>, field: u32, v: i64) {
    uint(out, field, v as u64);
}

pub fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A `string` field: protobuf requires UTF-8, and bytes from traced processes may not be.
pub fn string(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(_) => bytes(out, field, b),
        Err(_) => bytes(out, field, String::from_utf8_lossy(b).as_bytes()),
    }
}

/// A nested message, encoded by `f` after a length prefix patched in afterwards.
pub fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, 2);
    let mut inner = Vec::new();
    f(&mut inner);
    varint(out, inner.len() as u64);
    out.extend_from_slice(&inner);
}

//! A message's fields as they lie in its bytes, read in place (the way Perfetto's own
//! protozero decoder reads a trace): no message is built, a string is a slice of the
//! packet. prost's encoding functions read the keys and varints.
use prost::encoding::{decode_key, decode_varint, WireType};

/// One field's value as encoded; what it means is the schema's to say.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    /// A varint or fixed-width value as an unsigned integer (0 for bytes: a field of
    /// another wire type than its declaration, which protobuf readers skip).
    pub fn uint(self) -> u64 {
        match self {
            Value::Varint(v) | Value::Fixed64(v) => v,
            Value::Fixed32(v) => v.into(),
            Value::Bytes(_) => 0,
        }
    }

    /// An `int32`/`int64` field: two's complement in the varint's 64 bits.
    pub fn int(self) -> i64 {
        self.uint() as i64
    }

    pub fn bytes(self) -> &'a [u8] {
        match self {
            Value::Bytes(b) => b,
            _ => &[],
        }
    }
}

/// A message that does not decode: a key or varint cut off, a length past its end, a
/// group (proto2 groups are not used by Perfetto).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

/// The fields of one encoded message, in their order in the bytes.
pub struct Fields<'a> {
    rest: &'a [u8],
}

pub fn fields(message: &[u8]) -> Fields<'_> {
    Fields { rest: message }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let read = next_field(&mut self.rest);
        if read.is_err() {
            self.rest = &[]; // nothing after a broken field can be framed
        }
        Some(read)
    }
}

fn next_field<'a>(buf: &mut &'a [u8]) -> Result<(u32, Value<'a>), Malformed> {
    let broken = |e: prost::DecodeError| Malformed(e.to_string());
    let (number, wire) = decode_key(buf).map_err(broken)?;
    let value = match wire {
        WireType::Varint => Value::Varint(decode_varint(buf).map_err(broken)?),
        WireType::SixtyFourBit => {
            Value::Fixed64(u64::from_le_bytes(take(buf, 8)?.try_into().unwrap()))
        }
        WireType::ThirtyTwoBit => {
            Value::Fixed32(u32::from_le_bytes(take(buf, 4)?.try_into().unwrap()))
        }
        WireType::LengthDelimited => {
            let length = decode_varint(buf).map_err(broken)?;
            Value::Bytes(take(buf, usize::try_from(length).unwrap_or(usize::MAX))?)
        }
        WireType::StartGroup | WireType::EndGroup => {
            return Err(Malformed(format!("field {number} is a group")))
        }
    };
    Ok((number, value))
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if n > buf.len() {
        return Err(Malformed(format!(
            "a field of {n} bytes with {} left in its message",
            buf.len()
        )));
    }
    let (taken, rest) = buf.split_at(n);
    *buf = rest;
    Ok(taken)
}

/// The integers of a repeated scalar field, whether packed (one length-delimited run)
/// or not (one field each): readers must accept both.
pub fn push_ints(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), Malformed> {
    match value {
        Value::Bytes(mut run) => {
            while !run.is_empty() {
                out.push(decode_varint(&mut run).map_err(|e| Malformed(e.to_string()))?);
            }
        }
        scalar => out.push(scalar.uint()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_order_with_each_wire_type() {
        // 1: varint 150, 2: "hi", 3: fixed64 7, 4: fixed32 9
        let bytes = [
            0x08, 0x96, 0x01, 0x12, 2, b'h', b'i', 0x19, 7, 0, 0, 0, 0, 0, 0, 0, 0x25, 9, 0, 0, 0,
        ];
        let got: Vec<_> = fields(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            [
                (1, Value::Varint(150)),
                (2, Value::Bytes(b"hi")),
                (3, Value::Fixed64(7)),
                (4, Value::Fixed32(9))
            ]
        );
    }

    #[test]
    fn a_length_past_the_end_is_malformed_and_ends_the_fields() {
        let bytes = [0x12, 5, b'h', b'i'];
        let mut it = fields(&bytes);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn packed_and_unpacked_ints_read_alike() {
        let mut packed = Vec::new();
        push_ints(Value::Bytes(&[1, 0x96, 0x01, 3]), &mut packed).unwrap();
        let mut single = Vec::new();
        for v in [1, 150, 3] {
            push_ints(Value::Varint(v), &mut single).unwrap();
        }
        assert_eq!(packed, [1, 150, 3]);
        assert_eq!(single, packed);
    }
}

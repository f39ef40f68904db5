//! The protobuf wire format, read defensively: a cursor over a byte slice that yields
//! `(tag, value)` pairs and rejects truncated input, over-long varints and the deprecated
//! group wire types instead of guessing.

use super::ProtoError;

/// One field's raw value as it sits on the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WireValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl WireValue<'_> {
    /// The wire type's name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            WireValue::Varint(_) => "varint",
            WireValue::Fixed64(_) => "fixed64",
            WireValue::Bytes(_) => "length-delimited",
            WireValue::Fixed32(_) => "fixed32",
        }
    }
}

/// Highest field number protobuf allows (2^29 - 1).
const MAX_TAG: u64 = (1 << 29) - 1;

/// A forward-only reader over one message's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte has been read.
    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Reads a base-128 varint of at most 10 bytes; the tenth byte may only carry one bit.
    pub fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(ProtoError::malformed("truncated varint"));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(ProtoError::malformed("varint overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtoError::malformed("varint longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| ProtoError::malformed("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// The next field, or `None` at the end of the message.
    pub fn field(&mut self) -> Result<Option<(u32, WireValue<'a>)>, ProtoError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = key >> 3;
        if tag == 0 || tag > MAX_TAG {
            return Err(ProtoError::malformed(format!("invalid field number {tag}")));
        }
        // MAX_TAG fits in u32.
        let tag = tag as u32;
        let value = match key & 7 {
            0 => WireValue::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                WireValue::Fixed64(u64::from_le_bytes([
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]))
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len)
                    .map_err(|_| ProtoError::malformed("length-delimited field too long"))?;
                WireValue::Bytes(self.take(len)?)
            }
            5 => {
                let b = self.take(4)?;
                WireValue::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            other => {
                return Err(ProtoError::malformed(format!(
                    "unsupported wire type {other} for field {tag}"
                )))
            }
        };
        Ok(Some((tag, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        assert_eq!(Reader::new(&[0x96, 0x01]).varint().unwrap(), 150);
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Reader::new(&max).varint().unwrap(), u64::MAX);
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Reader::new(&overflow).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[]).varint().is_err());
    }

    #[test]
    fn fields_and_truncation() {
        // field 1 varint 5, field 2 bytes "ab", field 3 fixed32, field 4 fixed64
        let mut buf = vec![0x08, 5, 0x12, 2, b'a', b'b', 0x1d, 1, 0, 0, 0, 0x21];
        buf.extend_from_slice(&7u64.to_le_bytes());
        let mut r = Reader::new(&buf);
        assert_eq!(r.field().unwrap(), Some((1, WireValue::Varint(5))));
        assert_eq!(r.field().unwrap(), Some((2, WireValue::Bytes(b"ab"))));
        assert_eq!(r.field().unwrap(), Some((3, WireValue::Fixed32(1))));
        assert_eq!(r.field().unwrap(), Some((4, WireValue::Fixed64(7))));
        assert_eq!(r.field().unwrap(), None);
        for cut in 1..buf.len() {
            let mut r = Reader::new(&buf[..cut]);
            let mut failed = false;
            while let Ok(Some(_)) | Err(_) = r.field().map_err(|_| failed = true) {
                if failed {
                    break;
                }
            }
            // Every cut except at a field boundary must be reported.
            if ![2, 6, 11].contains(&cut) {
                assert!(failed, "cut at {cut} not detected");
            }
        }
        // A length far beyond the buffer, groups and field 0 are errors.
        assert!(Reader::new(&[0x12, 0xff, 0xff, 0xff, 0x7f])
            .field()
            .is_err());
        assert!(Reader::new(&[0x0b]).field().is_err());
        assert!(Reader::new(&[0x00, 0x00]).field().is_err());
    }
}

//! The CRC-framed record format used by `objects.wal`, Raft log segments and snapshots.
//!
//! Every record starts at an 8-byte aligned offset, so a record's header never straddles a
//! sector boundary in a way that can tear its length (the same reasoning as etcd's WAL):
//!
//! ```text
//! offset  size  field
//! 0       4     payload length, u32 little-endian
//! 4       1     record type (never 0: a zero type byte marks unwritten, zero-filled space)
//! 5       3     reserved, zero
//! 8       4     crc32 (IEEE, crc32fast) over the type byte followed by the payload
//! 12      n     payload
//! 12+n    pad   zero bytes up to the next multiple of 8
//! ```
//!
//! A header that is all zero is the end of the written data (preallocated space). Anything
//! else that does not decode is either a torn tail or corruption; which one it is depends on
//! whether valid records follow, a decision the owner of the file makes (see
//! [`scan_for_valid_record`]).

/// Bytes of header before the payload.
pub const HEADER_LEN: usize = 12;
/// Largest payload a record may carry (64 MiB); anything larger is treated as corruption.
pub const MAX_PAYLOAD: usize = 64 << 20;

/// Total on-disk size of a record with a payload of `payload_len` bytes.
pub fn framed_len(payload_len: usize) -> usize {
    (HEADER_LEN + payload_len + 7) & !7
}

/// Appends one framed record to `out`. `record_type` must not be 0.
pub fn encode_into(out: &mut Vec<u8>, record_type: u8, payload: &[u8]) {
    debug_assert_ne!(
        record_type, 0,
        "record type 0 is reserved for unwritten space"
    );
    let start = out.len();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.push(record_type);
    out.extend_from_slice(&[0u8; 3]);
    out.extend_from_slice(&checksum(record_type, payload).to_le_bytes());
    out.extend_from_slice(payload);
    let total = framed_len(payload.len());
    out.resize(start + total, 0);
}

/// Appends one framed record whose payload `fill` appends straight to `out`, so a large
/// payload is never built in a buffer of its own and copied. `fill` must only append; if it
/// fails, `out` is left as it was.
pub fn encode_in_place<E>(
    out: &mut Vec<u8>,
    record_type: u8,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    debug_assert_ne!(
        record_type, 0,
        "record type 0 is reserved for unwritten space"
    );
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    if let Err(e) = fill(out) {
        out.truncate(start);
        return Err(e);
    }
    let payload_len = out.len() - start - HEADER_LEN;
    let crc = checksum(record_type, &out[start + HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[start + 4] = record_type;
    out[start + 8..start + HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    out.resize(start + framed_len(payload_len), 0);
    Ok(())
}

/// Encodes one record into a new buffer.
pub fn encode(record_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(framed_len(payload.len()));
    encode_into(&mut out, record_type, payload);
    out
}

fn checksum(record_type: u8, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&[record_type]);
    hasher.update(payload);
    hasher.finalize()
}

/// What was found at an offset of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole, checksummed record; the next one starts at `next`.
    Record {
        record_type: u8,
        payload: &'a [u8],
        next: usize,
    },
    /// An all-zero header, or the buffer ends exactly here: no more records.
    End,
    /// Something that is not a valid record starts here.
    Invalid(InvalidRecord),
}

/// Why the bytes at an offset are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRecord {
    #[error("record header cut short ({available} of {HEADER_LEN} bytes)")]
    ShortHeader { available: usize },
    #[error("record of {needed} bytes runs past the end of the data ({available} bytes left)")]
    ShortRecord { needed: usize, available: usize },
    #[error("record type is 0 but the header is not all zero")]
    ZeroType,
    #[error("record length {0} is larger than the {MAX_PAYLOAD}-byte limit")]
    TooLarge(usize),
    #[error("reserved header bytes are not zero")]
    BadReserved,
    #[error("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
}

/// Decodes the record at `offset` (which must be 8-byte aligned) in `buf`.
pub fn decode_at(buf: &[u8], offset: usize) -> Decoded<'_> {
    let rest = buf.get(offset..).unwrap_or(&[]);
    if rest.is_empty() {
        return Decoded::End;
    }
    if rest.len() < HEADER_LEN {
        if rest.iter().all(|b| *b == 0) {
            return Decoded::End;
        }
        return Decoded::Invalid(InvalidRecord::ShortHeader {
            available: rest.len(),
        });
    }
    let header = &rest[..HEADER_LEN];
    if header.iter().all(|b| *b == 0) {
        return Decoded::End;
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let record_type = header[4];
    if record_type == 0 {
        return Decoded::Invalid(InvalidRecord::ZeroType);
    }
    if header[5..8] != [0, 0, 0] {
        return Decoded::Invalid(InvalidRecord::BadReserved);
    }
    if len > MAX_PAYLOAD {
        return Decoded::Invalid(InvalidRecord::TooLarge(len));
    }
    let total = framed_len(len);
    if rest.len() < total {
        return Decoded::Invalid(InvalidRecord::ShortRecord {
            needed: total,
            available: rest.len(),
        });
    }
    let stored = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    let payload = &rest[HEADER_LEN..HEADER_LEN + len];
    let computed = checksum(record_type, payload);
    if stored != computed {
        return Decoded::Invalid(InvalidRecord::Checksum { stored, computed });
    }
    Decoded::Record {
        record_type,
        payload,
        next: offset + total,
    }
}

/// Looks for any valid record at an 8-byte aligned offset after `from`. Used to tell a torn
/// tail (nothing valid after the bad record: safe to truncate) from corruption in the middle
/// of the data (valid records follow: refuse to open). Returns the offset of the first one.
pub fn scan_for_valid_record(buf: &[u8], from: usize) -> Option<usize> {
    let mut offset = (from + 8) & !7;
    while offset + HEADER_LEN <= buf.len() {
        if let Decoded::Record { .. } = decode_at(buf, offset) {
            return Some(offset);
        }
        offset += 8;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_alignment() {
        let mut buf = Vec::new();
        for (t, p) in [(1u8, &b""[..]), (2, b"hello"), (3, &[7u8; 13][..])] {
            encode_into(&mut buf, t, p);
            assert_eq!(buf.len() % 8, 0);
        }
        let mut offset = 0;
        let mut seen = Vec::new();
        while let Decoded::Record {
            record_type,
            payload,
            next,
        } = decode_at(&buf, offset)
        {
            seen.push((record_type, payload.to_vec()));
            offset = next;
        }
        assert_eq!(decode_at(&buf, offset), Decoded::End);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1], (2, b"hello".to_vec()));
    }

    #[test]
    fn in_place_encoding_is_byte_identical_and_undone_on_error() {
        for payload in [&b""[..], b"x", b"exactly8", &[9u8; 21][..]] {
            let mut in_place = b"prefix".to_vec();
            encode_in_place(&mut in_place, 4, |out| {
                out.extend_from_slice(payload);
                Ok::<(), ()>(())
            })
            .unwrap();
            let mut copied = b"prefix".to_vec();
            encode_into(&mut copied, 4, payload);
            assert_eq!(in_place, copied);
        }
        let mut buf = b"keep".to_vec();
        let failed = encode_in_place(&mut buf, 4, |out| {
            out.extend_from_slice(b"partial");
            Err("no")
        });
        assert_eq!((failed, buf), (Err("no"), b"keep".to_vec()));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let buf = encode(5, b"a payload of some length");
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut broken = buf.clone();
                broken[byte] ^= 1 << bit;
                match decode_at(&broken, 0) {
                    Decoded::Record { payload, .. } => {
                        // Only flips inside the zero padding can go unnoticed, and they must
                        // not change the payload.
                        assert!(byte >= HEADER_LEN + 24, "flip at {byte} undetected");
                        assert_eq!(payload, b"a payload of some length");
                    }
                    Decoded::End | Decoded::Invalid(_) => {}
                }
            }
        }
    }

    #[test]
    fn zeros_are_end_and_truncation_is_short() {
        assert_eq!(decode_at(&[0u8; 64], 0), Decoded::End);
        let buf = encode(1, b"0123456789");
        for cut in 1..buf.len() {
            assert!(matches!(decode_at(&buf[..cut], 0), Decoded::Invalid(_)));
        }
    }
}

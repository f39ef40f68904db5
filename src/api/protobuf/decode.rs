//! Protobuf message bytes → `serde_json::Value`, driven by the descriptor table: scalars by
//! their declared type, maps as JSON objects, repeated fields as arrays, embedded structs
//! inlined, and the apimachinery special types in their JSON forms. Nesting depth and the
//! number of decoded values are bounded so a hostile body costs bounded stack and memory.

use base64::Engine;
use serde_json::{Map, Number, Value};

use super::descriptor::{Field, Kind, Table, INLINE, OMIT_ZERO, REPEATED};
use super::wire::{Reader, WireValue};
use super::ProtoError;

/// Deepest message nesting accepted.
pub const MAX_DEPTH: usize = 64;

/// Most JSON values one body may decode into (each costs at least one wire byte, but empty
/// messages cost a JSON object each, so memory is bounded here rather than by body size).
pub const MAX_VALUES: usize = 500_000;

/// Decodes one message of type `message` (an index into `table`).
pub fn message(table: &Table, message: u32, bytes: &[u8]) -> Result<Value, ProtoError> {
    let mut decoder = Decoder { table, values: 0 };
    decoder.message(message, bytes, 0).map(Value::Object)
}

struct Decoder<'t> {
    table: &'t Table,
    values: usize,
}

impl Decoder<'_> {
    fn count(&mut self) -> Result<(), ProtoError> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(ProtoError::malformed(format!(
                "the body decodes to more than {MAX_VALUES} values"
            )));
        }
        Ok(())
    }

    fn message(
        &mut self,
        index: u32,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Map<String, Value>, ProtoError> {
        if depth >= MAX_DEPTH {
            return Err(ProtoError::malformed(format!(
                "protobuf messages are nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let Some(message) = self.table.messages.get(index as usize) else {
            return Err(ProtoError::malformed("descriptor table is inconsistent"));
        };
        let mut out = Map::new();
        let mut reader = Reader::new(bytes);
        while let Some((tag, wire)) = reader.field()? {
            self.count()?;
            // Unknown fields are skipped: newer clients may send fields we do not know yet.
            let Some(field) = message.field(tag) else {
                continue;
            };
            if let Some(value_kind) = field.map_value {
                let (key, value) = self.map_entry(field, value_kind, wire, depth)?;
                let entry = out
                    .entry(field.name.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = entry {
                    map.insert(key, value);
                }
            } else if field.flags & REPEATED != 0 {
                let mut items = Vec::new();
                match (wire, packable(field.kind)) {
                    (WireValue::Bytes(packed), true) => {
                        let mut inner = PackedReader::new(packed, field.kind);
                        while let Some(item) = inner.next()? {
                            self.count()?;
                            items.push(self.value(field, item, depth)?);
                        }
                    }
                    _ => items.push(self.value(field, wire, depth)?),
                }
                let entry = out
                    .entry(field.name.to_string())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(array) = entry {
                    array.extend(items);
                }
            } else if field.flags & INLINE != 0 {
                match self.value(field, wire, depth)? {
                    Value::Object(inner) => out.extend(inner),
                    _ => return Err(ProtoError::malformed("inline field is not a message")),
                }
            } else {
                let value = self.value(field, wire, depth)?;
                if field.flags & OMIT_ZERO != 0 && is_zero(&value) {
                    out.remove(&*field.name);
                } else {
                    out.insert(field.name.to_string(), value);
                }
            }
        }
        Ok(out)
    }

    /// One `map<K, V>` entry: a message with the key as field 1 and the value as field 2.
    fn map_entry(
        &mut self,
        field: &Field,
        value_kind: Kind,
        wire: WireValue<'_>,
        depth: usize,
    ) -> Result<(String, Value), ProtoError> {
        let WireValue::Bytes(bytes) = wire else {
            return Err(mismatch(field, wire));
        };
        let mut key = None;
        let mut value = None;
        let mut reader = Reader::new(bytes);
        while let Some((tag, wire)) = reader.field()? {
            match tag {
                1 => key = Some(self.scalar(field, field.kind, wire, depth)?),
                2 => value = Some(self.scalar(field, value_kind, wire, depth)?),
                _ => {}
            }
        }
        let key = match key {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let value = match value {
            Some(v) => v,
            None => zero(value_kind),
        };
        Ok((key, value))
    }

    fn value(
        &mut self,
        field: &Field,
        wire: WireValue<'_>,
        depth: usize,
    ) -> Result<Value, ProtoError> {
        self.scalar(field, field.kind, wire, depth)
    }

    fn scalar(
        &mut self,
        field: &Field,
        kind: Kind,
        wire: WireValue<'_>,
        depth: usize,
    ) -> Result<Value, ProtoError> {
        Ok(match (kind, wire) {
            (Kind::String, WireValue::Bytes(b)) => {
                Value::String(String::from_utf8_lossy(b).into_owned())
            }
            (Kind::Bytes, WireValue::Bytes(b)) => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (Kind::Bool, WireValue::Varint(v)) => Value::Bool(v != 0),
            // Negative int32s are sign-extended to 64 bits on the wire; truncation is intended.
            (Kind::Int32, WireValue::Varint(v)) => Value::from(v as i64 as i32),
            (Kind::Int64, WireValue::Varint(v)) => Value::from(v as i64),
            (Kind::Uint32, WireValue::Varint(v)) => Value::from(v as u32),
            (Kind::Uint64, WireValue::Varint(v)) => Value::from(v),
            (Kind::Double, WireValue::Fixed64(v)) => float(f64::from_bits(v))?,
            (Kind::Float, WireValue::Fixed32(v)) => float(f64::from(f32::from_bits(v)))?,
            (Kind::Message(index), WireValue::Bytes(b)) => {
                Value::Object(self.message(index, b, depth + 1)?)
            }
            (Kind::Time, WireValue::Bytes(b)) => super::special::time(b, false)?,
            (Kind::MicroTime, WireValue::Bytes(b)) => super::special::time(b, true)?,
            (Kind::Duration, WireValue::Bytes(b)) => super::special::duration(b)?,
            (Kind::Quantity, WireValue::Bytes(b)) => super::special::quantity(b)?,
            (Kind::IntOrString, WireValue::Bytes(b)) => super::special::int_or_string(b)?,
            (Kind::RawExtension | Kind::FieldsV1, WireValue::Bytes(b)) => {
                super::special::embedded_json(b)?
            }
            (_, wire) => return Err(mismatch(field, wire)),
        })
    }
}

fn mismatch(field: &Field, wire: WireValue<'_>) -> ProtoError {
    ProtoError::malformed(format!(
        "field {} ({}) has unexpected wire type {}",
        field.tag,
        field.name,
        wire.type_name()
    ))
}

fn float(f: f64) -> Result<Value, ProtoError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| ProtoError::malformed("a floating-point field is not finite"))
}

/// Whether repeated values of this kind may arrive packed into one length-delimited field.
fn packable(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Bool
            | Kind::Int32
            | Kind::Int64
            | Kind::Uint32
            | Kind::Uint64
            | Kind::Double
            | Kind::Float
    )
}

/// The JSON of a map value that is absent from its entry.
fn zero(kind: Kind) -> Value {
    match kind {
        Kind::String | Kind::Bytes => Value::String(String::new()),
        Kind::Bool => Value::Bool(false),
        Kind::Int32 | Kind::Int64 | Kind::Uint32 | Kind::Uint64 | Kind::IntOrString => {
            Value::from(0)
        }
        Kind::Double | Kind::Float => Value::from(0.0),
        Kind::Message(_) => Value::Object(Map::new()),
        Kind::Quantity => Value::String("0".into()),
        Kind::Duration => Value::String("0s".into()),
        Kind::Time | Kind::MicroTime | Kind::RawExtension | Kind::FieldsV1 => Value::Null,
    }
}

/// Go's `omitempty` zero values for the scalar JSON forms.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        // Go's omitempty never drops structs.
        Value::Object(_) => false,
    }
}

/// Reads the elements of a packed repeated scalar field.
struct PackedReader<'a> {
    reader: Reader<'a>,
    bytes: &'a [u8],
    pos: usize,
    kind: Kind,
}

impl<'a> PackedReader<'a> {
    fn new(bytes: &'a [u8], kind: Kind) -> PackedReader<'a> {
        PackedReader {
            reader: Reader::new(bytes),
            bytes,
            pos: 0,
            kind,
        }
    }

    fn next(&mut self) -> Result<Option<WireValue<'a>>, ProtoError> {
        let width = match self.kind {
            Kind::Double => 8,
            Kind::Float => 4,
            _ => 0,
        };
        if width == 0 {
            if self.reader_done() {
                return Ok(None);
            }
            return self.reader.varint().map(|v| Some(WireValue::Varint(v)));
        }
        if self.pos >= self.bytes.len() {
            return Ok(None);
        }
        let chunk = self
            .bytes
            .get(self.pos..self.pos + width)
            .ok_or_else(|| ProtoError::malformed("truncated packed field"))?;
        self.pos += width;
        let mut buf = [0u8; 8];
        buf[..width].copy_from_slice(chunk);
        Ok(Some(if width == 8 {
            WireValue::Fixed64(u64::from_le_bytes(buf))
        } else {
            WireValue::Fixed32(u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]))
        }))
    }

    fn reader_done(&self) -> bool {
        self.reader.at_end()
    }
}

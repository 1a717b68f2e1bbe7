//! The part of Avro that Iceberg's manifests and manifest lists need: binary encoding of
//! records, unions, arrays, strings and bytes, in an object container file (one block, no
//! codec); and reading such a file back under a known schema (a manifest merged or
//! rewritten is read first). Every length read is bounded by the bytes left.

/// An Avro value, as the schema it is written under says.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Int(i32),
    Long(i64),
    Bytes(Vec<u8>),
    String(String),
    /// A union's branch (its index in the union) and value.
    Union(u32, Box<Value>),
    /// A record's fields, in the schema's order.
    Record(Vec<Value>),
    Array(Vec<Value>),
}

fn zigzag(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    zigzag(out, b.len() as i64);
    out.extend_from_slice(b);
}

impl Value {
    /// Appends the value's binary encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => {}
            Value::Boolean(b) => out.push(u8::from(*b)),
            Value::Int(n) => zigzag(out, i64::from(*n)),
            Value::Long(n) => zigzag(out, *n),
            Value::Bytes(b) => bytes(out, b),
            Value::String(s) => bytes(out, s.as_bytes()),
            Value::Union(i, v) => {
                zigzag(out, i64::from(*i));
                v.encode(out);
            }
            Value::Record(fields) => fields.iter().for_each(|f| f.encode(out)),
            Value::Array(items) => {
                if !items.is_empty() {
                    zigzag(out, items.len() as i64);
                    items.iter().for_each(|i| i.encode(out));
                }
                zigzag(out, 0);
            }
        }
    }

    /// `Some(v)` as the second branch of a `["null", T]` union, `None` as the first.
    pub fn optional(v: Option<Value>) -> Value {
        match v {
            None => Value::Union(0, Box::new(Value::Null)),
            Some(v) => Value::Union(1, Box::new(v)),
        }
    }
}

/// An object container file: `schema` (JSON), `metadata` (more header entries), `records`
/// in one block, and `sync` as its sync marker (derive it from the file's name, so writing
/// the same file twice gives the same bytes).
pub fn container(
    schema: &str,
    metadata: &[(&str, String)],
    records: &[Value],
    sync: [u8; 16],
) -> Vec<u8> {
    let mut out = b"Obj\x01".to_vec();
    let mut meta: Vec<(&str, &[u8])> =
        vec![("avro.schema", schema.as_bytes()), ("avro.codec", b"null")];
    meta.extend(metadata.iter().map(|(k, v)| (*k, v.as_bytes())));
    zigzag(&mut out, meta.len() as i64);
    for (k, v) in meta {
        bytes(&mut out, k.as_bytes());
        bytes(&mut out, v);
    }
    zigzag(&mut out, 0);
    out.extend_from_slice(&sync);
    if !records.is_empty() {
        let mut block = Vec::new();
        records.iter().for_each(|r| r.encode(&mut block));
        zigzag(&mut out, records.len() as i64);
        zigzag(&mut out, block.len() as i64);
        out.extend_from_slice(&block);
        out.extend_from_slice(&sync);
    }
    out
}

/// A container file's records could not be read.
#[derive(Debug, thiserror::Error)]
#[error("avro: {0}")]
pub struct DecodeError(String);

fn bad(m: impl Into<String>) -> DecodeError {
    DecodeError(m.into())
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn long(&mut self) -> Result<i64, DecodeError> {
        let mut z = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = *self.b.get(self.at).ok_or_else(|| bad("a number runs past the end"))?;
            self.at += 1;
            z |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(bad("a number longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.left() {
            return Err(bad(format!("{n} bytes asked, {} left", self.left())));
        }
        let out = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.long()?;
        usize::try_from(n).map_err(|_| bad(format!("a length of {n}")))
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.len()?;
        self.take(n)
    }

    /// A block's item count (a negative count is followed by the block's byte size).
    fn block(&mut self) -> Result<usize, DecodeError> {
        let n = self.long()?;
        if n < 0 {
            self.long()?;
        }
        let n = usize::try_from(n.unsigned_abs()).map_err(|_| bad("a block count"))?;
        // Every item takes a byte at least, but for nulls: bounded either way.
        if n > self.left() + 1024 {
            return Err(bad(format!("a block of {n} items in {} bytes", self.left())));
        }
        Ok(n)
    }

    fn value(&mut self, schema: &serde_json::Value, depth: u32) -> Result<Value, DecodeError> {
        use serde_json::Value as J;
        if depth > 32 {
            return Err(bad("a schema nested over 32 deep"));
        }
        Ok(match schema {
            J::String(t) => self.primitive(t)?,
            J::Array(branches) => {
                let i = self.long()?;
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| branches.get(i))
                    .ok_or_else(|| bad(format!("union branch {i} of {}", branches.len())))?;
                Value::Union(i as u32, Box::new(self.value(branch, depth + 1)?))
            }
            J::Object(o) => match o.get("type") {
                Some(J::String(t)) if t == "record" => {
                    let fields = o
                        .get("fields")
                        .and_then(J::as_array)
                        .ok_or_else(|| bad("a record without fields"))?;
                    let mut out = Vec::with_capacity(fields.len());
                    for f in fields {
                        let ty = f.get("type").ok_or_else(|| bad("a field without a type"))?;
                        out.push(self.value(ty, depth + 1)?);
                    }
                    Value::Record(out)
                }
                Some(J::String(t)) if t == "array" => {
                    let items = o.get("items").ok_or_else(|| bad("an array without items"))?;
                    let mut out = Vec::new();
                    loop {
                        let n = self.block()?;
                        if n == 0 {
                            break;
                        }
                        for _ in 0..n {
                            out.push(self.value(items, depth + 1)?);
                        }
                    }
                    Value::Array(out)
                }
                Some(J::String(t)) => self.primitive(t)?,
                Some(inner) => self.value(inner, depth + 1)?,
                None => return Err(bad("a schema without a type")),
            },
            other => return Err(bad(format!("schema {other}"))),
        })
    }

    fn primitive(&mut self, t: &str) -> Result<Value, DecodeError> {
        Ok(match t {
            "null" => Value::Null,
            "boolean" => Value::Boolean(self.take(1)?[0] != 0),
            "int" => {
                Value::Int(i32::try_from(self.long()?).map_err(|_| bad("an int out of range"))?)
            }
            "long" => Value::Long(self.long()?),
            "bytes" => Value::Bytes(self.bytes()?.to_vec()),
            "string" => Value::String(
                String::from_utf8(self.bytes()?.to_vec()).map_err(|_| bad("a string not UTF-8"))?,
            ),
            other => return Err(bad(format!("type {other}"))),
        })
    }
}

/// The records of an object container file written under `schema` (its own schema is not
/// read: Lakelog reads only files it wrote); no codec but `null`. A file cut between blocks
/// reads as fewer records: callers check the count they expect.
pub fn read_container(bytes: &[u8], schema: &str) -> Result<Vec<Value>, DecodeError> {
    let schema: serde_json::Value =
        serde_json::from_str(schema).map_err(|e| bad(format!("the schema: {e}")))?;
    let mut r = Reader { b: bytes, at: 0 };
    if r.take(4)? != b"Obj\x01" {
        return Err(bad("not an object container file"));
    }
    loop {
        let n = r.block()?;
        if n == 0 {
            break;
        }
        for _ in 0..n {
            let key = r.bytes()?;
            let value = r.bytes()?;
            if key == b"avro.codec" && value != b"null" {
                return Err(bad(format!("codec {}", String::from_utf8_lossy(value))));
            }
        }
    }
    let sync = r.take(16)?;
    let mut out = Vec::new();
    while r.left() > 0 {
        let n = r.block()?;
        let size = r.len()?;
        let block = r.take(size)?;
        let mut inner = Reader { b: block, at: 0 };
        for _ in 0..n {
            out.push(inner.value(&schema, 0)?);
        }
        if inner.left() != 0 || r.take(16)? != sync {
            return Err(bad("a block that does not end at its sync marker"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_reads_back_its_records_and_refuses_damage() {
        let schema = r#"{"type":"record","name":"r","fields":[
            {"name":"a","type":"int"},{"name":"b","type":["null","string"]},
            {"name":"c","type":{"type":"array","items":"long"}},
            {"name":"d","type":{"type":"int","logicalType":"date"}},
            {"name":"e","type":"bytes"},{"name":"f","type":"boolean"}]}"#;
        let records: Vec<Value> = (0..5)
            .map(|i| {
                Value::Record(vec![
                    Value::Int(i - 2),
                    Value::optional((i % 2 == 0).then(|| Value::String(format!("s{i}")))),
                    Value::Array((0..i).map(|n| Value::Long(i64::from(n) << 40)).collect()),
                    Value::Int(19_000 + i),
                    Value::Bytes(vec![i as u8; i as usize]),
                    Value::Boolean(i == 3),
                ])
            })
            .collect();
        let file = container(schema, &[("k", "v".to_owned())], &records, [7; 16]);
        assert_eq!(read_container(&file, schema).unwrap(), records);
        assert_eq!(read_container(&container(schema, &[], &[], [1; 16]), schema).unwrap(), vec![]);
        // Cut short anywhere: an error, or (cut between blocks) fewer records, which the
        // caller's count finds; its sync marker damaged: an error.
        for n in 0..file.len() {
            if let Ok(r) = read_container(&file[..n], schema) {
                assert!(r.len() < records.len(), "cut at {n}");
            }
        }
        let mut bad = file.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(read_container(&bad, schema).is_err());
        // A huge block count is refused before anything is allocated for it.
        let mut huge = file[..file.len() - 16 - 1].to_vec();
        huge.truncate(4);
        huge.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert!(read_container(&huge, schema).is_err());
    }

    #[test]
    fn values_encode_as_the_avro_spec_says() {
        let mut out = Vec::new();
        for n in [0i64, -1, 1, -64, 64, 1 << 40] {
            Value::Long(n).encode(&mut out);
        }
        assert_eq!(out, [0x00, 0x01, 0x02, 0x7f, 0x80, 0x01, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40]);
        let mut out = Vec::new();
        Value::Record(vec![
            Value::String("ab".into()),
            Value::optional(None),
            Value::optional(Some(Value::Int(3))),
            Value::Array(vec![Value::Long(1), Value::Long(2)]),
            Value::Array(vec![]),
            Value::Boolean(true),
        ])
        .encode(&mut out);
        assert_eq!(out, [4, b'a', b'b', 0, 2, 6, 4, 2, 4, 0, 0, 1]);
    }
}

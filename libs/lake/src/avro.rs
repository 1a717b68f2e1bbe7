//! The part of Avro that Iceberg's manifests and manifest lists need: binary encoding of
//! records, unions, arrays, strings and bytes, in an object container file (one block, no
//! codec). Written only; Lakelog reads its own table state from the metadata store.

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

#[cfg(test)]
mod tests {
    use super::*;

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

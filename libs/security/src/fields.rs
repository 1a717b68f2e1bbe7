//! Reads one top-level field of a protobuf message as its bytes stream past, without holding
//! the message: the gRPC front end authorizes a request by the resource its field 1 names (a
//! log id, a stream name) before the service sees it. Protobuf lets a field repeat and the
//! last value wins, so the whole message is scanned and the last value kept, as the service's
//! decoder will read it; the values of a repeated message field are all kept.

/// What one field of a message held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Field {
    /// Its last varint value.
    pub varint: Option<u64>,
    /// Its length-delimited values (a string's last value is the last of these), in order.
    pub bytes: Vec<Vec<u8>>,
}

impl Field {
    /// The last length-delimited value as text (a stream name).
    pub fn text(&self) -> Option<String> {
        self.bytes.last().map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

/// Why a message could not be read to the end.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("malformed protobuf message")]
    Malformed,
    #[error("field values over {0} bytes")]
    TooLarge(usize),
}

#[derive(Clone, Debug)]
enum State {
    /// Reading a tag varint.
    Tag { acc: u64, shift: u32 },
    /// Reading a varint value (kept if it is the field's).
    Varint { keep: bool, acc: u64, shift: u32 },
    /// Reading a length varint.
    Len { keep: bool, acc: u64, shift: u32 },
    /// Skipping bytes.
    Skip(u64),
    /// Keeping the field's bytes, this many still to come.
    Keep(u64),
}

/// Scans a message for field `number` (see the module doc), holding at most `cap` bytes of
/// its values.
#[derive(Clone, Debug)]
pub struct FieldScanner {
    number: u64,
    cap: usize,
    kept: usize,
    state: State,
    field: Field,
}

impl FieldScanner {
    pub fn new(number: u32, cap: usize) -> Self {
        FieldScanner {
            number: u64::from(number),
            cap,
            kept: 0,
            state: State::Tag { acc: 0, shift: 0 },
            field: Field::default(),
        }
    }

    /// Takes the next bytes of the message.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), FieldError> {
        while !data.is_empty() {
            match &mut self.state {
                State::Tag { acc, shift }
                | State::Varint { acc, shift, .. }
                | State::Len { acc, shift, .. } => {
                    let b = data[0];
                    data = &data[1..];
                    if *shift > 63 {
                        return Err(FieldError::Malformed);
                    }
                    *acc |= u64::from(b & 0x7f) << *shift;
                    *shift += 7;
                    if b & 0x80 == 0 {
                        let value = *acc;
                        self.state = match std::mem::replace(&mut self.state, State::Skip(0)) {
                            State::Tag { .. } => self.after_tag(value)?,
                            State::Varint { keep, .. } => {
                                if keep {
                                    self.field.varint = Some(value);
                                }
                                State::Tag { acc: 0, shift: 0 }
                            }
                            State::Len { keep, .. } if keep => {
                                let n =
                                    usize::try_from(value).map_err(|_| FieldError::Malformed)?;
                                self.kept = self.kept.saturating_add(n);
                                if self.kept > self.cap {
                                    return Err(FieldError::TooLarge(self.cap));
                                }
                                self.field.bytes.push(Vec::with_capacity(n));
                                if n == 0 {
                                    State::Tag { acc: 0, shift: 0 }
                                } else {
                                    State::Keep(value)
                                }
                            }
                            State::Len { .. } if value == 0 => State::Tag { acc: 0, shift: 0 },
                            State::Len { .. } => State::Skip(value),
                            other => other,
                        };
                    }
                }
                State::Skip(n) => {
                    let take = usize::try_from(*n).unwrap_or(usize::MAX).min(data.len());
                    data = &data[take..];
                    *n -= take as u64;
                    if *n == 0 {
                        self.state = State::Tag { acc: 0, shift: 0 };
                    }
                }
                State::Keep(n) => {
                    let take = usize::try_from(*n).unwrap_or(usize::MAX).min(data.len());
                    if let Some(last) = self.field.bytes.last_mut() {
                        last.extend_from_slice(&data[..take]);
                    }
                    data = &data[take..];
                    *n -= take as u64;
                    if *n == 0 {
                        self.state = State::Tag { acc: 0, shift: 0 };
                    }
                }
            }
        }
        Ok(())
    }

    fn after_tag(&mut self, tag: u64) -> Result<State, FieldError> {
        let (number, wire) = (tag >> 3, tag & 7);
        if number == 0 {
            return Err(FieldError::Malformed);
        }
        let keep = number == self.number;
        Ok(match wire {
            0 => State::Varint { keep, acc: 0, shift: 0 },
            1 => State::Skip(8),
            2 => State::Len { keep, acc: 0, shift: 0 },
            5 => State::Skip(4),
            _ => return Err(FieldError::Malformed),
        })
    }

    /// The field, once the message ended where a field may end.
    pub fn finish(self) -> Result<Field, FieldError> {
        match self.state {
            State::Tag { shift: 0, .. } => Ok(self.field),
            _ => Err(FieldError::Malformed),
        }
    }
}

/// Field `number` of a whole message.
pub fn field_of(message: &[u8], number: u32, cap: usize) -> Result<Field, FieldError> {
    let mut s = FieldScanner::new(number, cap);
    s.feed(message)?;
    s.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn tag(n: u64, wire: u64, out: &mut Vec<u8>) {
        varint((n << 3) | wire, out);
    }

    fn bytes_field(n: u64, b: &[u8], out: &mut Vec<u8>) {
        tag(n, 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    #[test]
    fn the_last_value_of_a_repeated_field_is_read_in_any_split() -> Result<(), FieldError> {
        // log_id=7, payload, log_id=300 again (the decoder keeps 300), a fixed64 and a fixed32.
        let mut m = Vec::new();
        tag(1, 0, &mut m);
        varint(7, &mut m);
        bytes_field(3, &[9; 200], &mut m);
        tag(1, 0, &mut m);
        varint(300, &mut m);
        tag(4, 1, &mut m);
        m.extend_from_slice(&[1; 8]);
        tag(5, 5, &mut m);
        m.extend_from_slice(&[2; 4]);
        for split in 0..m.len() {
            let mut s = FieldScanner::new(1, 16);
            s.feed(&m[..split])?;
            s.feed(&m[split..])?;
            assert_eq!(s.finish()?.varint, Some(300), "split at {split}");
        }
        // A name given twice: the second is the one served.
        let mut m = Vec::new();
        bytes_field(1, b"public", &mut m);
        bytes_field(2, b"x", &mut m);
        bytes_field(1, b"secret", &mut m);
        assert_eq!(field_of(&m, 1, 1024)?.text().as_deref(), Some("secret"));
        Ok(())
    }

    #[test]
    fn truncated_malformed_and_oversized_messages_are_errors() {
        let mut m = Vec::new();
        bytes_field(1, &[0; 100], &mut m);
        assert_eq!(field_of(&m, 1, 99), Err(FieldError::TooLarge(99)));
        assert!(field_of(&m[..50], 1, 1000).is_err(), "truncated inside a value");
        assert_eq!(field_of(&[0x08], 1, 10), Err(FieldError::Malformed), "tag without value");
        assert_eq!(field_of(&[0x0b], 1, 10), Err(FieldError::Malformed), "wire type 3");
        assert_eq!(field_of(&[0x00], 1, 10), Err(FieldError::Malformed), "field 0");
        assert_eq!(
            field_of(
                &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                1,
                10
            ),
            Err(FieldError::Malformed)
        );
        assert_eq!(field_of(&[], 1, 10), Ok(Field::default()));
    }
}

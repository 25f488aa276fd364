//! Decoding answers: PostgreSQL's binary format, read by the adapter itself, whichever driver
//! carried the bytes.
//!
//! Both drivers hand over each column as its type's OID and its raw bytes (a [`Value`]); the
//! decoders here turn them into Rust values and the domain's, so that a lease or an event is
//! read the same way on every driver, and a driver's own type mapping (which differs: sqlx has
//! no `SystemTime`, and neither driver can name the prefixed composite the lease function
//! returns) never decides what an answer means.
//!
//! * [`Decode`] and its implementations: the scalar types the statements return;
//! * [`composite`]: one value of a composite type (the lease function's answer);
//! * [`lease`] and [`events`]: rows into leases, contenders, events and bookmarks.

use std::error::Error;

use tenure_ports::{EventStorageError, Timestamp};

pub(crate) mod composite;
pub(crate) mod events;
pub(crate) mod lease;

pub(crate) use composite::Composite;

/// Why a value could not be decoded.
pub(crate) type BoxError = Box<dyn Error + Sync + Send>;

/// Type OIDs, as in PostgreSQL's `pg_type.dat` (stable for built-in types).
pub(crate) mod oid {
    pub(crate) const BOOL: u32 = 16;
    pub(crate) const NAME: u32 = 19;
    pub(crate) const INT8: u32 = 20;
    pub(crate) const TEXT: u32 = 25;
    pub(crate) const JSON: u32 = 114;
    pub(crate) const TEXT_ARRAY: u32 = 1009;
    pub(crate) const VARCHAR_ARRAY: u32 = 1015;
    pub(crate) const BPCHAR: u32 = 1042;
    pub(crate) const VARCHAR: u32 = 1043;
    pub(crate) const TIMESTAMPTZ: u32 = 1184;
    pub(crate) const JSONB: u32 = 3802;
}

/// One column (or one field of a composite): its type's OID and its bytes in binary format,
/// `None` for NULL.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Value<'a> {
    pub(crate) oid: u32,
    pub(crate) raw: Option<&'a [u8]>,
}

/// A row of an answer, as a driver delivers it.
pub(crate) trait Row {
    /// Column `idx`, in binary format.
    fn value(&self, idx: usize) -> Result<Value<'_>, BoxError>;
}

/// A Rust value read from a [`Value`].
pub(crate) trait Decode<'a>: Sized {
    /// Decodes `value`, checking its type.
    fn decode(value: Value<'a>) -> Result<Self, BoxError>;
}

/// The bytes of a non-NULL value of one of the `accepted` types.
#[inline]
fn bytes<'a>(value: Value<'a>, accepted: &[u32], rust: &str) -> Result<&'a [u8], BoxError> {
    if !accepted.contains(&value.oid) {
        return Err(format!("a value of type OID {} is not a {rust}", value.oid).into());
    }
    value
        .raw
        .ok_or_else(|| format!("NULL is not a {rust}").into())
}

#[inline]
fn fixed<const N: usize>(raw: &[u8], rust: &str) -> Result<[u8; N], BoxError> {
    raw.try_into()
        .map_err(|_| format!("a {rust} takes {N} bytes, not {}", raw.len()).into())
}

impl<'a, T: Decode<'a>> Decode<'a> for Option<T> {
    fn decode(value: Value<'a>) -> Result<Self, BoxError> {
        match value.raw {
            None => Ok(None),
            Some(_) => T::decode(value).map(Some),
        }
    }
}

impl Decode<'_> for bool {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        let [byte] = fixed::<1>(bytes(value, &[oid::BOOL], "bool")?, "bool")?;
        Ok(byte != 0)
    }
}

impl Decode<'_> for i64 {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        let raw = bytes(value, &[oid::INT8], "i64")?;
        Ok(i64::from_be_bytes(fixed(raw, "i64")?))
    }
}

const TEXTS: &[u32] = &[oid::TEXT, oid::VARCHAR, oid::BPCHAR, oid::NAME];

impl<'a> Decode<'a> for &'a str {
    fn decode(value: Value<'a>) -> Result<Self, BoxError> {
        Ok(std::str::from_utf8(bytes(value, TEXTS, "string")?)?)
    }
}

impl Decode<'_> for String {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        <&str>::decode(value).map(str::to_owned)
    }
}

/// Microseconds from the Unix epoch to PostgreSQL's, 2000-01-01T00:00:00Z.
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl Decode<'_> for Timestamp {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        let raw = bytes(value, &[oid::TIMESTAMPTZ], "timestamptz")?;
        let since_2000 = i64::from_be_bytes(fixed(raw, "timestamptz")?);
        // ±infinity are i64::MAX and i64::MIN, and out of range like anything near them.
        since_2000
            .checked_add(POSTGRES_EPOCH_MICROS)
            .filter(|_| since_2000 != i64::MAX && since_2000 != i64::MIN)
            .map(Timestamp::from_micros)
            .ok_or_else(|| "the timestamp is out of range".into())
    }
}

impl Decode<'_> for serde_json::Value {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        let raw = bytes(value, &[oid::JSONB, oid::JSON], "JSON value")?;
        let text = if value.oid == oid::JSONB {
            // jsonb's binary format: a version byte (1), then the text.
            match raw.split_first() {
                Some((1, text)) => text,
                Some((version, _)) => return Err(format!("jsonb version {version}").into()),
                None => return Err("empty jsonb value".into()),
            }
        } else {
            raw
        };
        Ok(serde_json::from_slice(text)?)
    }
}

/// Takes `n` bytes off the front of `buf`.
#[inline]
pub(crate) fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], BoxError> {
    if buf.len() < n {
        return Err("the value is truncated".into());
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

/// Takes a big-endian 4-byte word off the front of `buf`.
#[inline]
pub(crate) fn take_4(buf: &mut &[u8]) -> Result<[u8; 4], BoxError> {
    fixed(take(buf, 4)?, "word")
}

/// A one-dimensional `text[]` without NULLs (`array_send`: dimensions, flags, element type,
/// then each dimension's length and lower bound, then each element's length and bytes).
impl Decode<'_> for Vec<String> {
    fn decode(value: Value<'_>) -> Result<Self, BoxError> {
        let mut buf = bytes(value, &[oid::TEXT_ARRAY, oid::VARCHAR_ARRAY], "text[]")?;
        let dimensions = i32::from_be_bytes(take_4(&mut buf)?);
        let _flags = take_4(&mut buf)?;
        let element = u32::from_be_bytes(take_4(&mut buf)?);
        let len = match dimensions {
            0 => 0,
            1 => {
                let len = i32::from_be_bytes(take_4(&mut buf)?);
                let _lower_bound = take_4(&mut buf)?;
                usize::try_from(len).map_err(|_| "negative array length")?
            }
            n => return Err(format!("a {n}-dimensional array is not a list").into()),
        };
        // Each element takes at least 4 bytes: a length beyond that is a lie, not an
        // allocation.
        if len > buf.len() / 4 {
            return Err("the array is truncated".into());
        }
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            let n = i32::from_be_bytes(take_4(&mut buf)?);
            let n = usize::try_from(n).map_err(|_| "a NULL in a text[]")?;
            let raw = take(&mut buf, n)?;
            out.push(String::decode(Value {
                oid: element,
                raw: Some(raw),
            })?);
        }
        if !buf.is_empty() {
            return Err("trailing bytes after an array".into());
        }
        Ok(out)
    }
}

/// A row, or a composite value, whose columns are read by position.
pub(crate) trait Columns<'a>: Copy {
    /// Column `idx` (named `name` in messages).
    fn column<T: Decode<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError>;
}

impl<'a, R: Row> Columns<'a> for &'a R {
    fn column<T: Decode<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError> {
        self.value(idx).and_then(T::decode).map_err(|e| {
            EventStorageError::corrupt_with(format!("unexpected value in column {name}"), e)
        })
    }
}

impl<'a> Columns<'a> for &Composite<'a> {
    fn column<T: Decode<'a>>(self, idx: usize, name: &str) -> Result<T, EventStorageError> {
        self.field(idx).map_err(|e| {
            EventStorageError::corrupt(format!("unexpected value in field {name}: {e}"))
        })
    }
}

/// Column `idx` (named `name` in messages) of `row`.
pub(crate) fn get<'a, T: Decode<'a>>(
    row: &'a impl Row,
    idx: usize,
    name: &str,
) -> Result<T, EventStorageError> {
    row.column(idx, name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn value(oid: u32, raw: &[u8]) -> Value<'_> {
        Value {
            oid,
            raw: Some(raw),
        }
    }

    pub(crate) fn text_array(items: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(1i32.to_be_bytes());
        out.extend(0i32.to_be_bytes());
        out.extend(oid::TEXT.to_be_bytes());
        out.extend((items.len() as i32).to_be_bytes());
        out.extend(1i32.to_be_bytes());
        for item in items {
            out.extend((item.len() as i32).to_be_bytes());
            out.extend(item.as_bytes());
        }
        out
    }

    #[test]
    fn scalars_decode_and_check_their_type() {
        assert!(bool::decode(value(oid::BOOL, &[1])).unwrap());
        assert!(!bool::decode(value(oid::BOOL, &[0])).unwrap());
        assert_eq!(
            i64::decode(value(oid::INT8, &7i64.to_be_bytes())).unwrap(),
            7
        );
        assert!(i64::decode(value(oid::TEXT, &7i64.to_be_bytes())).is_err());
        assert!(i64::decode(value(oid::INT8, &[0; 4])).is_err());
        assert_eq!(<&str>::decode(value(oid::TEXT, b"abc")).unwrap(), "abc");
        assert!(<&str>::decode(value(oid::TEXT, &[0xff])).is_err());
        let null = Value {
            oid: oid::TEXT,
            raw: None,
        };
        assert!(String::decode(null).is_err());
        assert_eq!(Option::<String>::decode(null).unwrap(), None);
    }

    #[test]
    fn timestamps_count_from_2000() {
        let zero = Timestamp::decode(value(oid::TIMESTAMPTZ, &0i64.to_be_bytes())).unwrap();
        assert_eq!(zero.as_micros(), POSTGRES_EPOCH_MICROS);
        for infinite in [i64::MAX, i64::MIN] {
            assert!(Timestamp::decode(value(oid::TIMESTAMPTZ, &infinite.to_be_bytes())).is_err());
        }
    }

    #[test]
    fn json_and_jsonb() {
        let jsonb = serde_json::Value::decode(value(oid::JSONB, b"\x01{\"a\":1}")).unwrap();
        assert_eq!(jsonb, serde_json::json!({"a": 1}));
        let json = serde_json::Value::decode(value(oid::JSON, b"[1]")).unwrap();
        assert_eq!(json, serde_json::json!([1]));
        assert!(serde_json::Value::decode(value(oid::JSONB, b"\x02{}")).is_err());
        assert!(serde_json::Value::decode(value(oid::JSONB, b"")).is_err());
    }

    #[test]
    fn text_arrays_decode_and_refuse_malformed_ones_without_panicking() {
        let good = text_array(&["a", "bc"]);
        let decoded = Vec::<String>::decode(value(oid::TEXT_ARRAY, &good)).unwrap();
        assert_eq!(decoded, ["a", "bc"]);
        let mut empty = Vec::new();
        empty.extend(0i32.to_be_bytes());
        empty.extend(0i32.to_be_bytes());
        empty.extend(oid::TEXT.to_be_bytes());
        assert!(
            Vec::<String>::decode(value(oid::TEXT_ARRAY, &empty))
                .unwrap()
                .is_empty()
        );
        for cut in 0..good.len() {
            assert!(Vec::<String>::decode(value(oid::TEXT_ARRAY, &good[..cut])).is_err());
        }
        let mut huge = good.clone();
        huge[12..16].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(Vec::<String>::decode(value(oid::TEXT_ARRAY, &huge)).is_err());
        let mut trailing = good;
        trailing.push(0);
        assert!(Vec::<String>::decode(value(oid::TEXT_ARRAY, &trailing)).is_err());
    }
}

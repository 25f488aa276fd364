//! Validated names and the error that says what was wrong with an input.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The input that a [`ValidationError`] is about.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum Field {
    /// `LeaseRequest::lease_name`, or the lease name of a release or a contender query.
    LeaseName,
    /// `LeaseRequest::owner`, or the owner of a release.
    Owner,
    /// `LeaseRequest::ttl`.
    Ttl,
    /// The stream of an event.
    Stream,
    /// The type of an event.
    EventType,
    /// A tag of an event or of a query.
    Tag,
    /// The idempotency key of an append.
    IdempotencyKey,
    /// The events of an append.
    Events,
    /// The reader of a bookmark.
    Reader,
    /// A position in the event log.
    Position,
    /// The most events a read may return.
    Limit,
    /// The payload of an event.
    Payload,
}

impl Field {
    /// The field's name as the contract spells it, e.g. `lease_name`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Field::LeaseName => "lease_name",
            Field::Owner => "owner",
            Field::Ttl => "ttl",
            Field::Stream => "stream",
            Field::EventType => "event_type",
            Field::Tag => "tag",
            Field::IdempotencyKey => "idempotency_key",
            Field::Events => "events",
            Field::Reader => "reader",
            Field::Position => "position",
            Field::Limit => "limit",
            Field::Payload => "payload",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an input was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Reason {
    /// The text is empty.
    Empty,
    /// The text is longer than allowed.
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The most bytes allowed.
        max: usize,
    },
    /// The text contains a control character (NUL included).
    ControlCharacter {
        /// Byte offset of the first control character.
        at: usize,
    },
    /// The duration is shorter than allowed.
    TooShort {
        /// The shortest duration allowed.
        min: Duration,
    },
    /// The duration is longer than allowed.
    TooLarge {
        /// The longest duration allowed.
        max: Duration,
    },
    /// There are more items than allowed.
    TooMany {
        /// How many there are.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// A number must be at least 1.
    Zero,
    /// A JSON value contains the character U+0000, which not every storage can keep
    /// (PostgreSQL's `jsonb` cannot).
    NulInJson,
    /// A JSON value nests arrays and objects deeper than allowed.
    TooDeep {
        /// The deepest nesting allowed (`[1]` is 1 deep, `{"a": [1]}` 2).
        max: usize,
    },
    /// No stored event has this position.
    NoSuchEvent {
        /// The position asked for.
        position: u64,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Empty => f.write_str("must not be empty"),
            Reason::TooLong { len, max } => {
                write!(f, "is {len} bytes long, the maximum is {max} bytes")
            }
            Reason::ControlCharacter { at } => {
                write!(f, "contains a control character at byte {at}")
            }
            Reason::TooShort { min } => write!(f, "must be at least {min:?}"),
            Reason::TooLarge { max } => write!(f, "must be at most {max:?}"),
            Reason::TooMany { count, max } => write!(f, "has {count} items, the maximum is {max}"),
            Reason::Zero => f.write_str("must be at least 1"),
            Reason::NulInJson => f.write_str("contains the character U+0000 in a string or key"),
            Reason::TooDeep { max } => {
                write!(f, "nests arrays and objects more than {max} deep")
            }
            Reason::NoSuchEvent { position } => {
                write!(f, "no stored event has position {position}")
            }
        }
    }
}

/// An input that breaks the contract's rules, naming the field and the reason.
///
/// ```
/// use tenure_domain::{LeaseName, Field};
/// let err = LeaseName::new("").unwrap_err();
/// assert_eq!(err.field, Field::LeaseName);
/// assert_eq!(err.to_string(), "invalid lease_name: must not be empty");
/// ```
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("invalid {field}: {reason}")]
#[non_exhaustive]
pub struct ValidationError {
    /// The input that was refused.
    pub field: Field,
    /// Why it was refused.
    pub reason: Reason,
}

impl ValidationError {
    /// An error about `field` for `reason`.
    pub fn new(field: Field, reason: Reason) -> Self {
        ValidationError { field, reason }
    }
}

/// The most bytes a lease name or an owner may have.
pub const MAX_NAME_BYTES: usize = 255;

/// The shortest ttl a lease may be requested with.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest ttl a lease may be requested with: 7 days.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Checks a name-like input (a lease name, an owner, a stream, a tag, …): 1 to
/// [`MAX_NAME_BYTES`] bytes of UTF-8 with no control characters (NUL included).
pub fn check_name(field: Field, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::new(field, Reason::Empty));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(ValidationError::new(
            field,
            Reason::TooLong {
                len: value.len(),
                max: MAX_NAME_BYTES,
            },
        ));
    }
    if let Some((at, _)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return Err(ValidationError::new(field, Reason::ControlCharacter { at }));
    }
    Ok(())
}

/// Checks a ttl against [`MIN_TTL`] and [`MAX_TTL`] and truncates it to whole microseconds,
/// the precision of the storage clock.
pub fn validate_ttl(ttl: Duration) -> Result<Duration, ValidationError> {
    if ttl < MIN_TTL {
        return Err(ValidationError::new(
            Field::Ttl,
            Reason::TooShort { min: MIN_TTL },
        ));
    }
    if ttl > MAX_TTL {
        return Err(ValidationError::new(
            Field::Ttl,
            Reason::TooLarge { max: MAX_TTL },
        ));
    }
    Ok(Duration::from_micros(
        u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX),
    ))
}

macro_rules! validated_name {
    ($(#[$doc:meta])* $name:ident, $field:expr) => {
        $(#[$doc])*
        ///
        /// Cloning one is cheap (a reference count): a backend keeps, compares and answers
        /// with the same text without copying it.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Validates `value`: 1 to 255 bytes of UTF-8 with no control characters.
            pub fn new(value: impl AsRef<str>) -> Result<Self, ValidationError> {
                let value = value.as_ref();
                check_name($field, value)?;
                Ok($name(Arc::from(value)))
            }

            /// A name already checked by [`check_name`] for this field.
            pub(crate) fn from_checked(value: &str) -> Self {
                $name(Arc::from(value))
            }

            /// The name as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The name as an owned `String`.
            pub fn into_string(self) -> String {
                self.0.as_ref().to_owned()
            }
        }

        /// Lets a map keyed by names be searched with a `&str`, as the text compares.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = ValidationError;
            fn try_from(value: &str) -> Result<Self, ValidationError> {
                $name::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = ValidationError;
            fn try_from(value: String) -> Result<Self, ValidationError> {
                $name::new(value)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}

validated_name!(
    /// The name of a lease, unique within a storage: 1 to 255 bytes of UTF-8 with no control
    /// characters.
    LeaseName,
    Field::LeaseName
);

validated_name!(
    /// The identity of a contender: stable for an instance's lifetime and unique among the
    /// contenders of a lease (a pod name, or a host name plus a start-up id).
    /// 1 to 255 bytes of UTF-8 with no control characters.
    Owner,
    Field::Owner
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(LeaseName::new("order-dispatcher").is_ok());
        assert!(LeaseName::new("é".repeat(127)).is_ok()); // 254 bytes
        let err = Owner::new("x".repeat(256)).unwrap_err();
        assert_eq!(
            err,
            ValidationError::new(Field::Owner, Reason::TooLong { len: 256, max: 255 })
        );
        let err = LeaseName::new("a\0b").unwrap_err();
        assert_eq!(err.reason, Reason::ControlCharacter { at: 1 });
        assert_eq!(
            err.to_string(),
            "invalid lease_name: contains a control character at byte 1"
        );
        assert!(Owner::new("tab\there").is_err());
        assert!(Owner::new("del\u{7f}").is_err());
        assert!(Owner::new("c1\u{85}").is_err());
    }

    #[test]
    fn ttl_bounds() {
        assert_eq!(
            validate_ttl(Duration::ZERO).unwrap_err().reason,
            Reason::TooShort { min: MIN_TTL }
        );
        assert!(validate_ttl(Duration::from_micros(999)).is_err());
        assert_eq!(validate_ttl(MIN_TTL).unwrap(), MIN_TTL);
        assert_eq!(validate_ttl(MAX_TTL).unwrap(), MAX_TTL);
        assert!(validate_ttl(MAX_TTL + Duration::from_nanos(1)).is_err());
        assert_eq!(
            validate_ttl(Duration::from_nanos(1_500_700)).unwrap(),
            Duration::from_micros(1_500)
        );
        assert_eq!(
            validate_ttl(Duration::MAX).unwrap_err().to_string(),
            "invalid ttl: must be at most 604800s"
        );
    }
}

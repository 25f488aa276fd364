//! The table prefix: the only caller-supplied text that ever becomes part of an SQL identifier.

use std::fmt;

/// The prefix used when none is given: tables `tenure_leases`, `tenure_lease_contenders`,
/// `tenure_events`, `tenure_event_keys` and `tenure_bookmarks`.
pub const DEFAULT_PREFIX: &str = "tenure_";

/// The longest name the DDL appends to a prefix (a constraint of the contenders table). A test
/// checks that it is the longest `{{prefix}}…` identifier in the crate's `migrations/`.
pub(crate) const LONGEST_SUFFIX: &str = "lease_contenders_pkey";

/// PostgreSQL truncates identifiers longer than this many bytes (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The longest prefix accepted: every identifier it produces fits in 63 bytes.
pub const MAX_PREFIX_BYTES: usize = MAX_IDENTIFIER_BYTES - LONGEST_SUFFIX.len();

/// A validated table prefix: `[a-z_][a-z0-9_]*`, at most [`MAX_PREFIX_BYTES`] bytes.
///
/// Only such a prefix is ever substituted into SQL text, so that it can neither break out of an
/// identifier nor need quoting, and no identifier it produces is silently truncated by
/// PostgreSQL (two long prefixes would otherwise name the same tables).
///
/// ```
/// use tenure_postgres::TablePrefix;
/// assert!(TablePrefix::new("billing_").is_ok());
/// assert!(TablePrefix::new("Billing").is_err());
/// assert!(TablePrefix::new("x; DROP TABLE y").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TablePrefix(String);

impl TablePrefix {
    /// Validates `prefix`.
    pub fn new(prefix: impl Into<String>) -> Result<Self, PrefixError> {
        let prefix = prefix.into();
        let mut chars = prefix.char_indices();
        match chars.next() {
            None => return Err(PrefixError::Empty),
            Some((_, c)) if c.is_ascii_lowercase() || c == '_' => {}
            Some((_, c)) => return Err(PrefixError::InvalidFirstCharacter(c)),
        }
        if let Some((at, c)) =
            chars.find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        {
            return Err(PrefixError::InvalidCharacter { at, character: c });
        }
        if prefix.len() > MAX_PREFIX_BYTES {
            return Err(PrefixError::TooLong {
                len: prefix.len(),
                max: MAX_PREFIX_BYTES,
            });
        }
        Ok(TablePrefix(prefix))
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name of the leases table, `<prefix>leases`.
    pub fn leases_table(&self) -> String {
        format!("{}leases", self.0)
    }

    /// The name of the contenders table, `<prefix>lease_contenders`.
    pub fn contenders_table(&self) -> String {
        format!("{}lease_contenders", self.0)
    }
}

impl Default for TablePrefix {
    fn default() -> Self {
        TablePrefix(DEFAULT_PREFIX.to_owned())
    }
}

impl fmt::Display for TablePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a table prefix was refused.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// The prefix is empty.
    #[error("invalid table prefix: must not be empty (the default is {DEFAULT_PREFIX:?})")]
    Empty,
    /// The first character is not `a`-`z` or `_`.
    #[error("invalid table prefix: must start with a-z or _, not {0:?}")]
    InvalidFirstCharacter(char),
    /// A character is not `a`-`z`, `0`-`9` or `_`.
    #[error("invalid table prefix: {character:?} at byte {at}; only a-z, 0-9 and _ are allowed")]
    InvalidCharacter {
        /// The byte offset of the character.
        at: usize,
        /// The character.
        character: char,
    },
    /// The identifiers it produces would not fit PostgreSQL's 63 bytes.
    #[error(
        "invalid table prefix: {len} bytes long, at most {max} so that every identifier it \
         produces fits in PostgreSQL's 63 bytes"
    )]
    TooLong {
        /// The prefix's length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_safe_identifier_parts() {
        for ok in [
            "tenure_",
            "_",
            "a",
            "a1_b2_",
            "x".repeat(MAX_PREFIX_BYTES).as_str(),
        ] {
            assert_eq!(TablePrefix::new(ok).unwrap().as_str(), ok);
        }
        assert_eq!(TablePrefix::default().as_str(), DEFAULT_PREFIX);
        assert_eq!(MAX_PREFIX_BYTES, 42);
    }

    #[test]
    fn refuses_everything_else() {
        assert_eq!(TablePrefix::new(""), Err(PrefixError::Empty));
        assert_eq!(
            TablePrefix::new("1abc"),
            Err(PrefixError::InvalidFirstCharacter('1'))
        );
        assert_eq!(
            TablePrefix::new("Abc"),
            Err(PrefixError::InvalidFirstCharacter('A'))
        );
        assert_eq!(
            TablePrefix::new("ab\"c"),
            Err(PrefixError::InvalidCharacter {
                at: 2,
                character: '"'
            })
        );
        for bad in ["a b", "a;", "a-b", "aé", "a'", "a\0", "a.b", "aB"] {
            assert!(TablePrefix::new(bad).is_err(), "{bad:?}");
        }
        let long = "x".repeat(MAX_PREFIX_BYTES + 1);
        assert_eq!(
            TablePrefix::new(long),
            Err(PrefixError::TooLong {
                len: MAX_PREFIX_BYTES + 1,
                max: MAX_PREFIX_BYTES
            })
        );
    }
}

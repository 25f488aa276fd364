//! What a backend offers.

use std::fmt;

/// An optional part of the SPI. A backend lists what it offers in
/// [`EventStorage::capabilities`](crate::EventStorage::capabilities); the conformance kit runs
/// the scenarios of a capability only where it is offered, and reports the others as skipped.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum Capability {
    /// Leases: `request_lease`, `release_lease`, `get_leases`, `get_lease_contenders`.
    Lease,
    /// Bookmarks: where a reader got to.
    Bookmarks,
    /// The event log: append and read.
    Events,
    /// Being told that a lease changed ([`EventStorage::lease_changes`]): a release, an
    /// acquisition, a step-down request. Optional: an elector polls without it.
    ///
    /// [`EventStorage::lease_changes`]: crate::EventStorage::lease_changes
    LeaseChanges,
    /// Bookmark writes fenced by a lease's token ([`EventStorage::bookmark_fenced`]).
    ///
    /// [`EventStorage::bookmark_fenced`]: crate::EventStorage::bookmark_fenced
    FencedBookmarks,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 5] = [
        Capability::Lease,
        Capability::Bookmarks,
        Capability::Events,
        Capability::LeaseChanges,
        Capability::FencedBookmarks,
    ];

    const fn bit(self) -> u8 {
        match self {
            Capability::Lease => 1,
            Capability::Bookmarks => 2,
            Capability::Events => 4,
            Capability::LeaseChanges => 8,
            Capability::FencedBookmarks => 16,
        }
    }

    /// The capability's name, e.g. `lease`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::Lease => "lease",
            Capability::Bookmarks => "bookmarks",
            Capability::Events => "events",
            Capability::LeaseChanges => "lease_changes",
            Capability::FencedBookmarks => "fenced_bookmarks",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`Capability`] values.
///
/// ```
/// use tenure_ports::{Capabilities, Capability};
/// let caps = Capabilities::from([Capability::Lease]);
/// assert!(caps.contains(Capability::Lease));
/// assert!(!caps.contains(Capability::Events));
/// assert_eq!(caps.to_string(), "{lease}");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Capabilities(u8);

impl Capabilities {
    /// No capability at all.
    pub const NONE: Capabilities = Capabilities(0);

    /// Whether `capability` is in the set.
    pub const fn contains(self, capability: Capability) -> bool {
        self.0 & capability.bit() != 0
    }

    /// The set with `capability` added.
    #[must_use]
    pub const fn with(self, capability: Capability) -> Self {
        Capabilities(self.0 | capability.bit())
    }

    /// The set without `capability`: what a wrapper that does not pass a capability on
    /// advertises.
    #[must_use]
    pub const fn without(self, capability: Capability) -> Self {
        Capabilities(self.0 & !capability.bit())
    }

    /// The capabilities in the set, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::ALL
            .into_iter()
            .filter(move |c| self.contains(*c))
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl<const N: usize> From<[Capability; N]> for Capabilities {
    fn from(capabilities: [Capability; N]) -> Self {
        capabilities.into_iter().collect()
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        iter.into_iter()
            .fold(Capabilities::NONE, Capabilities::with)
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, c) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(c.as_str())?;
        }
        f.write_str("}")
    }
}

//! Fenced bookmarks: a bookmark write made under a lease's tenure, refused once a newer tenure
//! has written that reader's bookmark or holds the lease ([`Capability::FencedBookmarks`]).
//!
//! The lease decides *who* processes and the bookmark *from where*. An unfenced bookmark write
//! from a leader that was paused past its ttl can land after its successor's and move the
//! bookmark backwards; a fenced one cannot: the storage compares the write's token with the
//! highest token that wrote that reader's bookmark and with the lease's current token, and
//! refuses an older one with [`EventStorageError::Fenced`], writing nothing. Unfenced writes
//! ([`EventStorage::bookmark`]) stay possible for readers that do not use leases; they do not
//! lower the reader's fence.
//!
//! [`Capability::FencedBookmarks`]: crate::Capability::FencedBookmarks
//! [`EventStorageError::Fenced`]: crate::EventStorageError::Fenced
//! [`EventStorage::bookmark`]: crate::EventStorage::bookmark

use crate::{FencingToken, LeaseName};

/// The tenure a write is made under: a lease and the fencing token the storage gave it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The lease whose tenure the write belongs to.
    pub lease_name: LeaseName,
    /// The tenure's token.
    pub token: FencingToken,
}

impl Fence {
    /// The tenure `token` of `lease_name`.
    pub fn new(lease_name: LeaseName, token: FencingToken) -> Self {
        Fence { lease_name, token }
    }
}

//! The CRC-32 of any stretch of a buffer in constant time, so that recovery's search for a
//! whole record after damage is linear in the size of the file.
//!
//! # Why
//!
//! After a record that is not whole, recovery asks whether a whole record starts at any later
//! offset (see [the rule](crate::recovery)). Read naively, that is one checksum per offset, each
//! over as many bytes as the length field found there claims: random bytes claim lengths of up
//! to [`MAX_RECORD_BYTES`](crate::MAX_RECORD_BYTES), so the search grew with the cube of the
//! damaged stretch (57 s for 32 MiB of random bytes, more than 300 s for 64 MiB).
//!
//! # How
//!
//! CRC-32 is linear over GF(2): for byte strings `a` and `b`,
//! `crc(a ‖ b) = shift(crc(a), |b|) ⊕ crc(b)`, where `shift(c, n)` is `c` multiplied by
//! `x^(8n)` modulo the CRC polynomial (what `crc32fast::Hasher::combine` computes, in a number
//! of steps logarithmic in `n`). So with the prefix checksums `P[i] = crc(bytes[..i])`:
//!
//! ```text
//! crc(bytes[s..e])          = P[e] ⊕ shift(P[s], e - s)
//! crc(head ‖ bytes[s..e])   = P[e] ⊕ shift(crc(head) ⊕ P[s], e - s)
//! ```
//!
//! `PrefixCrcs` keeps `P` at every [`STRIDE`]-th offset (an eighth of the buffer's size in
//! memory) and finishes any other prefix from the checkpoint below it, over fewer than
//! `STRIDE` bytes. One stretch then costs two short updates and one shift, whatever its length.

use crc32fast::Hasher;

/// The distance between two stored prefix checksums.
const STRIDE: usize = 32;

/// Prefix checksums of one buffer, for the checksum of any stretch of it.
pub(crate) struct PrefixCrcs<'a> {
    bytes: &'a [u8],
    /// `checkpoints[k]` is the CRC-32 of `bytes[..k * STRIDE]`.
    checkpoints: Vec<u32>,
}

impl<'a> PrefixCrcs<'a> {
    /// Indexes `bytes`: one pass over them.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let mut checkpoints = Vec::with_capacity(bytes.len() / STRIDE + 1);
        let mut hasher = Hasher::new();
        checkpoints.push(hasher.clone().finalize());
        for chunk in bytes.chunks_exact(STRIDE) {
            hasher.update(chunk);
            checkpoints.push(hasher.clone().finalize());
        }
        PrefixCrcs { bytes, checkpoints }
    }

    /// The CRC-32 of `head` followed by `bytes[start..end]`, or `None` if the range is not
    /// within the buffer.
    pub(crate) fn crc_after(&self, head: &[u8], start: usize, end: usize) -> Option<u32> {
        if start > end || end > self.bytes.len() {
            return None;
        }
        let len = (end - start) as u64;
        Some(self.prefix(end) ^ shift(crc32fast::hash(head) ^ self.prefix(start), len))
    }

    /// The CRC-32 of `bytes[..end]` (`end` within the buffer).
    fn prefix(&self, end: usize) -> u32 {
        let k = end / STRIDE;
        let mut hasher = Hasher::new_with_initial(self.checkpoints[k]);
        hasher.update(&self.bytes[k * STRIDE..end]);
        hasher.finalize()
    }
}

/// `crc` as the checksum of a string followed by `len` more bytes, with the contribution of
/// those bytes left out: `crc(a ‖ b) ⊕ crc(b)` for `crc(a) = crc` and `|b| = len`.
fn shift(crc: u32, len: u64) -> u32 {
    let mut hasher = Hasher::new_with_initial_len(crc, 0);
    hasher.combine(&Hasher::new_with_initial_len(0, len));
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn direct(head: &[u8], stretch: &[u8]) -> u32 {
        let mut hasher = Hasher::new();
        hasher.update(head);
        hasher.update(stretch);
        hasher.finalize()
    }

    proptest! {
        #[test]
        fn any_stretch_matches_the_direct_checksum(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            head in proptest::collection::vec(any::<u8>(), 0..6),
            a in any::<proptest::sample::Index>(),
            b in any::<proptest::sample::Index>(),
        ) {
            let (a, b) = (a.index(bytes.len() + 1), b.index(bytes.len() + 1));
            let (start, end) = (a.min(b), a.max(b));
            let crcs = PrefixCrcs::new(&bytes);
            prop_assert_eq!(
                crcs.crc_after(&head, start, end),
                Some(direct(&head, &bytes[start..end]))
            );
        }
    }

    #[test]
    fn ranges_outside_the_buffer_are_none() {
        let bytes = [7u8; 70];
        let crcs = PrefixCrcs::new(&bytes);
        assert_eq!(crcs.crc_after(b"", 0, 71), None);
        assert_eq!(crcs.crc_after(b"", 5, 4), None);
        assert_eq!(crcs.crc_after(b"", 70, 70), Some(direct(b"", b"")));
        assert_eq!(crcs.crc_after(b"ab", 0, 70), Some(direct(b"ab", &bytes)));
    }
}

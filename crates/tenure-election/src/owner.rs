//! The default owner id: the host name plus a random suffix.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Host names are cut to this many bytes, leaving room for the suffix within the 255 bytes
/// an owner may have.
const MAX_HOST_BYTES: usize = 200;

/// A new owner id, `<host>-<12 hex digits>`: the host name tells an operator where the
/// contender runs, the suffix keeps two processes on one host (or one restarted process)
/// apart. It needs no dependency: the suffix comes from std's randomly keyed hasher.
pub(crate) fn default_owner() -> String {
    let host = host_name().unwrap_or_else(|| "tenure".to_owned());
    format!("{host}-{:012x}", random_suffix() & 0xffff_ffff_ffff)
}

fn host_name() -> Option<String> {
    let from_files = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .into_iter()
        .filter_map(|path| std::fs::read_to_string(path).ok());
    let from_env = ["HOSTNAME", "COMPUTERNAME"]
        .into_iter()
        .filter_map(|var| std::env::var(var).ok());
    from_files.chain(from_env).find_map(|raw| clean(&raw))
}

/// Keeps the printable part of a host name, cut at a character boundary.
fn clean(raw: &str) -> Option<String> {
    let mut host = String::new();
    for c in raw.trim().chars().filter(|c| !c.is_control()) {
        if host.len() + c.len_utf8() > MAX_HOST_BYTES {
            break;
        }
        host.push(c);
    }
    (!host.is_empty()).then_some(host)
}

fn random_suffix() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    hasher.write_u128(nanos);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_distinct_and_well_formed() {
        let a = default_owner();
        let b = default_owner();
        assert_ne!(a, b);
        assert!(a.len() <= 255);
        assert!(!a.chars().any(char::is_control));
    }

    #[test]
    fn host_names_are_trimmed_and_cut() {
        assert_eq!(clean(" web-3\n").as_deref(), Some("web-3"));
        assert_eq!(clean("\n"), None);
        assert_eq!(clean(&"é".repeat(150)).map(|h| h.len()), Some(200));
    }
}

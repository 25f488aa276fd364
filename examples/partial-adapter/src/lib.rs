//! An example third-party backend that implements only part of the Tenure SPI.
//!
//! `ReadOnlyLeaseMirror` stands for an adapter written before leases existed, or one that
//! only reports: it offers no capability, so every lease method keeps the SPI's default body
//! (`Err(Unsupported(Capability::Lease))`), and the conformance kit reports its lease
//! scenarios as skipped instead of failing them. Its `tests/tck.rs` and the `[[test]]` entry
//! in its `Cargo.toml` are the whole of what an adapter's author writes to run the kit;
//! `cargo test --test tck` shows the skips as ignored, in its own summary.
//!
//! It is an example, not a backend to use: it stores nothing.

#![deny(missing_docs)]

use tenure_ports::{Capabilities, EventStorage, async_trait};

/// A backend that offers no optional capability.
#[derive(Debug, Default, Clone)]
pub struct ReadOnlyLeaseMirror;

#[async_trait]
impl EventStorage for ReadOnlyLeaseMirror {
    fn name(&self) -> &str {
        "partial"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_ports::{Capability, EventStorageError};

    #[test]
    fn lease_calls_are_unsupported() {
        let rt = tenure_tck_runtime();
        let err = rt.block_on(ReadOnlyLeaseMirror.get_leases()).unwrap_err();
        assert!(matches!(
            err,
            EventStorageError::Unsupported(Capability::Lease)
        ));
        assert_eq!(err.to_string(), "this storage does not support lease");
    }

    fn tenure_tck_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }
}

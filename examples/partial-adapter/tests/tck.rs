//! The conformance kit against a backend without leases, exactly as a crate outside Tenure's
//! repository runs it (`[[test]] name = "tck"`, `harness = false`): every scenario is reported
//! ignored by `cargo test` itself (`44 ignored`, each with the capability it lacks), never as
//! passed, and the kit closes with `tck partial: 0 passed, 0 failed, 44 skipped`.

use tenure_example_partial_adapter::ReadOnlyLeaseMirror;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async { Subject::new(ReadOnlyLeaseMirror) });

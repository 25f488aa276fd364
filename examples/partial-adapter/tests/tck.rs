//! The conformance kit against a backend without leases: every lease scenario is skipped,
//! visibly (`tck: skipped partial::…` with `--nocapture`), never reported as passed by the kit.

use tenure_example_partial_adapter::ReadOnlyLeaseMirror;
use tenure_tck::Subject;

tenure_tck::tck_suite!(|| async { Subject::new(ReadOnlyLeaseMirror) });

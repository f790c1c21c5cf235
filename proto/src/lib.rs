//! shoal.v1 API (placeholder).

//! Intentionally empty: the test and its shared participant code live under `tests/`.

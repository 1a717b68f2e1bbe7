//! Nothing to build: the end-to-end tests are in `tests/it` (see README.md).

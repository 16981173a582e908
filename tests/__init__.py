"""The project's tests, in folders that mirror the code; helpers in tests/support."""

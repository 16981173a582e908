"""Whole runs end to end; everything here is marked slow (tests/conftest.py)."""

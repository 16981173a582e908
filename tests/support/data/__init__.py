"""Data files the tests read."""

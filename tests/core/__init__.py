"""Tests of the core (rldag/), one folder per concern."""

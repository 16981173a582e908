"""Tests of the operators, one folder per node kind."""

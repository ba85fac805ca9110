"""Test stand-in for cuda-python's cuda.bindings (see tests/standins/README.md)."""

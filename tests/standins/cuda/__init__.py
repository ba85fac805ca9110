"""Test stand-in for cuda-python (see tests/standins/README.md); never shipped."""

"""Command-line entry points (click): aot-build."""

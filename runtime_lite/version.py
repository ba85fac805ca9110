"""The single source of the project's version (read by both pyproject files)."""

__version__ = "0.1.0"

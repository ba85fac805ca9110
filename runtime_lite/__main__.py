"""``python -m runtime_lite``: the same commands as the ``runtime-lite`` script (see runtime_lite/tools/cli.py)."""

from runtime_lite.tools.cli import entry_point

if __name__ == "__main__":
    entry_point()

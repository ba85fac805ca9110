"""Import torchvision next to the CPU build of torch (aot_torchvision_guard.py says why it can fail).

aot's wheel installs the guard at interpreter start; an editable install (the README's
test set-up) does not, so the tests and benchmarks ask for it here.

    from tests.torchvision_compat import import_torchvision
    torchvision = import_torchvision()          # None when torchvision is not installed
"""

from aot_torchvision_guard import import_torchvision

__all__ = ["import_torchvision"]

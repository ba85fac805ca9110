"""myaccel: an accelerator that runs fused conv2d + bias + activation and dense + bias + relu.

Two halves, found by aot and runtime_lite through entry points (see pyproject.toml):

* ``myaccel.compile`` (needs aot): patterns, checks that say why, codegen;
* ``myaccel.runtime`` (needs runtime_lite and numpy only): the ``Backend`` that
  executes the program codegen wrote.

``myaccel.program`` is the payload format both halves share. This package imports
neither half on its own, so a deployment host never imports the compiler.
"""

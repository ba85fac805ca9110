"""The compiler: host planning and the build driver (partitioning lands here too)."""

from aot.compiler.build import BuildResult, build, parse_input_shapes

__all__ = ["BuildResult", "build", "parse_input_shapes"]

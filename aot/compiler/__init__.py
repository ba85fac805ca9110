"""The compiler: partitioning, backends' codegen, host planning and the build driver."""

from aot.compiler.build import BuildResult, QuantizeConfig, build, parse_input_shapes

__all__ = ["BuildResult", "QuantizeConfig", "build", "parse_input_shapes"]

"""The virtual NPU's device profile: memory tiers, engines, throughput.

These numbers are the design's (docs/npu.md); a payload records the profile it
was compiled for, so the dispatch decisions in a bundle can always be explained.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SUPPORTED_DTYPES = frozenset({"float32", "float16", "int8", "int16"})
#: Data movement: the DMA engine copies (or, where the layout allows, the dispatch is a zero-cost view).
LAYOUT_OPS = ("reshape", "flatten", "squeeze", "unsqueeze", "transpose")
DMA_OPS = (*LAYOUT_OPS, "concat", "split", "slice")


@dataclass(frozen=True)
class Tier:
    name: str
    bytes: int
    #: Bytes per cycle between this tier and the engines.
    bandwidth: int


@dataclass(frozen=True)
class DeviceProfile:
    tiers: tuple[Tier, ...] = (
        Tier("L0", 4 * 1024, 512),  # registers
        Tier("L1", 256 * 1024, 256),  # SRAM
        Tier("L2", 512 * 1024, 128),  # CMX
        Tier("L3", 1024 * 1024 * 1024, 32),  # DRAM
    )
    macs_per_cycle: int = 256  # 16x16 systolic array / conv engine
    #: int8 x int8 MACs per cycle of the CONV and MATRIX engines: four 8-bit products per 32-bit lane.
    int8_macs_per_cycle: int = 1024
    vector_lanes: int = 64
    tile_start: int = 32
    tile_floor: int = 8
    #: Cycles one switch between host and NPU costs (synchronisation, descriptors), beside the bytes it moves.
    switch_cycles: int = 5000
    engines: dict[str, str] = field(
        default_factory=lambda: {
            "conv1d": "CONV",
            "conv2d": "CONV",
            "matmul": "MATRIX",
            "dense": "MATRIX",
            "max_pool2d": "POOLING",
            "avg_pool2d": "POOLING",
            "relu": "ACTIVATION",
            "relu6": "ACTIVATION",
            "clip": "ACTIVATION",
            "sigmoid": "ACTIVATION",
            "tanh": "ACTIVATION",
            "gelu": "ACTIVATION",
            "hard_swish": "ACTIVATION",
            "hard_sigmoid": "ACTIVATION",
            "reduce_mean": "POOLING",  # over the spatial axes only: global average pooling
            "conv_transpose2d": "CONV",
            "resize": "VECTOR",
            "layer_norm": "VECTOR",
            **dict.fromkeys(DMA_OPS, "DMA"),
        }
    )

    #: "int8": the build quantized for this NPU (docs/quantization.md); "fp32": it did not.
    precision: str = "fp32"
    #: The calibration table's digest when the build quantized (recorded in each region's compile specs).
    calibration: str | None = None

    def engine(self, op: str) -> str:
        return self.engines.get(op, "VECTOR")

    @property
    def tile_budget(self) -> int:
        """An output larger than L1 is tiled until one tile fits in L1."""
        return self.tiers[1].bytes

    def to_record(self) -> dict:
        return asdict(self)


DEFAULT_PROFILE = DeviceProfile()

"""Deploy a PyTorch model: the final section of TVM's BYOC tutorial, with aot and runtime_lite.

    pip install ./runtime_lite '.[torch]'   # from the repository root; torch==2.13.0, CPU build: README
    python examples/deploy_pytorch.py [--out DIR]

1. export the tutorial's SmallConvNet with torch.export (the weights come in as constants);
2. partition and compile it twice, for an NPU device and for a TensorRT GPU server, and
   print each partition (``Codegen="npu"`` / ``Codegen="tensorrt"`` regions);
3. write one bundle per target;
4. load and run both bundles in a fresh process in which torch, aot and onnx cannot be
   imported (a deployment host has only runtime_lite), and compare with PyTorch's output.

Without a GPU the TensorRT bundle runs the host plan it carries for its region; on a
GPU host with TensorRT the same bundle runs the engine (built here if this machine has
one, else built on first load with AOT_ALLOW_ENGINE_BUILD=1 and cached).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

import aot

TOLERANCE = 1e-4

#: The deployment host: runtime_lite and numpy only. torch, aot and onnx are made unimportable.
DEPLOY = """
import importlib.abc, sys
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "aot", "onnx", "onnxruntime"):
            raise ImportError(f"{name} is not installed on this deployment host")
sys.meta_path.insert(0, NotInstalled())

import numpy as np
import runtime_lite
for bundle in sys.argv[2:]:
    module = runtime_lite.load(bundle)
    (output,) = module.run({"x": np.load(sys.argv[1])})
    np.save(bundle + ".out.npy", output)
    print(f"  {bundle}: " + ", ".join(m["backend"] + (": " + m["placement"] if "placement" in m else "") for m in module.modules))
"""


class SmallConvNet(nn.Module):
    """The tutorial's model: conv-relu-pool-conv-relu."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.conv2 = nn.Conv2d(8, 16, 3)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = self.pool(x)
        return torch.relu(self.conv2(x))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the bundles (default: a temporary directory)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="deploy_pytorch_"))
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    model = SmallConvNet().eval()
    example = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        reference = model(example).numpy()
    program = torch.export.export(model, (example,))

    bundles = []
    for target in ("npu", "tensorrt"):
        # min_region_size=1: this five-op model is smaller than TensorRT's default smallest region
        result = aot.build(program, targets=[target], min_region_size=1, name="small_conv_net")
        print(f"After importing and partitioning for {target}:")
        print(result.partitioned)
        for note in result.notes:
            print(f"  note: {note}")
        path = out / f"small_conv_net.{target}.aotb"
        print(f"  wrote {path} ({result.save(path) / 1e3:.1f} kB)\n")
        bundles.append(path)

    np.save(out / "input.npy", example.numpy())
    print("Running the bundles in a fresh process without torch, aot or onnx:")
    subprocess.run([sys.executable, "-c", DEPLOY, str(out / "input.npy"), *map(str, bundles)], check=True)
    worst = 0.0
    for path in bundles:
        deployed = np.load(f"{path}.out.npy")
        assert deployed.shape == reference.shape, (deployed.shape, reference.shape)
        error = float(np.abs(deployed - reference).max() / np.abs(reference).max())
        print(f"  {path.name}: output {deployed.shape}, max error {error:.1e} relative to PyTorch")
        worst = max(worst, error)
    if worst > TOLERANCE:
        print(f"FAILED: the deployed outputs differ from PyTorch's by {worst:.1e} (> {TOLERANCE})")
        return 1
    print("OK: both deployed bundles match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())

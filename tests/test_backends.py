"""The call_module instruction and the runtime backend registry, driven by a test double.

The double below stands in for an accelerator backend (the NPU and TensorRT have
their own tests); what is verified is the runtime's side of the contract: payloads and
compile specs reach init, inputs reach execute, outputs land in the right slots, and
the failure modes name the module and backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime_lite
from aot.packager import BlobTable, to_bytes
from runtime_lite import BundleError, ExecutionError
from runtime_lite.backends import IncompatiblePayload, get_backend, register_backend


class ScaleBackendTestDouble:
    """Test double: multiplies its input by a factor stored in its payload."""

    name = "scale-test-double"

    def __init__(self):
        self.initialised = []

    def is_available(self):
        return True

    def init(self, payloads, compile_specs):
        if compile_specs.get("device") == "unknown":
            raise IncompatiblePayload("built for another device")
        factor = np.frombuffer(payloads["factor"], np.float32)[0]
        self.initialised.append((float(factor), dict(compile_specs)))
        return factor

    def execute(self, handle, inputs):
        (x,) = inputs
        return [x * handle, x + handle]


@pytest.fixture
def backend():
    double = register_backend(ScaleBackendTestDouble())
    yield double


def bundle_calling(backend_name: str, compile_specs=None, outputs: int = 2) -> bytes:
    blobs = BlobTable()
    factor = blobs.add(np.array([3.0], np.float32))
    header = {
        "required_features": ["host-plan/1", "call-module/1"],
        "producer": {"name": "test"},
        "signature": {
            "inputs": [{"name": "x", "shape": [2], "dtype": "float32"}],
            "outputs": [{"name": f"y{i}", "shape": [2], "dtype": "float32"} for i in range(outputs)],
        },
        "constants": [],
        "modules": [
            {
                "id": "region0",
                "backend": backend_name,
                "compile_specs": compile_specs or {},
                "payloads": {"factor": factor},
            }
        ],
        "plan": {
            "num_slots": 3 + (outputs > 1),  # input, the module's outputs, relu's output
            "inputs": [0],
            "outputs": [2, 3][:outputs],
            "constants": [],
            "instructions": [
                {"op": "call_module", "name": "region0", "in": [0], "out": [1, 3][:outputs], "attrs": {"module": 0}},
                {"op": "relu", "name": "after", "in": [1], "out": [2]},
            ],
        },
    }
    return to_bytes(header, blobs)


def test_call_module_runs_the_backend(backend):
    module = runtime_lite.load(bundle_calling(backend.name, {"device": "test"}))
    y0, y1 = module.run([np.array([1.0, -2.0], np.float32)])
    np.testing.assert_array_equal(y0, [3.0, 0.0])  # relu(x * 3)
    np.testing.assert_array_equal(y1, [4.0, 1.0])
    assert backend.initialised == [(3.0, {"device": "test"})]
    assert get_backend(backend.name) is backend


def test_missing_backend_is_named_at_load():
    with pytest.raises(BundleError, match="needs backend 'no-such-npu'.*install"):
        runtime_lite.load(bundle_calling("no-such-npu"))


def test_incompatible_payload_is_a_bundle_error(backend):
    with pytest.raises(BundleError, match="region0.*cannot use its payload here: built for another device"):
        runtime_lite.load(bundle_calling(backend.name, {"device": "unknown"}))


def test_wrong_output_count_names_the_instruction(backend):
    module = runtime_lite.load(bundle_calling(backend.name, outputs=1))
    with pytest.raises(ExecutionError, match="region0.*returned 2 outputs, the plan expects 1"):
        module.run([np.array([1.0, 2.0], np.float32)])

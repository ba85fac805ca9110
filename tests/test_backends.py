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
from runtime_lite.backends import Backend, IncompatiblePayload, get_backend, register_backend
from runtime_lite.backends.options import Option


class ScaleBackendTestDouble(Backend):
    """Test double: multiplies its input by a factor stored in its payload."""

    name = "scale-test-double"

    def __init__(self):
        self.initialised = []
        self.closed = []

    def init(self, context, payloads, compile_specs):
        if compile_specs.get("device") == "unknown":
            raise IncompatiblePayload("built for another device")
        factor = np.frombuffer(payloads["factor"], np.float32)[0]
        self.initialised.append((float(factor), dict(compile_specs)))
        return factor

    def execute(self, context, handle, inputs):
        (x,) = inputs
        return [x * handle, x + handle]

    def close(self, handle):
        self.closed.append(float(handle))


@pytest.fixture
def backend():
    double = register_backend(ScaleBackendTestDouble())
    yield double


def bundle_calling(backend_name: str, compile_specs=None, outputs: int = 2, module_index: int = 0) -> bytes:
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
                {
                    "op": "call_module",
                    "name": "region0",
                    "in": [0],
                    "out": [1, 3][:outputs],
                    "attrs": {"module": module_index},
                },
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


class OptionsBackendTestDouble(ScaleBackendTestDouble):
    """Test double: declares load options and records the context each call saw."""

    name = "options-test-double"
    load_options = (Option("factor", float, 1.0, "multiplies the payload's factor"),)

    def init(self, context, payloads, compile_specs):
        return super().init(context, payloads, compile_specs) * context.options["factor"]

    def execute(self, context, handle, inputs):
        if context.trace is not None:
            context.trace.append({"backend": self.name, "node": "inside", "wall_s": 0.0, "from_backend": True})
        return super().execute(context, handle, inputs)


def test_backend_options_reach_init_and_unknown_ones_are_refused():
    register_backend(OptionsBackendTestDouble())
    bundle = bundle_calling("options-test-double")
    x = np.array([1.0, -2.0], np.float32)
    assert runtime_lite.load(bundle).run({"x": x})[0].tolist() == [3.0, 0.0]
    doubled = runtime_lite.load(bundle, backend_options={"options-test-double": {"factor": "2"}})
    assert doubled.run({"x": x})[0].tolist() == [6.0, 0.0]  # "2" from a command line, parsed by the option
    with pytest.raises(runtime_lite.OptionError, match="options-test-double has no option 'factr'.*factor"):
        runtime_lite.load(bundle, backend_options={"options-test-double": {"factr": 2}})
    with pytest.raises(runtime_lite.OptionError, match="names 'no-such-backend', which is not installed"):
        runtime_lite.load(bundle, backend_options={"no-such-backend": {}})
    with pytest.raises(runtime_lite.OptionError, match="factor='x'"):
        runtime_lite.load(bundle, backend_options={"options-test-double": {"factor": "x"}})


def test_profile_hands_the_trace_to_the_backend_through_its_context():
    register_backend(OptionsBackendTestDouble())
    module = runtime_lite.load(bundle_calling("options-test-double"))
    events = module.profile({"x": np.ones(2, np.float32)}).events
    assert [e["node"] for e in events if e.get("from_backend")] == ["inside"]
    assert runtime_lite.load(bundle_calling("options-test-double")).run({"x": np.ones(2, np.float32)})  # no trace


def test_close_releases_every_module_and_a_closed_module_refuses_to_run(backend):
    module = runtime_lite.load(bundle_calling("scale-test-double"))
    with module:
        module.run({"x": np.ones(2, np.float32)})
    assert backend.closed == [3.0]
    with pytest.raises(runtime_lite.ExecutionError, match="closed"):
        module.run({"x": np.ones(2, np.float32)})
    module.close()  # twice is harmless
    assert backend.closed == [3.0]


def test_a_failed_load_closes_the_modules_it_already_initialised(backend):
    with pytest.raises(runtime_lite.PlacementError):
        runtime_lite.load(bundle_calling("scale-test-double"), require="scale-test-double,npu")
    assert backend.closed == []  # refused before any init: nothing to close
    with pytest.raises(runtime_lite.BundleError, match="attrs.module"):  # the plan fails after init
        runtime_lite.load(bundle_calling("scale-test-double", module_index=7))
    assert backend.closed == [3.0]


def test_only_a_backend_subclass_registers():
    class NotABackend:
        name = "not-a-backend"

    with pytest.raises(TypeError, match="subclass it"):
        register_backend(NotABackend())


def test_every_load_option_checks_a_value_given_in_code():
    """``load(backend_options=...)`` takes Python values: each option's parser must say how it checks one
    (``options.accepting``), or an int given for a thread count is refused as "expected text"."""
    from runtime_lite.backends import get_backend

    unchecked = [
        f"{name}.{option.name}"
        for name in ("npu", "tensorrt", "onnxruntime")  # the built-in backends (tests register doubles too)
        for option in get_backend(name).load_options
        if getattr(option.parse, "accepts", None) is None
    ]
    assert unchecked == []

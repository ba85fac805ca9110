"""The engine path end to end, with a test stand-in for tensorrt and cuda.bindings (tests/standins).

The stand-in executes recipes with onnxruntime and refuses engines built for another
TensorRT version or compute capability, as TensorRT does. What is under test is ours:
engine selection, the runner's buffers and copies, the cache and its key, rebuilds,
and the fallbacks. Whether real TensorRT builds our recipes is tests/gpu/'s job.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import runtime_lite
from aot.compiler import build
from aot.compiler.backends.tensorrt import TensorRTOptions
from aot.testing import relative_l2
from runtime_lite.backends.tensorrt.builder import EngineBuildError, build_engine
from runtime_lite.backends.tensorrt.engine_cache import EngineCache
from runtime_lite.backends.tensorrt.spec import BuildSettings
from tests.helpers import build_and_load, conv_relu_graph
from tests.tensorrt_standin import child_env

WEIGHT = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32)
DATA = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)


def _build(tmp_path, batch=1, **settings):
    options = TensorRTOptions(BuildSettings(**settings), cache=EngineCache(tmp_path / "cache"), progress=None)
    return build(conv_relu_graph(WEIGHT, batch), targets=["tensorrt"], min_region_size=1,
                 backend_options={"tensorrt": options})  # fmt: skip


def _host(data=DATA):
    return build_and_load(conv_relu_graph(WEIGHT, data.shape[0])).run({"data": data})[0]


def _engine_tags(result):
    (record,) = result.header["modules"]
    return [e["tags"] for e in record["compile_specs"]["engines"]]


def test_build_stores_a_tagged_engine_and_the_bundle_runs_it(machine, tmp_path):
    result = _build(tmp_path)
    (tags,) = _engine_tags(result)
    assert tags["tensorrt"] == "10.13.0" and tags["compute_capability"] == "8.6"
    assert tags["precision"] == "fp32" and tags["gpu"] == "Stand-in RTX" and len(tags["key"]) == 64
    assert machine.builds == 1
    module = runtime_lite.load(result.to_bytes(), backend_options={"tensorrt": {"cache_dir": tmp_path / "cache"}})
    assert "engine 0 from the bundle" in module.modules[0]["placement"]
    out = module.run({"data": DATA})[0]
    assert relative_l2(out, _host()) <= 1e-5
    assert module.profile({"data": DATA}).events[0]["placement"] == "engine"
    required = runtime_lite.load(
        result.to_bytes(), backend_options={"tensorrt": {"cache_dir": tmp_path / "cache"}}, require=("tensorrt",)
    )
    assert required.placement["tensorrt_0"]["runs_on"] == "tensorrt"  # an engine fits: the requirement is met
    _build(tmp_path)  # a second build of the same model on this machine: a cache hit
    assert machine.builds == 1


def test_another_gpu_falls_back_rebuilds_when_allowed_then_hits_the_cache(machine, tmp_path, caplog):
    bundle = _build(tmp_path).to_bytes()
    machine.become(cc="9.0", gpu="Stand-in H100")
    with caplog.at_level(logging.INFO, logger="runtime_lite.tensorrt"):
        refused = runtime_lite.load(
            bundle, backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": False}}
        )
    assert refused.modules[0]["placement"].startswith("on the host: no engine fits")
    assert "built for sm 8.6" in refused.modules[0]["placement"]
    assert [r.levelname for r in caplog.records if r.name == "runtime_lite.placement"] == ["WARNING"]
    assert refused.placement["tensorrt_0"]["runs_on"] == "host"
    with pytest.raises(runtime_lite.PlacementError, match="no engine fits"):
        runtime_lite.load(
            bundle,
            backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": False}},
            require="tensorrt",
        )
    np.testing.assert_array_equal(refused.run({"data": DATA})[0], _host())

    rebuilt = runtime_lite.load(
        bundle, backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": True}}
    )
    assert "built from the recipe into the cache" in rebuilt.modules[0]["placement"]
    assert machine.builds == 2
    hit = runtime_lite.load(
        bundle, backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": True}}
    )
    assert "from the cache" in hit.modules[0]["placement"] and machine.builds == 2
    assert relative_l2(hit.run({"data": DATA})[0], _host()) <= 1e-5


def test_environment_variable_allows_building(machine, tmp_path, monkeypatch):
    bundle = _build(tmp_path, hardware_compatibility="none").to_bytes()
    machine.become(cc="7.5")
    monkeypatch.setenv("AOT_ALLOW_ENGINE_BUILD", "1")
    monkeypatch.setenv("AOT_CACHE_DIR", str(tmp_path / "env-cache"))
    module = runtime_lite.load(bundle)
    assert "built from the recipe" in module.modules[0]["placement"]
    assert len(EngineCache(tmp_path / "env-cache").entries()) == 1


def test_a_corrupt_cache_entry_is_rebuilt(machine, tmp_path):
    bundle = _build(tmp_path).to_bytes()
    machine.become(cc="9.0")
    runtime_lite.load(
        bundle, backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": True}}
    )
    cache = EngineCache(tmp_path / "cache")
    entry = max(cache.entries(), key=lambda e: e.last_used)
    path = cache.directory / f"{entry.key}.engine"
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    builds = machine.builds
    module = runtime_lite.load(
        bundle, backend_options={"tensorrt": {"cache_dir": tmp_path / "cache", "allow_engine_build": True}}
    )
    assert "built from the recipe" in module.modules[0]["placement"] and machine.builds == builds + 1
    assert relative_l2(module.run({"data": DATA})[0], _host()) <= 1e-5


def test_hardware_compatible_engines_run_on_any_ampere_or_newer(machine, tmp_path):
    bundle = _build(tmp_path, hardware_compatibility="ampere_plus").to_bytes()
    machine.become(cc="9.0")
    assert "engine 0 from the bundle" in runtime_lite.load(bundle).modules[0]["placement"]
    machine.become(cc="7.5")
    assert (
        "on the host"
        in runtime_lite.load(bundle, backend_options={"tensorrt": {"allow_engine_build": False}}).modules[0][
            "placement"
        ]
    )


def test_version_compatible_engines_need_an_explicit_opt_in(machine, tmp_path):
    bundle = _build(tmp_path, version_compatible=True).to_bytes()
    machine.become(version="10.14.1")
    refused = runtime_lite.load(bundle, backend_options={"tensorrt": {"allow_engine_build": False}})
    assert "on the host" in refused.modules[0]["placement"]
    accepted = runtime_lite.load(
        bundle, backend_options={"tensorrt": {"allow_engine_build": False, "allow_version_compatible": True}}
    )
    assert "engine 0 from the bundle" in accepted.modules[0]["placement"]
    machine.become()  # the building TensorRT itself: host code is still embedded, still an opt-in
    assert (
        "version-compatible"
        in runtime_lite.load(bundle, backend_options={"tensorrt": {"allow_engine_build": False}}).modules[0][
            "placement"
        ]
    )
    rebuilt = runtime_lite.load(
        bundle, backend_options={"tensorrt": {"allow_engine_build": True, "cache_dir": tmp_path / "cache"}}
    )
    assert "built from the recipe" in rebuilt.modules[0]["placement"]  # without the opt-in: a plain engine
    newest = max(EngineCache(tmp_path / "cache").entries(), key=lambda e: e.last_used)
    assert newest.ingredients["version_compatible"] is False


def test_fp16_engine_within_fp16_tolerance(machine, tmp_path):
    module = runtime_lite.load(_build(tmp_path, precision="fp16").to_bytes())
    assert "from the bundle" in module.modules[0]["placement"]
    out = module.run({"data": DATA})[0]
    assert 0 < relative_l2(out, _host()) <= 1e-2  # not bit-equal: the engine really ran in fp16


def test_a_symbolic_batch_gets_a_profile_and_runs_any_batch_in_it(machine, tmp_path):
    options = TensorRTOptions(BuildSettings(batch=(1, 2, 8)), cache=EngineCache(tmp_path / "cache"), progress=None)
    result = build(conv_relu_graph(WEIGHT, "N"), targets=["tensorrt"], min_region_size=1,
                   backend_options={"tensorrt": options})  # fmt: skip
    (tags,) = _engine_tags(result)
    assert tags["profiles"]["data"] == [[1, 3, 32, 32], [2, 3, 32, 32], [8, 3, 32, 32]]
    module = runtime_lite.load(result.to_bytes())
    for batch in (1, 3, 8):
        data = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        assert relative_l2(module.run({"data": data})[0], _host(data)) <= 1e-5


def test_a_recipe_the_parser_rejects_is_an_error_naming_the_region(machine):
    with pytest.raises(EngineBuildError, match="tensorrt_7: TensorRT's ONNX parser rejected the recipe"):
        build_engine(b"not onnx", BuildSettings(), {}, label="tensorrt_7", progress=None)


DEPLOY = textwrap.dedent(
    """
    import sys, numpy as np, runtime_lite
    assert "aot" not in sys.modules
    module = runtime_lite.load(sys.argv[1])
    data = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(sys.argv[2], module.run({"data": data})[0])
    print(module.modules[0]["placement"])
    assert "aot" not in sys.modules, "the runtime imported the compiler"  # (onnx: the stand-in's own import)
    """
)


def test_workstation_to_fleet_flow(tmp_path):
    """aot-build on one GPU; eight processes on another GPU start at once and build once; the next one hits."""
    log = tmp_path / "builds.log"
    cache = tmp_path / "cache"
    model = tmp_path / "conv_relu.onnx"
    import onnx

    from aot.compiler.backends.tensorrt import write_recipe

    onnx.save(write_recipe(conv_relu_graph(WEIGHT)), model)  # a plain ONNX model of the tutorial network
    bundle = tmp_path / "model.aotb"
    workstation = child_env(cache, cc="8.6", build_log=str(log))
    built = subprocess.run(
        [sys.executable, "-m", "aot.cli.build", str(model), "-o", str(bundle), "--target", "tensorrt",
         "--min-region-size", "1", "--cache-dir", str(cache)],
        env=workstation, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "0 hits, 1 misses, 1 built" in built.stdout
    fleet = child_env(cache, cc="9.0", gpu="Stand-in H100", build_log=str(log))
    fleet["AOT_ALLOW_ENGINE_BUILD"] = "1"
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", DEPLOY, str(bundle), str(tmp_path / f"out{i}.npy")],
            env=fleet,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(8)
    ]
    results = [p.communicate(timeout=120) for p in starts]
    assert all(p.returncode == 0 for p in starts), [err for _, err in results]
    assert [line.split()[2] for line in log.read_text().splitlines()] == ["8.6", "9.0"]  # one build per GPU
    placements = [out.strip() for out, _ in results]
    assert sum("built from the recipe" in p for p in placements) == 1
    assert sum("from the cache" in p for p in placements) == 7
    later = subprocess.run([sys.executable, "-c", DEPLOY, str(bundle), str(tmp_path / "later.npy")], env=fleet,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "from the cache" in later.stdout and len(log.read_text().splitlines()) == 2
    expected = _host()
    for path in [tmp_path / f"out{i}.npy" for i in range(8)] + [tmp_path / "later.npy"]:
        assert relative_l2(np.load(path), expected) <= 1e-5

"""A bundle cannot make the runtime touch files the caller did not name.

Each case runs in a child process with a `sys.addaudithook` hook (PEP 578) installed
after the imports, recording every file the runtime opens, lists, creates, renames or
removes while loading and running. Allowed: the bundle path the caller gave and, for
TensorRT regions, the engine cache directory the caller (or $AOT_CACHE_DIR) named.
Hostile bundles put path-like strings everywhere a name travels (model name, module
ids, output names, engine tags): none of them may reach the file system.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from aot.compiler import build
from aot.packager import to_bytes
from runtime_lite.files import default_cache_dir
from tests.conftest import small_cnn_model
from tests.tensorrt_standin import child_env

ESCAPES = ["../../../../tmp/escaped", "/tmp/escaped-absolute", "~/escaped", "C:\\escaped"]

WATCH = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import runtime_lite, runtime_lite.backends.npu, runtime_lite.backends.tensorrt.engine_cache  # imports read .py files: do them first
    import runtime_lite.format.weights
    from runtime_lite.kernels import KERNELS  # the host kernels load on first use (cold start): load them now
    import runtime_lite.backends.tensorrt.builder, runtime_lite.backends.tensorrt.gpu
    try:
        import onnxruntime, tensorrt, cuda.bindings.runtime  # the test stand-ins, when on the path
    except ImportError:
        pass
    EVENTS = ("open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.replace", "os.remove",
              "os.rmdir", "os.symlink", "os.link", "os.truncate", "os.chmod", "shutil.rmtree", "shutil.copyfile")
    touched = []
    def hook(event, args):
        if event in EVENTS:
            for arg in args[:1] if event == "open" else args[:2]:  # open's second is its mode
                if isinstance(arg, (str, bytes, os.PathLike)):
                    name = os.fsdecode(arg)  # relative: opened against a directory descriptor (dir_fd)
                    touched.append([event, os.path.abspath(name) if os.path.isabs(name) else "@" + name])
    sys.addaudithook(hook)
    try:
        module = runtime_lite.load(sys.argv[1])
        module.run([np.zeros([1 if isinstance(d, str) else d for d in s.shape], s.dtype) for s in module.inputs])
        outcome = "ran"
    except runtime_lite.RuntimeLiteError as e:
        outcome = type(e).__name__
    print(json.dumps({"outcome": outcome, "touched": touched}))
    """
)


def _watch(bundle_path, env=None) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", WATCH, str(bundle_path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


#: The process's own memory map, read once by runtime_lite/kernels/gemm.py to find numpy's OpenBLAS
#: (already loaded) and run it single-threaded under its own pool, and the CPU's description, read
#: once by kernels/gemm_policy.py for its cache key: no file outside the process and the machine.
OWN_PROCESS = ("/proc/self/maps", "/proc/cpuinfo")


def _host_tuning_dir() -> str:
    """Where gemm_policy.py caches this machine's GEMM policy: the user's cache dir, never a bundle's word."""
    return str(default_cache_dir() / "host-tuning")


#: Names the engine cache opens relative to the directory descriptors it walked down from the
#: cache root without following symlinks (runtime_lite/backends/tensorrt/engine_cache.py); the root
#: itself is opened by its absolute path, which must be one the caller named. The audit event of an
#: ``os.open(name, dir_fd=...)`` carries only ``name``: these are recorded as ``@name``.
CACHE_RELATIVE = re.compile(
    r"@(tensorrt-engines|v1|timing|\.evict\.lock|[0-9a-f]{64}\.(engine|json|lock)|\.[^/]+\.tmp|trt[^/]*\.cache)"
)


def _outside(touched, *allowed) -> list:
    roots = [str(a) for a in allowed] + [_host_tuning_dir()]
    key_file = os.environ.get("AOT_CACHE_KEY_FILE")  # the cache's HMAC key, outside the cache (tests/conftest.py)
    return [
        t
        for t in touched
        if t[1] not in OWN_PROCESS
        and t[1] != key_file
        and not (t[1].startswith("@") and CACHE_RELATIVE.fullmatch(t[1]) and roots[1:])
        and not any(t[1] == r or t[1].startswith(r.rstrip("/") + "/") for r in roots)
    ]


def _hostile(header: dict) -> dict:
    """Path-like strings in every field that names something."""
    header = copy.deepcopy(header)
    header["name"] = ESCAPES[0]
    header["producer"] = {"name": ESCAPES[1], "version": ESCAPES[2]}
    for i, module in enumerate(header.get("modules", [])):
        module["id"] = ESCAPES[i % len(ESCAPES)]
    return header


def test_a_host_bundle_touches_only_its_own_file(tmp_path):
    path = tmp_path / "host.aotb"
    path.write_bytes(build(small_cnn_model()).to_bytes())
    seen = _watch(path)
    assert seen["outcome"] == "ran"
    assert _outside(seen["touched"], path) == []
    assert [t for t in seen["touched"] if t[1] == str(path)]  # the hook really sees opens


def test_path_like_names_in_a_hostile_bundle_never_reach_the_file_system(tmp_path):
    result = build(small_cnn_model(), targets=["npu"])
    path = tmp_path / "hostile.aotb"
    path.write_bytes(to_bytes(_hostile(result.header), result.blobs))
    seen = _watch(path)
    assert seen["outcome"] in ("ran", "BundleError")
    assert _outside(seen["touched"], path) == []


@pytest.mark.parametrize("cc", ["8.6", "9.0"], ids=["engine-in-bundle", "rebuild-into-cache"])
def test_tensorrt_regions_touch_only_the_bundle_and_the_named_cache(tmp_path, cc):
    """With the test stand-in GPU: an engine from the bundle, or a rebuild into the cache the caller named."""
    cache = tmp_path / "cache"
    env = child_env(cache, cc="8.6")
    path = tmp_path / "trt.aotb"
    script = textwrap.dedent(
        f"""
        import sys
        from aot.compiler import build
        from aot.compiler.backends.tensorrt import TensorRTOptions
        from aot.packager import to_bytes
        from runtime_lite.backends.tensorrt.spec import BuildSettings
        from runtime_lite.backends.tensorrt.engine_cache import EngineCache
        from tests.helpers import conv_relu_graph
        from tests.test_file_access import _hostile
        import numpy as np
        weight = np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32)
        options = TensorRTOptions(BuildSettings(), cache=EngineCache({str(cache)!r}), progress=None)
        result = build(conv_relu_graph(weight), targets=["tensorrt"], min_region_size=1,
                       backend_options={{"tensorrt": options}})
        open({str(path)!r}, "wb").write(to_bytes(_hostile(result.header), result.blobs))
        """
    )
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    deploy = child_env(cache, cc=cc)
    deploy["AOT_ALLOW_ENGINE_BUILD"] = "1"
    seen = _watch(path, deploy)
    assert seen["outcome"] == "ran"
    assert _outside(seen["touched"], path, cache) == []
    if cc == "9.0":
        assert [t for t in seen["touched"] if t[1].startswith(str(cache))]  # it did write its rebuild there


UNKNOWN_BACKEND_TWICE = WATCH.rsplit("try:", 1)[0] + textwrap.dedent(
    """
    first = None
    for attempt in range(2):
        try:
            runtime_lite.load(sys.argv[1])
        except runtime_lite.BundleError:
            pass
        if first is None:
            first, touched[:] = list(touched), []
    print(json.dumps({"first": first, "second": touched}))
    """
)


def test_an_unknown_backend_reads_distribution_metadata_once_per_process(tmp_path):
    """What docs/RELIABILITY.md says: the first unknown backend name reads the installed distributions'
    metadata (importlib.metadata's entry-point query opens each ``*.dist-info/entry_points.txt``); the
    answer is kept, so later loads in the process read nothing but their bundle."""
    result = build(small_cnn_model(), targets=["npu"])
    header = copy.deepcopy(result.header)
    header["modules"][0]["backend"] = "acme_npu"
    bundle = tmp_path / "unknown.aotb"
    bundle.write_bytes(to_bytes(header, result.blobs))
    out = subprocess.run(
        [sys.executable, "-c", UNKNOWN_BACKEND_TWICE, str(bundle)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    metadata = [t for t in seen["first"] if ".dist-info" in t[1] or ".egg-info" in t[1] or t[0] == "os.listdir"
                or t[0] == "os.scandir"]  # fmt: skip
    assert any(t[1].endswith("entry_points.txt") for t in metadata), seen["first"][:5]
    others = [t for t in _outside(seen["first"], bundle) if t not in metadata]
    assert all(t[1].endswith((".pth", "site-packages")) or "/site-packages" in t[1] or "python3" in t[1]
               for t in others), others[:5]  # fmt: skip
    assert _outside(seen["second"], bundle) == []

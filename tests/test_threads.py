"""One Module shared by many threads gives exactly the single-threaded results."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

import aot
import runtime_lite
from aot.testing import load_zoo_model
from aot.testing.zoo import zoo_input


def test_shared_module_across_threads():
    model = load_zoo_model("squeezenet")
    module = runtime_lite.load(aot.build(model).to_bytes())
    name = module.inputs[0].name
    base = zoo_input(model)[name]
    inputs = [base * (1 + i / 10) for i in range(16)]
    expected = [module.run([x])[0] for x in inputs]

    def work(i):
        return [np.array_equal(module.run([inputs[(i + k) % 16]])[0], expected[(i + k) % 16]) for k in range(6)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [ok for batch in pool.map(work, range(16)) for ok in batch]
    assert len(results) == 96 and all(results)

"""Every kernel's declared cost bounds what it really allocates, and the plan checks it before the call.

The run budget (``load(..., max_memory=...)``) is enforced at one choke point: the host
plan asks each instruction's kernel for its ``cost`` (outputs and scratch, from the
operands' shapes and dtypes) and refuses the instruction when the live activations plus
that figure would pass the budget, before the kernel runs. These tests keep the costs
honest: each kernel runs on a sample under tracemalloc (which sees numpy's buffers) and
must allocate no more than it declared. A kernel added without a sample fails here.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from runtime_lite.kernels import KERNELS
from runtime_lite.kernels.cost import FIXED_OVERHEAD
from tests.kernel_samples import attributes, kernel_of, samples

SAMPLES = samples()


def test_every_kernel_has_a_cost_and_a_sample():
    covered = {kernel_of(case) for case in SAMPLES}
    assert sorted(set(KERNELS) - covered) == [], "add a sample to tests/kernel_samples.py"
    for name, kernel in KERNELS.items():
        assert kernel.cost.__name__ != "_no_cost", f"{name} registered without a cost"


def test_a_kernel_cannot_be_registered_without_a_cost():
    from runtime_lite.kernels.registry import kernel

    with pytest.raises(TypeError, match="cost"):
        kernel("never_registered")(lambda x: x)  # the keyword is required


def _measure(case: str) -> tuple[int, int]:
    operands, given = SAMPLES[case]
    fn = KERNELS[kernel_of(case)]
    attrs = attributes(case, given)
    declared = fn.cost(*operands, **attrs)
    with np.errstate(all="ignore"):
        fn.fn(*operands, **attrs)  # warm caches (divisors, constant rows) so they are not counted
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            result = fn.fn(*operands, **attrs)
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    del result
    return declared, peak


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_a_kernel_allocates_no_more_than_its_cost(case):
    declared, peak = _measure(case)
    assert peak <= declared + FIXED_OVERHEAD, f"{case}: allocated {peak:,} bytes, its cost says {declared:,}"
    print(f"{case}: cost {declared:,}, allocated {peak:,}")


@pytest.mark.parametrize("case", ["conv1d_strided", "conv2d_strided"])
def test_a_strided_convolution_is_not_charged_for_its_input_extent(case):
    """Only the stride-1 shifted GEMMs compute over the padded extent: charging every convolution for it refused
    silero VAD's STFT (stride 128) past 100 s of audio, 5 GB charged for 10 MB used."""
    declared, peak = _measure(case)
    assert declared <= 4 * peak + FIXED_OVERHEAD, f"{case}: cost {declared:,} for {peak:,} bytes allocated"

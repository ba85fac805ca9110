"""Unique names in constant time (aot/ir/names.py): the same names as a search from the start, without its cost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aot.ir.names import NamePool


def _from_the_start(taken: set[str], base: str) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


@given(st.lists(st.sampled_from(["x", "x_1", "x_2", "y", "x_1_1", "y_3"]), max_size=40))
def test_names_are_those_a_search_from_the_start_gives(bases):
    pool, taken = NamePool(), set()
    for base in bases:
        assert pool.take(base) == _from_the_start(taken, base)
    assert pool.taken == taken


def test_a_copy_names_on_without_touching_the_original():
    pool = NamePool()
    assert [pool.take("v") for _ in range(3)] == ["v", "v_1", "v_2"]
    twin = pool.copy()
    assert twin.take("v") == "v_3" and "v_3" not in pool and pool.take("v") == "v_3"


class CountingSet(set):
    """A test double of the pool's set of taken names that counts the lookups."""

    lookups = 0

    def __contains__(self, name):
        CountingSet.lookups += 1
        return super().__contains__(name)


def test_naming_stays_linear_in_the_names_handed_out():
    """An unrolled LSTM names thousands of values from one base; the search from the start made that quadratic."""
    pool = NamePool(CountingSet())
    names = [pool.take("Slice_node") for _ in range(5_000)]
    assert len(set(names)) == 5_000 and names[-1] == "Slice_node_4999"
    assert CountingSet.lookups <= 2 * 5_000  # from the start: 12.5 million

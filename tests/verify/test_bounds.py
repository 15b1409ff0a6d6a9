"""interp.bounds: an interpreted access must lie whole inside one of its launch's storages (numpy, no kernel)."""

import numpy as np
import pytest

from autotune.verify.interp import bounds
from autotune.verify.interp.bounds import OutOfBounds


@pytest.fixture
def two_storages():
    bounds._active.append((np.array([1000, 5000], dtype=np.uint64), np.array([2000, 6000], dtype=np.uint64), "k"))
    yield
    bounds._active.pop()


@pytest.mark.parametrize("addresses, mask", [
    ([1000, 1996], None),  # the first storage's first and last 4-byte element
    ([1000, 5996], None),  # one in each
    ([1000, 2000, 9000], [True, False, False]),  # lanes masked off are not accesses
])
def test_accesses_inside_the_storages_pass(two_storages, addresses, mask):
    bounds._check(np.array(addresses, dtype=np.uint64), None if mask is None else np.array(mask), 4, "loads from")


@pytest.mark.parametrize("addresses", [
    [1000, 1997],  # an element that straddles the storage's end
    [1000, 3000],  # between the storages
    [999],  # just before the first
    [1000, 2 ** 64 - 2],  # past 2**64 - 4: + 4 bytes wraps to an address below the storage's end
])
def test_an_access_outside_every_storage_is_out_of_bounds(two_storages, addresses):
    with pytest.raises(OutOfBounds, match="outside every tensor argument"):
        bounds._check(np.array(addresses, dtype=np.uint64), None, 4, "loads from")

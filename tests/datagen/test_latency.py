"""The one definition of a measured latency: the median of the repeats; failures are None."""

import math

import pytest

from datagen.measure import FAILED_SECS, latency_stats, run_latency


def test_median_of_repeats():
    assert run_latency([3e-3, 1e-3, 2e-3, 10e-3]) == pytest.approx(2.5e-3)
    assert run_latency((1.0,)) == 1.0


@pytest.mark.parametrize("secs, error", [
    ([], None), (None, None), ([1e-3, 1e10], None), ([FAILED_SECS], None),
    ([1e-3, math.nan], None), ([0.0], None), ([-1e-3], None), ([1e-3], "RuntimeError: ..."),
])
def test_failures_have_no_latency(secs, error):
    assert run_latency(secs, error) is None


def test_latency_columns():
    stats = latency_stats([1.0, 3.0])
    assert stats == {"latency_median": 2.0, "latency_std": 1.0, "latency_cv": 0.5}
    assert all(math.isnan(v) for v in latency_stats([]).values())

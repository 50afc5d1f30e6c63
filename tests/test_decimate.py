"""Min/max decimation keeps charts bounded without hiding spikes."""

from __future__ import annotations

import numpy as np
import pytest

from leakwidget.report.decimate import minmax


def test_short_series_is_returned_unchanged() -> None:
    x = np.arange(10.0)
    y = x**2
    dx, dy = minmax(x, y, max_points=2000)
    np.testing.assert_array_equal(dx, x)
    np.testing.assert_array_equal(dy, y)
    dy[0] = -1  # a copy, not a view of the caller's data
    assert y[0] == 0


@pytest.mark.parametrize("n", [2001, 10_000, 1_000_003])
def test_long_series_never_exceeds_max_points(n: int) -> None:
    rng = np.random.default_rng(n)
    x = np.sort(rng.uniform(0, 100, n))
    y = rng.normal(size=n)
    dx, dy = minmax(x, y, max_points=2000)
    assert 1000 < dx.size <= 2000
    assert dx.shape == dy.shape


def test_a_single_spike_survives_decimation() -> None:
    n = 500_000
    x = np.arange(n, dtype=float)
    y = np.zeros(n)
    y[123_457] = 50.0  # one sample high
    y[400_001] = -7.0  # one sample low
    dx, dy = minmax(x, y, max_points=500)
    assert dy.max() == 50.0
    assert dx[np.argmax(dy)] == 123_457
    assert dy.min() == -7.0


def test_ends_are_kept_and_time_stays_ordered() -> None:
    rng = np.random.default_rng(0)
    n = 50_000
    x = np.cumsum(rng.uniform(0.001, 0.01, n))
    y = np.cumsum(rng.normal(size=n))
    dx, dy = minmax(x, y, max_points=300)
    assert dx[0] == x[0] and dy[0] == y[0]
    assert dx[-1] == x[-1] and dy[-1] == y[-1]
    assert np.all(np.diff(dx) > 0)


def test_every_bucket_extreme_is_a_real_sample() -> None:
    rng = np.random.default_rng(1)
    x = np.arange(20_000, dtype=float)
    y = rng.normal(size=x.size)
    dx, dy = minmax(x, y, max_points=100)
    # Each returned point is an original (x, y) pair, not an interpolated or averaged value.
    np.testing.assert_array_equal(y[dx.astype(int)], dy)
    # The global extremes always survive.
    assert dy.max() == y.max() and dy.min() == y.min()


@pytest.mark.parametrize(
    "x, y, max_points, message",
    [
        (np.zeros((2, 2)), np.zeros((2, 2)), 100, "1-D"),
        (np.zeros(5), np.zeros(4), 100, "differ in length"),
        (np.zeros(5), np.zeros(5), 3, "at least 4"),
    ],
)
def test_bad_input_gives_a_clear_error(x, y, max_points, message) -> None:
    with pytest.raises(ValueError, match=message):
        minmax(x, y, max_points=max_points)

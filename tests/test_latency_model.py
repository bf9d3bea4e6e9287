"""The latency model: through the origin from one measurement, least squares from two, borrowed across recipes."""

import pytest

from edgeprune.search.latency import LatencyModel


def test_nothing_measured_predicts_nothing():
    assert LatencyModel().predict("int8", 1_000) is None


def test_one_measurement_scales_with_flops():
    model = LatencyModel()
    model.observe("int8", 1_000_000, 10.0)
    assert model.predict("int8", 500_000) == pytest.approx(5.0)


def test_two_measurements_fit_a_line_with_a_fixed_cost():
    model = LatencyModel()
    model.observe("int8", 1_000, 3.0)  # 1 ms fixed + 2 ms per 1000 FLOPs
    model.observe("int8", 2_000, 5.0)
    assert model.predict("int8", 4_000) == pytest.approx(9.0)
    assert model.predict("int8", 0) == pytest.approx(1.0)


def test_noise_never_makes_more_work_faster():
    model = LatencyModel()
    model.observe("int8", 1_000, 5.0)
    model.observe("int8", 2_000, 4.0)
    assert model.predict("int8", 10_000) == pytest.approx(4.5)


def test_an_unmeasured_recipe_borrows_another_recipes_measurements():
    model = LatencyModel()
    model.observe("int8", 1_000, 2.0)
    assert model.predict("int4", 2_000) == pytest.approx(4.0)


def test_before_any_measurement_the_profiles_roofline_is_a_lower_bound():
    model = LatencyModel(peak_gflops=100.0, bandwidth_gbs=10.0)
    assert model.predict("int8", 2_000_000_000, 10_000_000) == pytest.approx(20.0)  # compute-bound: 2 GFLOP / 100
    assert model.predict("int8", 1_000, 50_000_000) == pytest.approx(5.0)  # memory-bound: 50 MB / 10 GB/s
    assert LatencyModel().predict("int8", 1_000, 1_000) is None  # a profile without figures (host)
    model.observe("int8", 1_000, 3.0)
    assert model.predict("int8", 2_000, 50_000_000) == pytest.approx(6.0)  # measurements replace the bound

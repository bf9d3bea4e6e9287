"""The latency model: through the origin from one measurement, least squares from two, borrowed across recipes."""

import pytest

from edgeprune.search.latency import BASES, LatencyModel, prediction_error


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
    model.observe("int8", 2_000, 4.0)  # a falling line is noise: latency scales with work through the origin
    assert model.predict("int8", 10_000) == pytest.approx(30.0) and model.predict("int8", 500) == pytest.approx(1.5)
    assert model.basis("int8") == "proportional"


def test_measurements_of_nearly_the_same_work_fit_no_line():
    """MiniLM, LiteRT int8: FFN −25 % at 2.37 ms, 6 heads more removed at 2.46 ms (noise). A line through them
    would predict every smaller candidate at 2.4 ms; scaled through the origin, half the work is half the time."""
    model = LatencyModel()
    model.observe("litert-int8", 1_000_000, 2.37)
    model.observe("litert-int8", 950_000, 2.46)
    assert model.basis("litert-int8") == "proportional"
    assert model.predict("litert-int8", 500_000) == pytest.approx((2.37 + 2.46) / 1_950_000 * 500_000)
    model.observe("litert-int8", 500_000, 1.34)  # now the work spans 2×: a line with a fixed cost
    assert model.basis("litert-int8") == "fitted" and model.predict("litert-int8", 0) > 0


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


def test_the_basis_of_a_prediction_follows_what_the_model_has_seen():
    model = LatencyModel()
    assert model.basis("int8") == "none"
    assert LatencyModel(peak_gflops=50.0).basis("int8") == "roofline"
    model.observe("int8", 1_000_000, 10.0)
    assert (model.basis("int8"), model.basis("int4")) == ("proportional", "borrowed")
    model.observe("int8", 1_000_000, 10.4)  # the same FLOPs again: still a ratio through the origin
    assert model.basis("int8") == "proportional"
    model.observe("int8", 2_000_000, 18.0)
    assert model.basis("int8") == "fitted" and set(BASES) == {"none", "roofline", "proportional", "borrowed", "fitted"}


def test_prediction_error_is_the_distribution_of_relative_errors():
    error = prediction_error([(11.0, 10.0), (9.0, 10.0), (15.0, 10.0), (10.0, 10.0)])
    assert (error.count, error.within_10_percent) == (4, 0.75)
    assert error.median_abs_percent == pytest.approx(10.0) and error.p90_abs_percent == pytest.approx(50.0)
    assert error.describe() == ("75% of 4 predictions within ±10 % of the measured p50 (median error 10.0 %, "
                                "p90 50.0 %)")
    assert prediction_error([]).describe() == "no benchmarked candidate had a latency prediction"


def test_a_fit_result_measures_its_latency_model_on_device_benchmarks_only():
    from tests.test_report_html import fit_result

    result = fit_result()
    benchmarked = [c for c in result.candidates if c.benchmark is not None]
    for candidate, predicted in zip(benchmarked, (15.0, 11.5, 12.0), strict=True):  # measured p50s: ~14, ~11, ~9
        candidate.predicted_latency_ms, candidate.latency_basis = predicted, "fitted"
    benchmarked[-1].benchmark.measured = False  # an estimate: says nothing about the model
    error = result.latency_model_error()
    assert error.count == 2 and error.by_basis == {"fitted": 2}
    pairs = zip(benchmarked[:2], (15.0, 11.5), strict=True)
    relative = [abs(p - c.benchmark.p50_ms) / c.benchmark.p50_ms * 100 for c, p in pairs]
    assert error.median_abs_percent == pytest.approx(sum(relative) / 2)

"""Every config and result type round-trips through JSON to an equal value (in the spirit of torchao's
test/core/test_config.py), and result.json reads back into a typed FitResult, older formats included."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeprune.data import SplitRatios
from edgeprune.devices import load_profile
from edgeprune.devices.profile import DeviceProfile
from edgeprune.errors import UserInputError
from edgeprune.generation.bench import DecodeSpeed, GenerationBenchmark, TeacherAgreement
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.structure import StructurePlan
from edgeprune.quantize import RECIPES, Recipe
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.recovery import DistillConfig
from edgeprune.search.budget import Budget, BudgetCheck
from edgeprune.search.options import FitOptions
from edgeprune.search.result import RESULT_FORMAT_VERSION, BuiltArtifact, FitResult, Trial
from edgeprune.search.searcher import Proposal
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, json_text, to_jsonable
from edgeprune.tasks.base import Quality
from tests.test_report_html import fit_result

CONFIGS = [
    Budget(),
    Budget(max_mb=12.5, max_memory_mb=300, max_latency_ms=8, latency_percentile=90, max_energy_mj=40,
           min_quality="-1%"),
    Budget(min_quality=0.93),
    Budget(max_mb=120, max_memory_mb=400, min_decode_tps=40, max_ttft_ms=300),
    GenerationBenchmark("model.pte", 2, 512, 128, 40.0, 150.0, 5, [DecodeSpeed(128, 60, 1.2)], 300.0, 180.0,
                        23_592_960, "pi5-emulated", "emulated (QEMU user mode on x86_64)"),
    TeacherAgreement(0.8125, 8, 32, 32),
    FitOptions(),
    FitOptions(criterion="taylor", normalize="l2", compensate=False, recipes=("int8", "int4"), trim_vocabulary=True,
               ffn_fractions=(0.0, 0.5), layer_removals=(0, 1), head_step=2, quality_tolerance=0.01),
    BudgetCheck("latency p90", 8.0, 7.5, "ms", True, "measured", "latency"),
    Quality("accuracy", 0.95, True, "validation", 335, {"macro_f1": 0.94}),
    Trial("int8", 4, 9_000_000, 9_100_000, True, 12.0, False, "", 0.25, 1, True, 0.94),
    Shape(4, 0.25, 1, True),
    Proposal("int4", Shape(8, 0.5, 2, False), threshold=0.93),
    SplitRatios(0.6, 0.2, 0.2),
    DistillConfig(max_steps=40, eval_every=10),
    *[RECIPES.get(name) for name in RECIPES.names()],
    *[load_profile(name) for name in ("host", "pi5", "android-arm64")],
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__ + ":" + str(getattr(c, "name", "")))
def test_every_config_round_trips_through_json(config):
    text = json.dumps(to_jsonable(config))
    assert from_jsonable(type(config), json.loads(text)) == config


def test_the_config_list_covers_every_recipe_and_the_typed_values_fit_writes():
    assert {c.name for c in CONFIGS if isinstance(c, Recipe)} == set(RECIPES.names())
    covered = {type(c) for c in CONFIGS}
    assert {Budget, FitOptions, BudgetCheck, Quality, Trial, Shape, Proposal, DeviceProfile, GenerationBenchmark,
            TeacherAgreement} <= covered


def test_plans_and_scores_round_trip_through_their_dicts():
    structure = StructurePlan(PruningPlan([4, 4], [[0, 2], [1, 2, 3]], "fluctuation", "global-topk"),
                              ffn_kept=[[0, 3, 5], [1]], layers_removed=[1],
                              vocabulary=VocabularyMap(10, [0, 1, 4, 7], unk_id=1))
    assert from_jsonable(StructurePlan, json.loads(json.dumps(to_jsonable(structure)))) == structure
    plan = PruningPlan([4, 4, 4], [[0, 2], [1, 2, 3], [3]], criterion="fluctuation", strategy="global-top-k")
    assert PruningPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    scores = HeadScores(np.array([[0.1, np.nan], [0.3, 0.2]]), "fluctuation", num_examples=16)
    again = HeadScores.from_dict(json.loads(json.dumps(scores.to_dict())))
    np.testing.assert_array_equal(again.scores, scores.scores)
    assert (again.criterion, again.num_examples) == ("fluctuation", 16)
    assert again == scores and from_jsonable(HeadScores, json.loads(json.dumps(to_jsonable(scores)))) == scores
    assert again != HeadScores(np.array([[0.1, np.nan], [0.3, 0.25]]), "fluctuation", num_examples=16)


def test_a_fit_result_saves_and_loads_back_equal(tmp_path):
    result = fit_result(Budget(max_mb=20, max_latency_ms=12, min_quality="-2%"))
    path = result.save(tmp_path / "result.json")
    loaded = FitResult.load(path)
    assert loaded == result and loaded.format_version == RESULT_FORMAT_VERSION
    assert isinstance(loaded.fitted, BuiltArtifact) and isinstance(loaded.budget, Budget)
    assert [c.kind for c in loaded.fitted.checks] == ["size", "latency", "quality"]


def test_a_generator_fit_result_saves_and_loads_back_equal(tmp_path):
    import dataclasses

    result = fit_result(Budget(max_mb=120, min_decode_tps=40, max_ttft_ms=300))
    result.generation = next(c for c in CONFIGS if isinstance(c, GenerationBenchmark))
    result.fitted.teacher_agreement = TeacherAgreement(0.8125, 8, 32, 32)
    result.fitted.benchmark = dataclasses.replace(result.fitted.benchmark, decode_p50_ms=20.0, ttft_p50_ms=150.0,
                                                  kv_unwritten_mb=17.7)
    loaded = FitResult.load(result.save(tmp_path / "result.json"))
    assert loaded == result and loaded.generation.decode[0].tokens_per_s == 50.0


def in_format_1(data: dict) -> dict:
    """A format-2 result.json as format 1 wrote it: the head plan as the artifact's plan, recipes by name."""
    data["format_version"] = 1
    for artifact in [data["dense"], data["fitted"], *data["candidates"]]:
        artifact["plan"], artifact["recipe"] = artifact["plan"]["heads"], artifact["recipe"]["name"]
    return data


def test_a_result_of_format_1_loads_into_typed_plans_and_recipes(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps(in_format_1(to_jsonable(fit_result()))))
    loaded = FitResult.load(tmp_path / "result.json")
    assert loaded == fit_result() and loaded.format_version == RESULT_FORMAT_VERSION
    assert isinstance(loaded.fitted.plan, StructurePlan) and loaded.fitted.plan.heads.heads_removed == 8
    assert isinstance(loaded.fitted.recipe, Recipe) and loaded.fitted.recipe == RECIPES.get("int8")


def test_a_format_1_result_naming_a_recipe_this_edgeprune_lacks_is_one_clean_error(tmp_path):
    data = in_format_1(to_jsonable(fit_result()))
    data["fitted"]["recipe"] = "int3-experimental"
    (tmp_path / "result.json").write_text(json.dumps(data))
    with pytest.raises(UserInputError, match="result.json: unknown quantization recipe 'int3-experimental'"):
        FitResult.load(tmp_path / "result.json")


def test_a_result_of_an_earlier_format_loads(tmp_path):
    """Before format 1: no format_version, and budget checks without kinds (inferred from their names)."""
    data = in_format_1(to_jsonable(fit_result()))
    del data["format_version"]
    for artifact in [data["dense"], data["fitted"], *data["candidates"]]:
        for check in artifact["checks"]:
            del check["kind"]
    (tmp_path / "result.json").write_text(json.dumps(data))
    loaded = FitResult.load(tmp_path / "result.json")
    assert loaded.fitted.checks[0].kind == "size" and loaded == fit_result()


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"), (b"{not json", "not a readable result.json"), (b"\xff\xfe", "not a readable"),
    (b"[1, 2]", "not a result.json"), (b'{"status": "fit"}', "does not hold a fit result"),
    (json.dumps({"format_version": RESULT_FORMAT_VERSION + 1}).encode(), "upgrade edgeprune"),
])
def test_a_bad_result_file_is_one_clean_error(tmp_path, content, message):
    path = tmp_path / "result.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserInputError, match=message):
        FitResult.load(path)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20)


@given(JSON_VALUES)
def test_json_text_reads_back_to_the_same_value(value):
    assert json.loads(json_text(value)) == value


def test_json_text_keeps_lists_of_numbers_on_one_line():
    assert json_text({"kept_ids": [0, 5, 7], "scores": [[0.5, None], [1.0]], "name": "x"}) == (
        '{\n  "kept_ids": [0, 5, 7],\n  "scores": [\n    [0.5, null],\n    [1.0]\n  ],\n  "name": "x"\n}')

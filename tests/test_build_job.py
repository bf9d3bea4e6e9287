"""A candidate's build as a function of its inputs (`BuildJob`), run in this process: the artifact and its
validation quality are what the driver's own export and evaluation give; a shared folder receives the bytes; a
recipe that fails verification is an outcome, not an error."""

import copy
import dataclasses
import hashlib

import pytest

from edgeprune.export import ExportJob, export, load_artifact
from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES
from edgeprune.quantize.vocabulary import trim_vocabulary
from edgeprune.search.build_job import BuildJob
from edgeprune.tasks import bundled_task


@pytest.fixture(scope="module")
def task_and_model(small_bert_dir):
    task = bundled_task("minilm-bbc", model_path=small_bert_dir, max_length=32, progress=Progress(enabled=False))
    return task, task.teacher().model


def as_taken(inputs, vocabulary):
    return inputs if vocabulary is None else (vocabulary.apply(inputs[0]), *inputs[1:])


def job_for(task, model, recipe, folder, vocabulary=None):
    example = as_taken(task.example_inputs("validation", 1)[0], vocabulary)
    target = folder / "exports" / f"key{'.pte' if recipe.runtime == 'executorch' else '.tflite'}"
    return BuildJob(ExportJob(model, example, recipe, None, target),
                    [as_taken(i, vocabulary) for i in task.example_inputs("validation", 2)], vocabulary,
                    f"candidate ({recipe.name})")


@pytest.mark.parametrize("trimmed", [False, True], ids=["full vocabulary", "trimmed vocabulary"])
def test_a_build_job_gives_the_bytes_and_quality_the_driver_would_measure(task_and_model, tmp_path, trimmed):
    task, model = task_and_model
    vocabulary = task.vocabulary() if trimmed else None
    if trimmed:  # the artifact takes token ids through the map; the job's evaluation must feed them so
        model = trim_vocabulary(copy.deepcopy(model), vocabulary)
    recipe = RECIPES.get("fp32")
    outcome = job_for(task, model, recipe, tmp_path, vocabulary).run(task)
    assert outcome.usable and outcome.rejected is None and outcome.file_name == "key.pte"
    here = export(model, as_taken(task.example_inputs("validation", 1)[0], vocabulary), tmp_path / "here.pte", recipe)
    assert outcome.data == here.path.read_bytes()
    assert outcome.digest == hashlib.sha256(outcome.data).hexdigest()
    expected = task.runtime_quality(load_artifact(here.path), "validation",
                                    (lambda inputs: as_taken(inputs, vocabulary)) if trimmed else None)
    assert outcome.validation_quality == expected


def test_with_a_shared_folder_the_bytes_go_there_and_not_back(task_and_model, tmp_path):
    task, model = task_and_model
    shared = tmp_path / "shared"
    outcome = job_for(task, model, RECIPES.get("fp32"), tmp_path).run(task, shared_folder=shared)
    assert outcome.data is None and outcome.usable
    written = (shared / "key.pte").read_bytes()
    assert hashlib.sha256(written).hexdigest() == outcome.digest
    assert [p.name for p in shared.iterdir()] == ["key.pte"]  # no temporary file left beside it


def test_a_recipe_that_fails_verification_is_an_outcome_that_says_why(task_and_model, tmp_path):
    task, model = task_and_model
    impossible = dataclasses.replace(RECIPES.get("fp32"), min_cosine=1.5)  # no artifact reaches a cosine over 1
    outcome = job_for(task, model, impossible, tmp_path).run(task, shared_folder=tmp_path / "shared")
    assert not outcome.usable and outcome.data is None and outcome.validation_quality is None
    assert "cosine" in outcome.rejected
    assert not (tmp_path / "shared").exists()

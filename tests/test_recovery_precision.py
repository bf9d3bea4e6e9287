"""The student's training arithmetic: float32, bfloat16 autocast, or auto (bfloat16 where the CPU has it)."""

import copy
import json

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.progress import Progress
from edgeprune.recovery import DistillConfig, DistillData, DistillResult, distill, kl_to_teacher
from edgeprune.recovery.precision import cpu_has_bfloat16, resolve_precision, training_autocast
from tests.test_recovery_distill import confident_teacher, damaged_student, labelled_batches

QUIET = Progress(enabled=False)
FAST = DistillConfig(learning_rate=3e-3, warmup_steps=2, max_steps=20, eval_every=10, patience=0, seed=7)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

EPYC = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 vaes\n"
OLD_XEON = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd aes sha2 crc32 atomics sve bf16 i8mm\n"
PI5 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp\n"


@pytest.mark.parametrize(("text", "expected"), [(EPYC, True), (OLD_XEON, False), (GRAVITON3, True), (PI5, False)])
def test_native_bfloat16_is_read_from_the_kernels_cpu_flags(tmp_path, text, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert cpu_has_bfloat16(cpuinfo) is expected


def test_no_cpuinfo_means_float32(tmp_path):
    assert cpu_has_bfloat16(tmp_path / "missing") is False


def test_auto_follows_the_hardware_and_names_stay_as_given():
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == ("bfloat16" if cpu_has_bfloat16() else "float32")
    assert resolve_precision("float32", cpu) == "float32"
    assert resolve_precision("bfloat16", cpu) == "bfloat16"
    with pytest.raises(UserInputError, match="precision must be one of auto, float32, bfloat16"):
        resolve_precision("fp8", cpu)


def test_bfloat16_autocast_runs_linears_in_bfloat16_and_float32_leaves_them():
    layer = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with training_autocast("bfloat16", torch.device("cpu")):
        assert layer(x).dtype == torch.bfloat16
    with training_autocast("float32", torch.device("cpu")):
        assert layer(x).dtype == torch.float32


def test_a_bfloat16_recovery_recovers_like_a_float32_one_and_keeps_float32_weights():
    teacher = confident_teacher()
    data = DistillData.from_batches(labelled_batches(teacher, 6, 1), labelled_batches(teacher, 2, 2))
    held_out = labelled_batches(teacher, 3, 9)
    start = damaged_student(teacher)
    before = kl_to_teacher(start, teacher, held_out)
    kls = {}
    for precision in ("float32", "bfloat16"):
        student = copy.deepcopy(start)
        result = distill(student, teacher, data, FAST.replace(precision=precision), QUIET)
        assert result.precision == precision
        assert all(p.dtype == torch.float32 for p in student.parameters())
        kls[precision] = kl_to_teacher(student, teacher, held_out)
    assert kls["float32"] < 0.5 * before
    assert kls["bfloat16"] < 0.5 * before
    assert abs(kls["bfloat16"] - kls["float32"]) < 0.25 * before


def test_precision_round_trips_and_a_bad_one_is_one_clean_error():
    config = DistillConfig(precision="bfloat16")
    assert DistillConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(UserInputError, match="precision must be one of"):
        DistillConfig(precision="half")
    result = DistillResult("accuracy", 0.5, 0.6, 1, 2, 1, 0.1, "max_steps", [], config, "bfloat16")
    assert DistillResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    older = {k: v for k, v in result.to_dict().items() if k != "precision"}  # written before the field existed
    assert DistillResult.from_dict(older).precision == "float32"


def test_the_cli_offers_exactly_the_precisions_and_fit_options_check_theirs():
    from edgeprune.cli.recovery import PRECISIONS as OFFERED
    from edgeprune.recovery.precision import PRECISIONS
    from edgeprune.search.options import FitOptions

    assert OFFERED == PRECISIONS
    assert FitOptions(recover_steps=10, recovery_precision="float32").recovery_precision == "float32"
    with pytest.raises(UserInputError, match="recovery_precision must be one of auto, float32, bfloat16"):
        FitOptions(recovery_precision="half")

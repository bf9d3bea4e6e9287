"""The export stage: quantize, lower, write and — with `verify_on` — run the artifact on real inputs against its
quantized PyTorch source, in one call; a rejected artifact is removed (or kept, when asked) with its numbers."""

import dataclasses

import pytest
import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export import ExportedArtifact, VerifiedArtifact, export, load_artifact
from edgeprune.quantize import RECIPES

pytestmark = pytest.mark.integration  # real ExecuTorch lowering


@pytest.fixture(scope="module")
def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


def inputs(count: int) -> list[tuple[torch.Tensor]]:
    torch.manual_seed(1)
    return [(torch.randn(1, 16),) for _ in range(count)]


def test_verify_on_returns_a_verified_artifact_that_matches_pytorch(model, tmp_path):
    artifact = export(model, inputs(1)[0], tmp_path / "m.pte", "fp32", verify_on=inputs(4))
    assert isinstance(artifact, VerifiedArtifact) and artifact.accepted
    assert artifact.verification.num_inputs == 4 and artifact.verification.min_cosine > 0.9999
    assert artifact.size_bytes == (tmp_path / "m.pte").stat().st_size
    out = load_artifact(artifact.path)(*inputs(1)[0])[0]
    torch.testing.assert_close(out, model(*inputs(1)[0]), rtol=1e-4, atol=1e-5)
    plain = export(model, inputs(1)[0], tmp_path / "n.pte", "fp32")  # without inputs: exported, not verified
    assert type(plain) is ExportedArtifact


def test_a_rejected_artifact_is_removed_and_names_its_numbers(model, tmp_path):
    impossible = dataclasses.replace(RECIPES.get("fp32"), min_cosine=1.000001)  # no artifact reaches it
    with pytest.raises(VerificationError, match=r"my model disagrees .* on 3 real inputs: cosine .* < 1.000001"):
        export(model, inputs(1)[0], tmp_path / "m.pte", impossible, verify_on=inputs(3), name="my model")
    assert not (tmp_path / "m.pte").exists()
    kept = export(model, inputs(1)[0], tmp_path / "m.pte", impossible, verify_on=inputs(3), keep_rejected=True)
    assert not kept.accepted and (tmp_path / "m.pte").is_file()

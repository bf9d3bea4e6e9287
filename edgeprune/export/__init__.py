"""Exporters to device runtimes and the check that accepts an artifact."""

from edgeprune.export.executorch import ExecutorchProgram, ExportedArtifact, content_key, export_executorch
from edgeprune.export.verify import Verification, verify_artifact

__all__ = ["ExecutorchProgram", "ExportedArtifact", "Verification", "content_key", "export_executorch",
           "verify_artifact"]

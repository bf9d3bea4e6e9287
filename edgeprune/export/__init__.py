"""Runtimes (ExecuTorch, LiteRT), exporting to them, and the check that accepts an artifact."""

from edgeprune.export.artifacts import (
    RUNTIMES,
    ExportedArtifact,
    ExportJob,
    VerifiedArtifact,
    check_artifact,
    content_key,
    export,
    export_prepared,
    load_artifact,
    runtime_of,
)
from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.export.executorch import ExecutorchProgram
from edgeprune.export.litert import LiteRTProgram
from edgeprune.export.verify import Verification, verify_artifact

__all__ = ["RUNTIMES", "DeviceRuntime", "ExecutorchProgram", "ExportJob", "ExportedArtifact", "LiteRTProgram",
           "RunArtifact", "Verification", "VerifiedArtifact", "check_artifact", "content_key", "export",
           "export_prepared", "load_artifact", "runtime_of", "verify_artifact"]

"""Recovery after pruning: knowledge distillation from the dense teacher, and prune → recover schedules."""

from edgeprune.recovery.config import DistillConfig, DistillResult
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.distill import distill, evaluate, kl_to_teacher
from edgeprune.recovery.losses import distillation_loss, kl_divergence, task_loss
from edgeprune.recovery.pruned import PrunedDistillation, distill_pruned, save_distilled
from edgeprune.recovery.schedules import (
    SCHEDULES,
    LayerRemoval,
    Recovered,
    plan_closest,
    prune_and_recover,
    prune_ffn_and_recover,
    remove_redundant_layers,
)
from edgeprune.recovery.text import TextCorpus, perplexity, split_documents, token_blocks

__all__ = ["SCHEDULES", "DistillConfig", "DistillData", "DistillResult", "LayerRemoval", "PrunedDistillation",
           "Recovered", "TextCorpus", "distill", "distill_pruned", "distillation_loss", "evaluate", "kl_divergence",
           "kl_to_teacher", "perplexity", "plan_closest", "prune_and_recover", "prune_ffn_and_recover",
           "remove_redundant_layers", "save_distilled", "split_documents", "task_loss", "token_blocks"]

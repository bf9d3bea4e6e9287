"""Learned head gates with a hard-concrete distribution and an L0 penalty.

Louizos, Welling and Kingma, "Learning Sparse Neural Networks through L0 Regularization" (ICLR 2018),
applied to attention heads by Voita et al., "Analyzing Multi-Head Self-Attention" (ACL 2019). Each
head gets a gate z = min(1, max(0, sigmoid((log u − log(1−u) + log α) / β)(ζ − γ) + γ)), u ~ U(0, 1);
the expected number of open gates, Σ sigmoid(log α − β log(−γ/ζ)), is the L0 penalty. Model weights
stay frozen; only log α is learned.
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from edgeprune.importance import classification_loss
from edgeprune.importance.base import Batch, HeadScores, LossFn
from edgeprune.importance.common import to_dense
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.selection import keep_top


@dataclass(frozen=True)
class HardConcreteConfig:
    steps: int = 200  # optimizer steps over the (cycled) batches
    learning_rate: float = 0.1
    l0_weight: float = 0.05  # weight of the mean expected open-gate fraction in the loss
    init_log_alpha: float = 3.0  # gates start open (sigmoid(3) ≈ 0.95)
    beta: float = 2 / 3
    gamma: float = -0.1
    zeta: float = 1.1
    seed: int = 0


def deterministic_gate(log_alpha: torch.Tensor, config: HardConcreteConfig) -> torch.Tensor:
    return (torch.sigmoid(log_alpha) * (config.zeta - config.gamma) + config.gamma).clamp(0.0, 1.0)


def learn_head_gates(model: nn.Module, batches: Callable[[], Iterable[Batch]], loss_fn: LossFn | None = None,
                     config: HardConcreteConfig | None = None) -> HeadScores:
    """Learn one gate per head; scores are log α (higher = the gate wants to stay open)."""
    config = config or HardConcreteConfig()
    loss_fn = loss_fn or classification_loss
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    generator = torch.Generator().manual_seed(config.seed)
    log_alpha = torch.full((len(blocks), max(b.num_heads for b in blocks)), config.init_log_alpha, requires_grad=True)
    present = torch.zeros_like(log_alpha, dtype=torch.bool)
    for block in blocks:
        present[block.layer, : block.num_heads] = True
    optimizer = torch.optim.Adam([log_alpha], lr=config.learning_rate)
    gates = {"z": torch.ones_like(log_alpha)}

    def gated(layer: int, context: torch.Tensor) -> torch.Tensor:
        return context * gates["z"][layer, : context.shape[2], None]

    shift = config.beta * math.log(-config.gamma / config.zeta)
    was_training = model.training
    model.eval()
    step = 0
    history = []
    try:
        with frozen_parameters(model), adapter.head_output_hook(model, gated):
            while step < config.steps:
                seen = False
                for batch in batches():
                    seen = True
                    u = torch.rand(log_alpha.shape, generator=generator).clamp(1e-6, 1 - 1e-6)
                    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / config.beta)
                    gates["z"] = (s * (config.zeta - config.gamma) + config.gamma).clamp(0.0, 1.0)
                    expected_open = torch.sigmoid(log_alpha - shift)[present].mean()
                    loss = loss_fn(model, batch) + config.l0_weight * expected_open
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    history.append(float(expected_open))
                    step += 1
                    if step >= config.steps:
                        break
                if not seen:
                    raise ValueError("no data to learn gates on: the batches were empty")
    finally:
        model.train(was_training)
    return HeadScores(to_dense(blocks, log_alpha.detach().numpy()), "hard-concrete", step, extra={
        "expected_open_fraction": history[-1] if history else None, "config": config.__dict__})


def plan_hard_concrete(scores: HeadScores, config: HardConcreteConfig | None = None,
                       constraints: Constraints | None = None) -> PruningPlan:
    """Keep the heads whose deterministic gate is open (> 0); layers keep at least the minimum."""
    config = config or HardConcreteConfig()
    constraints = constraints or Constraints()
    open_gates = deterministic_gate(torch.from_numpy(np.nan_to_num(scores.scores, nan=-1e9)), config) > 0
    return keep_top(scores, open_gates.sum(dim=1).tolist(), constraints, "hard-concrete")

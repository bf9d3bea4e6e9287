"""A shipped generator run by its runtime: prefill a prompt in chunks the program accepts, then decode one token at
a time against the cache the program keeps between calls; greedy, as a verification needs it reproducible."""

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from edgeprune.errors import UserInputError, VerificationError
from edgeprune.export import load_artifact
from edgeprune.export.manifest import GeneratorSpec, generator_spec
from edgeprune.generation.bench import TeacherAgreement


def program_generator(run: object) -> GeneratorSpec | None:
    """A loaded program's (`load_artifact`) generator facts, from its constant methods: what model.json records;
    None when it is not a KV-cached generator."""
    constants = getattr(run, "constants", None)
    return generator_spec(constants() if constants else {})


def generator_facts(path: Path) -> GeneratorSpec:
    """The facts of the generator at `path`, read here without running it; VerificationError when it is not a
    generator."""
    facts = program_generator(load_artifact(Path(path)))
    if facts is None:
        raise VerificationError(f"{path} is not a KV-cached generator (it has no use_kv_cache method); fit or export "
                                "a causal-lm task to make one")
    return facts


class Generator:
    """A KV-cached `.pte` loaded once: `prefill`, `decode`, `generate`. The cache is the program's own state, so
    one Generator runs one sequence at a time; a new sequence starts again at position 0."""

    def __init__(self, path: Path, threads: int | None = None, run: object | None = None) -> None:
        """`run`: the program at `path` already loaded (`load_artifact`), else it is loaded here."""
        self.path = Path(path)
        self.run = run if run is not None else load_artifact(self.path, threads)
        facts = program_generator(self.run)
        if facts is None:
            raise VerificationError(f"{self.path} is not a KV-cached generator (it has no use_kv_cache method); "
                                    "fit or export a causal-lm task to make one")
        self.facts = facts

    def forward(self, tokens: Sequence[int], start: int) -> torch.Tensor:
        """Logits `[len(tokens), vocab]` of `tokens` at positions start.., chunked to the program's length."""
        vocab = self.facts.vocab_size
        if vocab is not None and any(not 0 <= token < vocab for token in tokens):
            raise UserInputError(f"token ids {sorted({t for t in tokens if not 0 <= t < vocab})[:5]} "
                                 f"are outside the generator's vocabulary of {self.facts.vocab_size}: is the "
                                 "tokenizer the model's?")
        if start + len(tokens) > self.facts.context:
            raise UserInputError(f"{start + len(tokens)} tokens do not fit the generator's context of "
                                 f"{self.facts.context}; export it with a longer --context")
        chunks = []
        for offset in range(0, len(tokens), self.facts.max_seq_len):
            chunk = list(tokens[offset:offset + self.facts.max_seq_len])
            positions = torch.arange(start + offset, start + offset + len(chunk))
            chunks.append(self.run(torch.tensor([chunk], dtype=torch.long), positions)[0][0])
        # one chunk (every decode step) as it came: torch.cat runs on torch's thread pool, whose threads then spin
        # waiting for more work on the cores a LiteRT interpreter decodes on (SmolLM2 int8, 2 threads on 2 cores:
        # 9.6 → 11.6 ms a step; docs/FINDINGS.md)
        return chunks[0] if len(chunks) == 1 else torch.cat(chunks)

    def stream(self, prompt: Sequence[int], max_new_tokens: int, stop_at_eos: bool = True) -> Iterator[int]:
        """Greedy tokens after `prompt`, one per decode step."""
        if not prompt:
            raise UserInputError("the prompt has no tokens")
        max_new_tokens = min(max_new_tokens, self.facts.context - len(prompt))
        token = int(self.forward(prompt, 0)[-1].argmax())
        for position in range(len(prompt), len(prompt) + max_new_tokens):
            yield token
            if (stop_at_eos and token in self.facts.eos_ids) or position + 1 >= len(prompt) + max_new_tokens:
                return
            token = int(self.forward([token], position)[-1].argmax())

    def generate(self, prompt: Sequence[int], max_new_tokens: int, stop_at_eos: bool = True) -> list[int]:
        return list(self.stream(prompt, max_new_tokens, stop_at_eos))


@torch.no_grad()
def greedy_reference(model: torch.nn.Module, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """The same greedy continuation from the PyTorch model's full-sequence forward (no cache): what the shipped
    program's tokens are checked against."""
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([tokens]))
        logits = logits[0] if isinstance(logits, tuple | list) else getattr(logits, "logits", logits)
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt):]


@torch.no_grad()
def greedy_cached(model: torch.nn.Module, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """The greedy continuation through the model's own KV cache (a Hugging Face causal LM, or one wrapped as
    `CausalLMLogits` at `.model`): one forward per new token over that token alone, where `greedy_reference` runs
    the whole sequence each time; the same tokens up to float rounding. A model without a cache of its own is
    run by `greedy_reference`."""
    hf_model = getattr(model, "model", model)
    if max_new_tokens < 1 or not hasattr(hf_model, "prepare_inputs_for_generation"):  # not a transformers LM
        return greedy_reference(model, prompt, max_new_tokens)
    was_training = hf_model.training
    hf_model.eval()
    try:
        output = hf_model(input_ids=torch.tensor([list(prompt)]), use_cache=True)
        tokens = [int(output.logits[0, -1].argmax())]
        for _ in range(max_new_tokens - 1):
            output = hf_model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=output.past_key_values,
                              use_cache=True)
            tokens.append(int(output.logits[0, -1].argmax()))
    finally:
        hf_model.train(was_training)
    return tokens


class TeacherContinuations:
    """A teacher's greedy continuations (`greedy_cached`), each computed once: a fit compares the dense and the
    fitted program with the same teacher on the same prompts. Through the teacher's KV cache, since a full-sequence
    forward per token made the teacher's part of one agreement 30 s for SmolLM2-135M on this machine's 2 cores."""

    def __init__(self, teacher: torch.nn.Module) -> None:
        self.teacher = teacher
        self.computed: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def __call__(self, prompt: Sequence[int], new_tokens: int) -> list[int]:
        key = (tuple(prompt), new_tokens)
        if key not in self.computed:
            self.computed[key] = greedy_cached(self.teacher, prompt, new_tokens)
        return list(self.computed[key])


def next_token_agreement(student: Sequence[int], teacher: Sequence[int]) -> float:
    """Fraction of positions where two greedy continuations pick the same token."""
    pairs = list(zip(student, teacher, strict=False))
    return sum(a == b for a, b in pairs) / len(pairs) if pairs else 0.0


AGREEMENT_PROMPTS, AGREEMENT_PROMPT_TOKENS, AGREEMENT_NEW_TOKENS = 8, 32, 32


@torch.no_grad()
def teacher_agreement(generator: Generator, teacher: torch.nn.Module | TeacherContinuations, blocks: torch.Tensor,
                      prompts: int = AGREEMENT_PROMPTS, prompt_tokens: int = AGREEMENT_PROMPT_TOKENS,
                      new_tokens: int = AGREEMENT_NEW_TOKENS) -> TeacherAgreement:
    """Greedy continuations of `new_tokens` after the first `prompt_tokens` of each of the first `prompts` held-out
    `blocks` ([N, length] token ids), by the program and by the teacher, each through its KV cache (`teacher` a
    `TeacherContinuations` to reuse the teacher's from an earlier call)."""
    reference = teacher if isinstance(teacher, TeacherContinuations) else TeacherContinuations(teacher)
    prompt_tokens = min(prompt_tokens, blocks.shape[1], generator.facts.context - 1)
    new_tokens = min(new_tokens, generator.facts.context - prompt_tokens)
    scores = []
    for block in blocks[:prompts]:
        prompt = block[:prompt_tokens].tolist()
        student = generator.generate(prompt, new_tokens, stop_at_eos=False)
        scores.append(next_token_agreement(student, reference(prompt, new_tokens)))
    return TeacherAgreement(round(sum(scores) / len(scores), 4) if scores else 0.0, len(scores), prompt_tokens,
                            new_tokens)

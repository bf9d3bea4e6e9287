"""Generate with a LiteRT generator on a device: pushed beside the artifact and run by the device's Python, which
needs only numpy and `ai-edge-litert` (the board's LiteRT install), not edgeprune or torch.

The command line and the log are the native ExecuTorch runner's generation mode (edgeprune/bench/native/
executor_runner.cpp, `--generate`), so that one parser reads both (edgeprune/generation/native.py): the int64
prompt in `--prompt` is prefilled in chunks of the generator's prefill length, then up to `--generate` tokens are
decoded greedily, stopping at an end-of-sequence id unless `--ignore_eos`; `--num_executions` repeats the whole
generation from position 0. It prints, on stderr, `Model loaded in X ms.`, `Generation i of N: prefill P tokens in
X ms, decode D tokens in Y ms` per execution and `Peak resident set: N kB`; on stdout `Tokens: t1 t2 ...`.

The generator's signatures and metadata are edgeprune/export/litert_generator.py's: `prefill` takes exactly
`get_max_seq_len` tokens (a shorter chunk is padded; one whose padding would pass the cache's end is decoded token
by token), `decode` one; the per-layer KV cache goes into every call, and the call's own rows come out
(`CachedGenerator`, which edgeprune's own LiteRT loader uses too).
"""

import argparse
import json
import mmap
import sys
import time

METADATA_NAME = "edgeprune.generator"  # as edgeprune/export/litert_generator.py writes it


def metadata(path: str) -> dict:
    """The generator's facts (edgeprune.export.litert_generator.read_metadata's reading, repeated here because this
    script runs where edgeprune is not installed)."""
    from ai_edge_litert import schema_py_generated as schema

    # mapped, not read: the weights are neither read twice nor held in a copy the peak resident set would count
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        model = schema.Model.GetRootAs(mapped, 0)
        for index in range(model.MetadataLength()):
            entry = model.Metadata(index)
            if entry.Name() is not None and entry.Name().decode() == METADATA_NAME:
                return json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
    return {}


def peak_rss_kb() -> int:
    """VmHWM: the process's own peak resident set (ru_maxrss can keep an exec'd parent's)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class CachedGenerator:
    """A LiteRT generator with its KV cache kept in the decode signature's own input tensors.

    `decode` is the interpreter's first subgraph (edgeprune exports it first), so its inputs are reached with the
    interpreter's public `tensor()` views and it runs with `invoke()`: a decode step writes the token and its
    position, runs, and writes the call's own keys and values into the cache where it lies, with no copy of the
    cache in or out (through the signature runner, the copies were a fifth of a SmolLM2 decode step;
    docs/FINDINGS.md). `prefill` is called through its signature runner with that cache, whose rows it returns
    are written back the same way. Views are taken per use and dropped at once, and signature runners are made per
    use too: the interpreter refuses to run while a view into its tensors, or a runner, is alive."""

    def __init__(self, interpreter, facts: dict) -> None:  # noqa: ANN001 - a LiteRT Interpreter
        import numpy as np

        self.np, self.interpreter = np, interpreter
        self.chunk, self.context = int(facts["get_max_seq_len"]), int(facts["get_max_context_len"])
        interpreter.allocate_tensors()
        decode = interpreter.get_signature_runner("decode")
        self.inputs = {name: detail["index"] for name, detail in decode.get_input_details().items()}
        self.outputs = {name: detail["index"] for name, detail in decode.get_output_details().items()}
        first = {(detail["name"], detail["index"]) for detail in interpreter.get_input_details()}
        if first != {(detail["name"], detail["index"]) for detail in decode.get_input_details().values()}:
            raise ValueError("its decode signature is not the interpreter's first subgraph (a LiteRT generator "
                             "exported before edgeprune 2026-12-06); export it again")
        self.caches = [name for name in self.inputs if "_cache_" in name]
        # the accessors `tensor()` returns, made once (a decode step would otherwise make 123 of them): holding an
        # accessor is allowed, only the arrays it returns must be dropped before `invoke()`
        tensor = interpreter.tensor
        self.token_slot, self.position_slot = tensor(self.inputs["input_ids"]), tensor(self.inputs["input_pos"])
        self.logits_slot = tensor(self.outputs["logits"])
        self.cache_slots = [(tensor(self.inputs[name]), tensor(self.outputs[new_rows(name)])) for name in self.caches]
        for cache, _ in self.cache_slots:  # finite from the start: a masked slot's value still meets a zero weight
            cache()[...] = 0

    def decode(self, token: int, position: int):  # noqa: ANN201 - logits [vocab]
        self.token_slot()[...] = token
        self.position_slot()[...] = position
        self.interpreter.invoke()
        row = slice(position, position + 1)
        for cache, new in self.cache_slots:  # k_cache_L gets the call's row k_new_L at its position
            cache()[:, :, row] = new()
        return self.logits_slot()[0, 0].copy()

    def prefill_chunk(self, ids: list, start: int):  # noqa: ANN201 - logits [len(ids), vocab]
        np = self.np
        padded = np.zeros((1, self.chunk), np.int32)
        padded[0, :len(ids)] = ids
        positions = np.arange(start, start + self.chunk, dtype=np.int32)
        prefill = self.interpreter.get_signature_runner("prefill")  # made per call: see the class's note
        outputs = prefill(input_ids=padded, input_pos=positions,
                          **{name: cache() for name, (cache, _) in zip(self.caches, self.cache_slots, strict=True)})
        rows = slice(start, start + self.chunk)
        for name, (cache, _) in zip(self.caches, self.cache_slots, strict=True):
            cache()[:, :, rows] = outputs[new_rows(name)]
        return outputs["logits"][0, :len(ids)]

    def logits(self, ids: list, start: int):  # noqa: ANN201 - [len(ids), vocab]: one prefill, or decode steps
        if len(ids) == 1 or start + self.chunk > self.context:  # the padding would pass the cache's end
            return self.np.stack([self.decode(token, start + index) for index, token in enumerate(ids)])
        return self.prefill_chunk(ids, start)


def new_rows(cache_name: str) -> str:
    """The output holding a call's own rows of the cache input `cache_name`: k_cache_3 → k_new_3."""
    return cache_name.replace("_cache_", "_new_")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_path", required=True)
    parser.add_argument("--prompt", required=True, help="int64 token ids, raw little-endian")
    parser.add_argument("--generate", type=int, required=True, help="new tokens at most")
    parser.add_argument("--num_executions", type=int, default=1)
    parser.add_argument("--cpu_threads", type=int, default=1)
    parser.add_argument("--ignore_eos", action="store_true")
    args = parser.parse_args()
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    prompt = np.fromfile(args.prompt, dtype="<i8").tolist()
    facts = metadata(args.model_path)
    if not facts.get("use_kv_cache"):
        print(f"{args.model_path} is not a KV-cached generator (no {METADATA_NAME} metadata)", file=sys.stderr)
        return 1
    started = time.perf_counter()
    interpreter = Interpreter(args.model_path, num_threads=args.cpu_threads)
    try:
        generator = CachedGenerator(interpreter, facts)
    except ValueError as error:
        print(f"{args.model_path}: {error}", file=sys.stderr)
        return 1
    print(f"Model loaded in {(time.perf_counter() - started) * 1e3:f} ms.", file=sys.stderr)
    if not prompt or len(prompt) >= generator.context:
        print(f"the prompt's {len(prompt)} tokens leave no room in the context of {generator.context}",
              file=sys.stderr)
        return 1
    eos = facts.get("get_eos_ids", [])
    eos = set(eos if isinstance(eos, list) else [eos])
    new_tokens = min(args.generate, generator.context - len(prompt))
    tokens: list[int] = []
    for run in range(1, args.num_executions + 1):
        tokens = []
        started = time.perf_counter()
        for offset in range(0, len(prompt), generator.chunk):
            logits = generator.logits(prompt[offset:offset + generator.chunk], offset)[-1]
        token = int(logits.argmax())
        prefill_ms = (time.perf_counter() - started) * 1e3
        started, steps, position = time.perf_counter(), 0, len(prompt)
        while True:
            tokens.append(token)
            if (not args.ignore_eos and token in eos) or len(tokens) >= new_tokens:
                break
            token = int(generator.decode(token, position).argmax())
            position, steps = position + 1, steps + 1
        print(f"Generation {run} of {args.num_executions}: prefill {len(prompt)} tokens in {prefill_ms:f} ms, "
              f"decode {steps} tokens in {(time.perf_counter() - started) * 1e3:f} ms", file=sys.stderr)
    print("Tokens: " + " ".join(str(t) for t in tokens))
    print(f"Peak resident set: {peak_rss_kb()} kB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

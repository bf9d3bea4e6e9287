"""The generation chart of a shipped KV-cached generator: decode tokens/s against the tokens already in the cache
(measured at each depth), and memory against the context length (the KV cache exact from the program's bytes per
token, beside the program's measured memory)."""

from dataclasses import dataclass

from edgeprune.report.plots.base import BUDGET, BUDGET_LINE, CHOSEN, DENSE, Figure
from edgeprune.report.plots.canvas import Mark, drawing, rounded, to_svg
from edgeprune.search.result import FitResult

ELEMENT_ID = "plot-generation"
TITLE = "Generation against context length: decode speed at each depth, memory at each context length"


@dataclass(frozen=True)
class GenerationData:
    depths: tuple[int, ...]  # tokens in the cache when each timed decode started
    tokens_per_s: tuple[float, ...]
    context: int  # the program's cache length
    kv_cache_bytes: int | None  # at the full context, as the program declares it
    program_mb: float  # what the program added to its process, measured (its cache as far as it was written)
    device: str
    threads: int
    emulated: str | None = None
    min_decode_tps: float | None = None  # the decode budget, drawn where one was set

    @property
    def kv_mb_per_token(self) -> float | None:
        return None if self.kv_cache_bytes is None else self.kv_cache_bytes / self.context / 1e6

    @property
    def caption(self) -> str:
        where = f"{self.device}, {self.threads} threads" + (f", {self.emulated}" if self.emulated else "")
        per_token = "" if self.kv_mb_per_token is None else (
            f"; the KV cache holds {self.kv_mb_per_token * 1e6:,.0f} bytes a token, "
            f"{self.kv_cache_bytes / 1e6:.1f} MB at the program's context of {self.context}")
        return (f"{TITLE}. Decode timed over at least a second at each depth on {where}{per_token}. The dashed "
                "line is the memory the program added to its benchmark process, measured.")


def generation_data(result: FitResult) -> GenerationData | None:
    bench = result.generation
    if bench is None or not bench.decode:
        return None
    return GenerationData(tuple(d.depth for d in bench.decode), tuple(d.tokens_per_s for d in bench.decode),
                          bench.context, bench.kv_cache_bytes, bench.added_rss_mb, bench.device, bench.threads,
                          bench.emulated, result.budget.min_decode_tps)


def figure(data: GenerationData | None) -> Figure:
    if data is None:
        return Figure(ELEMENT_ID, empty="No generation benchmark was run (not a generator, or no device runner).")
    return Figure(ELEMENT_ID, render(data), data.caption)


def render(data: GenerationData) -> str:
    """Two panels side by side: tokens/s against depth (with the decode budget), memory against context."""
    with drawing(820, 300) as canvas:
        speed, memory = canvas.subplots(1, 2)
        marks: dict[str, Mark] = {}
        speed.plot(data.depths, data.tokens_per_s, marker="o", color=CHOSEN, linewidth=2, gid="decode")
        tip = "; ".join(f"{rounded(t)} tokens/s at depth {d}" for d, t in zip(data.depths, data.tokens_per_s,
                                                                                strict=True))
        marks["decode"] = Mark("decode", tip)
        speed.set_xlabel("tokens in the cache")
        speed.set_ylabel("decode tokens/s")
        speed.set_xlim(0, data.context)
        speed.set_ylim(bottom=0, top=1.15 * max([*data.tokens_per_s, data.min_decode_tps or 0.0]))
        if data.min_decode_tps is not None:
            speed.axhline(data.min_decode_tps, gid="budget", **BUDGET_LINE)
            speed.annotate(f"budget {rounded(data.min_decode_tps)} tokens/s", (0, data.min_decode_tps),
                           xytext=(4, 4), textcoords="offset points", color=BUDGET, gid="label-budget")
            marks["budget"], marks["label-budget"] = Mark("budget"), Mark("budget-label")
        memory.set_xlabel("context length (tokens)")
        memory.set_ylabel("MB")
        memory.set_xlim(0, data.context)
        if data.kv_mb_per_token is not None:
            memory.plot([0, data.context], [0, data.kv_mb_per_token * data.context], color=CHOSEN, linewidth=2,
                        gid="kv-cache", label="KV cache (exact)")
            marks["kv-cache"] = Mark("kv-cache", f"{data.kv_mb_per_token * 1e6:,.0f} bytes a token")
        memory.axhline(data.program_mb, color=DENSE, linestyle=(0, (4, 3)), linewidth=1.5, gid="program",
                       label="program, measured")
        marks["program"] = Mark("program", f"the program added {rounded(data.program_mb)} MB to its process")
        memory.set_ylim(bottom=0)
        memory.legend(loc="upper left", frameon=False)
        return to_svg(canvas, ELEMENT_ID, TITLE, marks)

"""What fits on a set of GPUs: the longest context for a batch, or the largest batch for a context, solved exactly.

The budget of each GPU is its memory less a reserved fraction (0.1; under --engine vllm 1 − its gpu_memory_utilization,
whose default 1.0 on NVIDIA and AMD GPUs keeps its extensible KV cache's margin free, else 0.92; under --engine sglang
1 − its default mem_fraction_static: kvcalc.costs.engine_memory), less
the weights the busiest GPU holds and an activation estimate for one prefill chunk (none under SGLang, whose fraction
leaves their room); the cache of the busiest GPU
(kvcalc.costs.parallel) must fit in what is left. The search is an integer bisection against the real cache
function, never a division: with sliding-window, chunked or constant-state layers the cache is not linear in context.
A context fits when every context up to it does (a sequence grows through each): a window's pages under an engine
other than vLLM rise and fall by one page as ctx grows, so each step of the search also checks the last fall.
Under SGLang the memory is divided into its static pools (states, full-attention and sliding-window tokens) as its
startup divides it, and each pool must hold its own part (engine_memory.sglang_fits). Under vLLM each stage's GPU keeps one block of
its pool back (the null block: Stage.held_back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.costs.engine_memory import (
    SGLangCapacity,
    budget_bytes,
    default_prefill_chunk,
    default_reserve,
    engine_batch_cap,
    sglang_capacity,
    sglang_fits,
    sglang_pool_sizes,
    sglang_refusal,
    sglang_short,
    sglang_stage_pools,
    vllm_admitted,
)
from kvcalc.costs.parallel import PerGpu, check_layout, per_gpu, stage_gpu, stages
from kvcalc.fields import figure
from kvcalc.settings import Settings
from kvcalc.solve import largest_fitting

if TYPE_CHECKING:
    from kvcalc.costs.cache import CacheReport
    from kvcalc.hardware import Hardware
    from kvcalc.spec import ModelSpec

BATCH_LIMIT = 1 << 20  # the largest batch `fit` searches


@dataclass(frozen=True)
class FitRow:
    """One answer of `fit`: the layout, the memory it spends, and the maximum found, with what limits it."""

    model: str = figure("Model", "text", "the model's name")
    hardware: str = figure("Hardware", "text", "the hardware preset")
    gpus: int = figure("GPUs", "int", "GPUs: tp · pp · dp")
    memory_bytes: int = figure("Memory", "bytes", "device memory of all GPUs")
    reserved_bytes: int = figure("Reserved", "bytes", "memory left unused by the reserve fraction, all GPUs (under "
                                 "--engine vllm on NVIDIA and AMD GPUs the margin of its extensible KV cache where "
                                 "larger: max(1 GiB, 3 on AMD; 0.75 · the activation estimate) a GPU)")
    weights_bytes: int = figure("Weights", "bytes", "all weights in weights_dtype (one copy; what an engine keeps in bf16 "
                                "or copies beside them is in weights_bytes_per_gpu, which can pass it at tp 1)")
    weights_bytes_per_gpu: int = figure("Weights\nper GPU", "bytes", "weights the busiest GPU holds")
    activation_bytes: int = figure("Activations\nper GPU", "bytes", "an estimate for one prefill chunk on the busiest GPU (0 under SGLang, whose static fraction leaves their room)")
    batch: int = figure("Batch", "int", "sequences")
    ctx: int = figure("Ctx", "tokens", "tokens per sequence")
    max_ctx: int | None = figure("Max\nctx", "tokens", "the longest context that fits the batch (when solving for ctx)")
    max_batch: int | None = figure("Max\nbatch", "int", "the largest batch that fits the context (when solving for batch)")
    kv_cache_bytes: int = figure("KV\ncache", "bytes", "the KV cache at that maximum, all sequences (--engine: in its pages); "
                                 "where nothing fits, at the row's ctx and batch (1), as the per-GPU figures")
    kv_cache_bytes_per_gpu: int = figure("KV cache\nper GPU", "bytes", "its share on the busiest GPU, states included (so "
                                         "the budget adds up; compare's key of this name leaves them to "
                                         "state_bytes_per_gpu)")
    state_bytes_per_gpu: int | None = figure("States\nper GPU", "bytes", "of kv_cache_bytes_per_gpu, the constant "
                                             "states (hybrid models; left out without any)")
    free_bytes_per_gpu: int = figure("Left\nper GPU", "bytes", "budget left on the busiest GPU at that maximum (the "
                                     "one with the least left; under --engine vllm its pool's null block counted)")
    binding: str = figure("Binding", "text", "what limits the maximum: memory, max_context (the model's), batch_limit, "
                          "the engine's default cap on sequences at once (max_num_seqs, max_running_requests, "
                          "pp_max_micro_batch_size), "
                          "startup (vLLM's start-up check of one request of max_model_len, which counts a window's "
                          "and a chunk's prefill tokens in flight and a state's checkpoint), "
                          "or, where nothing fits, weights or activations (what alone passes the budget)")
    exceeds_max_context: bool = figure("Over\nmax ctx", "bool", "the context (--ctx) is above the trained maximum; "
                                       "the batch is solved anyway")
    # the settings of the answer, for a script that gathers several (the table's title says them)
    kv_dtype: str = figure("KV\ndtype", "text", "storage type of the cache")
    kv_quant: str = figure("KV\nquant", "text", "quantisation scheme of the cache (none: a plain dtype)")
    weights_dtype: str = figure("Weights\ndtype", "text", "storage type of the weights")
    engine: str | None = figure("Engine", "text", "the serving engine whose pages and rules are counted (left out without --engine)")
    tp: int = figure("TP", "int", "tensor-parallel ranks")
    pp: int = figure("PP", "int", "pipeline stages")
    dp: int = figure("DP", "int", "data-parallel replicas")
    ep: int = figure("EP", "int", "expert-parallel ranks")
    dp_attention: bool = figure("DP\nattention", "bool", "SGLang's DP attention")
    mtp: bool = figure("MTP", "bool", "the multi-token-prediction layers counted (--mtp)")
    reserve: float = figure("Reserve", "float", "fraction of each GPU's memory left unused (--reserve, or its default; "
                            "under --engine vllm its extensible KV cache's margin may leave more: reserved_bytes)")
    prefill_chunk: int = figure("Prefill\nchunk", "tokens", "tokens of one prefill chunk, for the activation estimate (SGLang: its chunked_prefill_size, in its static fraction)")
    mla_cache: str | None = figure("MLA\ncache", "text", "MLA cache layout: latent or expanded (MLA models)")
    block_size: int | None = figure("Page\ntokens", "tokens", "tokens a page of the engine holds, as it pages this model "
                                    "(the largest group's; left out without --engine)")
    state_dtype: str | None = figure("State\ndtype", "text", "storage type of the constant states (models with states: "
                                     "'fp32+bf16' where they differ by part)")
    enc_ctx: int | None = figure("Encoder\nctx", "tokens", "encoder positions cross-attention caches (encoder–decoder "
                                 "models)")




def activation_bytes(spec: ModelSpec, s: Settings, chunk: int) -> int:
    """An estimate of one prefill chunk's activations on one GPU, in bf16: per token, the residual stream, its normed
    copy, the attention output and the FFN input (4·d), and the two hidden activations of the widest gated FFN on one
    tensor-parallel rank (2·d_ff / tp). 0 under --engine sglang: its pools take memory · mem_fraction_static less
    the weights (kv_cache_configurator _profile_available_bytes), the rest left for activations and graphs."""
    from kvcalc.costs.params import ffn_runs
    from kvcalc.spec import DenseFFN, MoEFFN

    if s.engine == "sglang":
        return 0
    widest = 0
    for ffn in (run.ffn for run in ffn_runs(spec)):  # each run of layers with one FFN once, never each layer
        if isinstance(ffn, DenseFFN):
            widest = max(widest, ffn.d_ff)
        elif isinstance(ffn, MoEFFN):  # the routed experts a token uses, and the shared ones
            widest = max(widest, ffn.n_experts_per_tok * ffn.moe_d_ff + ffn.n_shared_experts * (ffn.shared_d_ff or ffn.moe_d_ff))
    return chunk * (4 * spec.d_model + 2 * -(-widest // s.tp)) * 2  # 2: bytes per bf16 value


def _window_falls(spec: ModelSpec, s: Settings) -> tuple[tuple[int, int, int], ...]:
    """(W, B, x) for each windowed layer group whose pages fall as ctx grows (kvcalc.costs.paged: a window under an
    engine other than vLLM, whose rule is monotone, at pages of B > 1 tokens): they fall after each ctx with
    (ctx − W) mod B = x, and nothing else in the cache ever falls as ctx grows."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.paged import window_falls

    if s.engine in (None, "vllm"):
        return ()
    out: set[tuple[int, int, int]] = set()
    for gc in kv_cache(spec, s.at(1)).groups:
        window, block = gc.group.layer.window, gc.block_size
        if window is not None and block is not None and block > 1 and (x := window_falls(window, block)) is not None:
            out.add((window, block, x))
    return tuple(sorted(out))


def _peaks_up_to(c: int, falls: tuple[tuple[int, int, int], ...]) -> tuple[int, ...]:
    """Contexts ≤ c that hold the most of any context ≤ c: c, and the last context ≤ c after which each window's
    pages fall. Between falls the cache does not shrink, and a window's pages repeat every B contexts while the rest
    only grows, so a context more than B below c holds no more than the one in the last B that is a multiple of B
    above it."""
    return (c,) + tuple(p for w, b, x in falls if (p := c - (c - w - x) % b) >= 1)



def batch_cap(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int) -> tuple[int, str] | None:
    """engine_batch_cap with each stage's room for the cache at the budget `fit` uses."""
    acts = activation_bytes(spec, s, chunk)
    budget = budget_bytes(hw, reserve, s.engine, acts)
    return engine_batch_cap(spec, s, hw, budget, acts, chunk)


def request_table(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int) -> int | None:
    """engine_memory.sglang_request_table at the budget `fit` uses (None but under --engine sglang)."""
    from kvcalc.costs.engine_memory import sglang_request_table

    if s.engine != "sglang":
        return None
    acts = activation_bytes(spec, s, chunk)
    return sglang_request_table(spec, s, budget_bytes(hw, reserve, s.engine, acts), acts)


def admitted_length(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int) -> int | None:
    """vllm_admitted at the budget `fit` uses: the longest max_model_len vLLM starts with (None where not modelled)."""
    acts = activation_bytes(spec, s, chunk)
    return vllm_admitted(spec, s, budget_bytes(hw, reserve, s.engine, acts), acts, chunk, spec.max_context)


def sglang_longest_request(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int) -> int | None:
    """The most tokens, prompt and output, SGLang serves one request at these settings (None without --engine sglang
    or where it does not start): min(context_len − 2, pool − P − 1) for a pool of that many tokens in pages of P
    (tp_worker.get_worker_info: max_req_len = min(context_len − 1, pool − 1); scheduler.init_req_max_new_tokens: the
    output stops at max_req_len − prompt − 1, and by memory at pool − ⌈prompt / P⌉·P − P − 1, reached with a prompt
    of whole pages), and under --mtp context_len less the tokenizer's reserve, max(steps · topk, draft tokens)."""
    from kvcalc.costs.engine_memory import sglang_context_len
    from kvcalc.costs.paged import SGLANG_SPEC_DRAFT_TOKENS, SGLANG_SPEC_STEPS, SGLANG_SPEC_TOPK

    if s.engine != "sglang":
        return None
    acts = activation_bytes(spec, s, chunk)
    pools = [(p, sglang_capacity(p, room)) for _, p, room in sglang_stage_pools(spec, s, budget_bytes(hw, reserve, s.engine, acts), acts)]
    if any(c is None for _, c in pools):
        return None
    pool = min(c.tokens for _, c in pools if c is not None)
    block = max(p.block for p, _ in pools)
    reserved = max(SGLANG_SPEC_STEPS * SGLANG_SPEC_TOPK, SGLANG_SPEC_DRAFT_TOKENS) if s.mtp and spec.mtp_layers else 0
    context_len = sglang_context_len(spec)
    return min(context_len - 2, context_len - reserved, pool - block - 1)


def _kv_bytes(report: CacheReport) -> int:
    """The KV cache of all sequences as fit counts it: in the engine's whole pages under --engine, as per GPU."""
    return report.bytes if report.engine_bytes is None else report.engine_bytes


def _used(g: PerGpu, acts: int) -> int:
    """What a GPU spends: its weights, the activation estimate, its cache and states."""
    return g.weights_bytes + acts + g.kv_cache_bytes + g.state_bytes


def _tightest(spec: ModelSpec, t: Settings, budget: int, acts: int) -> tuple[PerGpu, int]:
    """The busiest GPU at a setting, the one with the least budget left (its pool's held-back block counted: vLLM's
    null block), and what it has left; the first stage of those that tie."""
    check_layout(spec, t)
    tightest: tuple[PerGpu, int] | None = None
    for plan in stages(spec, t):
        g = stage_gpu(t, plan)
        left = budget - _used(g, acts) - plan.held_back
        if tightest is None or left < tightest[1]:
            tightest = (g, left)
    assert tightest is not None  # a layout has a stage
    return tightest


def _fitter(spec: ModelSpec, budget: int, acts: int) -> Callable[[Settings], bool]:
    """Whether the cache and states at a setting fit: in the busiest GPU's budget, or under SGLang in the static pools
    of every stage's GPU."""

    def fits(t: Settings) -> bool:
        if t.engine == "sglang":
            return all(sglang_fits(p, room) for _, p, room in sglang_stage_pools(spec, t, budget, acts))
        return _tightest(spec, t, budget, acts)[1] >= 0

    return fits


def sglang_pool_binding(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int,
                        solve: str, best: int) -> tuple[str, SGLangCapacity | None, bool] | None:
    """Under --engine sglang, which of its static pools stops one step past the answer `best` (a batch or a context):
    'state' (every state slot taken: sglang_capacity's slots, the room's mamba_full_memory_ratio share), 'swa' (the
    sliding-window pool) or 'kv' (the token pool, beside a state or sliding-window pool), with the pools' sizes
    (sglang_pool_sizes) and whether SGLang refuses to start with them at all (sglang_refusal); None elsewhere, where
    one pool holds everything, or where none stops it."""
    if s.engine != "sglang":
        return None
    acts = activation_bytes(spec, s, chunk)
    budget = budget_bytes(hw, reserve, s.engine, acts)
    falls = _window_falls(spec, s)
    tries = [replace(s.at(x), batch=best + 1) for x in _peaks_up_to(s.ctx, falls)] if solve == "batch" else \
        [replace(s.at(x), batch=s.batch) for x in _peaks_up_to(best + 1, falls)]
    for t in tries:
        for _, p, room in sglang_stage_pools(spec, t, budget, acts):
            if (short := sglang_short(p, room)) is None:
                continue
            c = sglang_pool_sizes(p, room)
            if short == "kv" and (c is None or c.slots is None and c.swa_tokens is None):
                return None  # one pool: plain memory
            return short, c, c is None or sglang_refusal(p, c) is not None
    return None


def binding_context(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int, batch: int) -> int | None:
    """The context below `s.ctx` that stops one sequence more than `batch`, where that many fit at `s.ctx` itself: the
    last fall of a window's pages that they pass through (see `_peaks_up_to`); None when `s.ctx` binds."""
    acts = activation_bytes(spec, s, chunk)
    fits = _fitter(spec, budget_bytes(hw, reserve, s.engine, acts), acts)
    more = replace(s, batch=batch + 1)
    if not fits(more):
        return None
    return max((x for x in _peaks_up_to(s.ctx, _window_falls(spec, s))[1:] if not fits(more.at(x))), default=None)


def fit(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction | None, chunk: int | None, solve: str,
        max_ctx: int | None = None) -> FitRow:
    """Solve for the longest context at `s.batch` (solve "ctx", up to `max_ctx` or the model's max_context) or the
    largest batch at `s.ctx` (solve "batch"); a `reserve` or `chunk` of None takes the engine's default
    (default_reserve, default_prefill_chunk), as the command line does."""
    from kvcalc.costs.cache import kv_cache
    from kvcalc.costs.params import param_counts, weights_bytes

    chunk = default_prefill_chunk(s.engine, hw) if chunk is None else chunk
    reserve = default_reserve(spec, s, hw, chunk) if reserve is None else reserve

    acts = activation_bytes(spec, s, chunk)
    budget = budget_bytes(hw, reserve, s.engine, acts)
    fits = _fitter(spec, budget, acts)

    def gpu_at(t: Settings) -> PerGpu:
        return per_gpu(spec, t)

    def nothing_fits() -> str:
        """What stops even one token of one sequence: the weights, then the activation estimate, else the cache."""
        g = gpu_at(s.at(1) if solve == "ctx" else replace(s, batch=1))
        return "weights" if g.weights_bytes > budget else "activations" if g.weights_bytes + acts > budget else "memory"

    if solve == "ctx":
        limit = min(max_ctx or spec.max_context, spec.max_context)
        falls = _window_falls(spec, s)
        # a sequence passes through every context below its last: c fits when every context up to c does
        best = largest_fitting(lambda c: all(fits(s.at(x)) for x in _peaks_up_to(c, falls)), limit)
        binding = nothing_fits() if not best else "max_context" if best == spec.max_context else "max_ctx" if best == limit else "memory"
        if (admitted := vllm_admitted(spec, s, budget, acts, chunk, best)) is not None and admitted < best:
            best, binding = admitted, "startup"  # vLLM starts with no max_model_len past it (a window's in flight)
        at = s.at(max(best, 1))
    else:
        # the sequences pass through every context up to s.ctx: a batch fits when it does at each peak below it
        peaks = _peaks_up_to(s.ctx, _window_falls(spec, s))
        best = largest_fitting(lambda b: all(fits(replace(s.at(x), batch=b)) for x in peaks),
                               BATCH_LIMIT)
        binding = nothing_fits() if not best else "batch_limit" if best == BATCH_LIMIT else "memory"
        if best and (admitted := vllm_admitted(spec, s, budget, acts, chunk, s.ctx)) is not None and admitted < s.ctx:
            best, binding = 0, "startup"  # vLLM does not start with a max_model_len of ctx
        cap = batch_cap(spec, s, hw, reserve, chunk)
        if cap is not None and best > cap[0]:  # the engine runs no more at once by default
            best, binding = cap
        at = replace(s, batch=max(best, 1))
    g, left = _tightest(spec, at, budget, acts)
    report = kv_cache(spec, at)
    return FitRow(
        model=spec.name, hardware=hw.name, gpus=s.gpus, memory_bytes=s.gpus * hw.memory_bytes,
        reserved_bytes=s.gpus * (hw.memory_bytes - budget), weights_bytes=weights_bytes(param_counts(spec, s.mtp).total, s.weights_dtype),
        weights_bytes_per_gpu=g.weights_bytes, activation_bytes=acts, batch=at.batch, ctx=at.ctx,
        max_ctx=best if solve == "ctx" else None, max_batch=best if solve == "batch" else None,
        kv_cache_bytes=_kv_bytes(report), kv_cache_bytes_per_gpu=g.kv_cache_bytes + g.state_bytes,
        state_bytes_per_gpu=g.state_bytes or None, free_bytes_per_gpu=left, binding=binding, exceeds_max_context=at.ctx > spec.max_context,
        kv_dtype=s.kv_dtype, kv_quant=s.kv_quant, weights_dtype=s.weights_dtype, engine=s.engine, tp=s.tp, pp=s.pp,
        dp=s.dp, ep=s.ep, dp_attention=s.dp_attention, mtp=s.mtp, reserve=float(reserve), prefill_chunk=chunk,
        **report.plan.applied(),
    )

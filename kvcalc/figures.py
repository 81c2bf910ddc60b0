"""Every cost figure of a model at one setting, as a typed result: what `compare`, `sweep` and `cost` report.

Each field carries its header, unit kind and meaning (kvcalc.fields); JSON keys, CSV headers, the column catalog
and the README's key list are generated from them. Keys are stable: later versions only add fields.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.costs.cache import CachePlan, CacheReport, cache_plan, kv_cache
from kvcalc.costs.comm import allreduce_seconds, decode_allreduce
from kvcalc.costs.flops import (
    RowPasses,
    decode_flops,
    decode_total,
    generate_flops,
    mla_crossover,
    prefill_flops,
    prefill_total,
    row_flops_with,
    row_passes,
    step_tokens,
)
from kvcalc.costs.parallel import (
    PerGpu,
    Stage,
    busiest_gpu,
    check_layout,
    rank_block_size,
    stage_read_bytes,
    stage_written_bytes,
    stages,
)
from kvcalc.costs.params import param_totals, weights_bytes
from kvcalc.costs.traffic import decode_bytes, decode_weights, prefill_bytes
from kvcalc.fields import figure
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.hardware import Hardware, Roofline


@dataclass(frozen=True)
class CostFigures:
    """Parameters, FLOPs, traffic and (with hardware) roofline times of a model at one setting."""

    gen: int = figure("Gen", "tokens", "tokens generated after the prompt of ctx (generation FLOPs)")
    weights_dtype: str = figure("Weights\ndtype", "text", "storage type of the weights")
    params_total: int = figure("Params", "count", "all weights, embeddings and norms")
    params_active: int = figure("Active\nparams", "count", "weights one token uses (MoE: top-k and shared experts)")
    weights_bytes: int = figure("Weights", "bytes", "bytes of all weights in weights_dtype")
    flops_prefill: int = figure("Prefill\nFLOPs", "flops", "FLOPs of a prefill of ctx tokens in each sequence of the batch (causal unless --dense-attn)")
    flops_decode_token: int = figure("Decode\nFLOPs/step", "flops", "FLOPs of one decode step at context ctx: one token for each sequence of the batch (under --mtp of a model with MTP layers a speculative step: the last token and k drafts verified, the MTP layers over the same 1 + k)")
    flops_generate_cached: int = figure("Generate\n(cache)", "flops", "FLOPs of generating gen tokens with a KV cache, every sequence of the batch")
    flops_generate_uncached: int = figure("Generate\n(no cache)", "flops",
                                          "FLOPs of generating gen tokens without a cache (each step re-runs its prefix), every sequence of the batch")
    decode_bytes_read: int = figure("Decode\nbytes read", "bytes", "bytes one decode step reads, the model's weights counted once (as "
                                    "one replica reads them; under --dp each replica reads its own): active weights (MoE: top-k + shared experts, a lower bound when a step runs more than one token: batch above 1, or --mtp; "
                                    "--mtp: the LM head again for each draft) + KV cache (+ states read and written back; --mtp: a recurrent state "
                                    "written a token verified); the step times use one rank's share")
    decode_intensity: float = figure("FLOP\nper byte", "float", "flops_decode_token / decode_bytes_read, the whole model's (under --tp a "
                                     "rank's can be lower: it reads MLA's latent whole)")
    mla_schedule: str | None = figure("MLA\nschedule", "text", "MLA decode schedule in effect (MLA models)")
    flops_decode_token_naive: int | None = figure("Decode\nnaive", "flops", "decode step FLOPs, MLA naive schedule")
    flops_decode_token_absorbed: int | None = figure("Decode\nabsorbed", "flops",
                                                     "decode step FLOPs, MLA absorbed schedule (latent cache)")
    mla_crossover: int | None = figure("MLA\ncrossover", "tokens",
                                       "first context at which absorbed decoding needs fewer FLOPs than naive (the one-token step, --mtp or not)")
    hardware: str | None = figure("Hardware", "text", "the hardware preset of the roofline figures")
    prefill_seconds: float | None = figure("Prefill\ntime", "seconds", "roofline lower bound on the prefill's time")
    decode_seconds_per_token: float | None = figure("Decode\ntime/step", "seconds",
                                                    "roofline lower bound on one decode step's time (a token for each sequence; under --mtp a speculative step's, which emits 1 to 1 + k)")
    tokens_per_second: float | None = figure("Tokens/s", "rate", "batch / decode time: an upper bound (not under --mtp, whose step emits up to 1 + k tokens a sequence, nor under --pp with micro-batches in flight)")
    decode_bound: str | None = figure("Decode\nbound", "text", "compute or memory: what bounds a decode step")
    fits_in_memory: bool | None = figure("Fits", "bool", "weights + KV cache + states of the busiest GPU within its whole memory: no reserve, no activations (fit counts both, so its limits are lower)")
    gpus: int = figure("GPUs", "int", "GPUs of the parallel layout: tp · pp · dp")
    kv_cache_bytes_per_gpu: int = figure("KV cache\nper GPU", "bytes",
                                         "KV cache the busiest GPU holds, the one with the most cache + states + weights (heads split by tp, its pipeline stage, its share of the batch)")
    state_bytes_per_gpu: int = figure("State\nper GPU", "bytes", "constant states the busiest GPU holds")
    weights_bytes_per_gpu: int = figure("Weights\nper GPU", "bytes", "weights the busiest GPU holds (tp, ep and pp splits); that GPU is the one with the most cache + states + weights, so this column alone may fall below the total weights / GPUs")
    tp_allreduce_bytes: int | None = figure("All-reduce\nbytes/step", "bytes",
                                            "estimate: bytes one decode step all-reduces over the tp ranks (tp > 1)")
    comm_seconds_per_token: float | None = figure("Comm\ntime/step", "seconds",
                                                  "estimate: ring all-reduce time of a decode step on the preset's interconnect")
    block_size_per_gpu: int | None = figure("Page tokens\nper GPU", "tokens",
                                            "tokens a page holds on each GPU (--engine with --tp): a hybrid model's "
                                            "vLLM page follows one rank's state")
    # the settings the figures assume that no column above names (last: later versions only add keys)
    tp: int = figure("TP", "int", "tensor-parallel ranks (--tp)")
    pp: int = figure("PP", "int", "pipeline stages (--pp)")
    dp: int = figure("DP", "int", "data-parallel replicas (--dp)")
    ep: int = figure("EP", "int", "expert-parallel ranks (--ep)")
    dp_attention: bool = figure("DP\nattention", "bool", "SGLang's DP attention: a replica's tp ranks split its "
                                "sequences' latent cache (--dp-attention)")
    dense_attn: bool = figure("Dense\nattention", "bool", "prefill FLOPs count attention as dense N×N matrices (--dense-attn)")
    mtp: bool = figure("MTP", "bool", "the multi-token-prediction layers counted, cache, weights and FLOPs, a decode step a speculative one (--mtp)")
    no_windows: bool = figure("Windows\nignored", "bool", "sliding windows and attention chunks removed, every layer "
                              "global (compare --no-windows)")


def figures(spec: ModelSpec, s: Settings, cache: CacheReport | None = None) -> CostFigures:
    """All cost figures of `spec` at settings `s` (exact ints, except ratios and seconds); `cache`: kv_cache(spec, s),
    when the caller has it."""
    return CostFigures(**figure_values(spec, s, cache))


def figures_row(spec: ModelSpec, s: Settings, cache: CacheReport | None = None,
                fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """as_row(figures(spec, s, cache)), without building the CostFigures on the way (a row of a sweep); `fixed`:
    fixed_figures(spec, s) at any context, when the caller has it."""
    return {**BLANK, **figure_values(spec, s, cache, fixed)}


BLANK = {f.name: None for f in fields(CostFigures)}  # every figure is None unless set


def fixed_figures(spec: ModelSpec, s: Settings) -> dict[str, Any]:
    """The figures that do not depend on the context (s.ctx is not read): a sweep computes them once per model and
    settings."""
    total, active = param_totals(spec, s.mtp)
    out: dict[str, Any] = dict(gen=s.gen, weights_dtype=s.weights_dtype, params_total=total, params_active=active,
                               weights_bytes=weights_bytes(total, s.weights_dtype), tp=s.tp, pp=s.pp, dp=s.dp, ep=s.ep,
                               dp_attention=s.dp_attention, dense_attn=s.dense_attn, mtp=s.mtp, no_windows=False)
    if s.engine is not None and s.tp > 1:  # the page one rank allocates (engine_kv_bytes keeps the one-GPU page)
        check_layout(spec, s)
        out.update(block_size_per_gpu=rank_block_size(stages(spec, s)))
    if spec.has_schedules():
        out.update(mla_schedule=s.schedule)
        if s.mla_cache == "latent":
            out.update(mla_crossover=mla_crossover(spec, s))
    reduce = decode_allreduce(spec, s)
    if reduce is not None:
        out.update(tp_allreduce_bytes=reduce.bytes)
        bandwidth = s.hardware.group_bandwidth(s.tp) if s.hardware is not None else None
        if bandwidth:
            out.update(comm_seconds_per_token=float(allreduce_seconds(reduce, s.tp, bandwidth)))
    return out


def figure_values(spec: ModelSpec, s: Settings, cache: CacheReport | None = None,
                  fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures of `figures` that apply (the others, None, left out), as a dict; `fixed`: fixed_figures(spec, s)."""
    out = dict(fixed_figures(spec, s) if fixed is None else fixed)
    out.update(context_figures(spec, s, cache or kv_cache(spec, s)))
    return out


class RowPlan(NamedTuple):
    """What the rows of a model at some settings share, whatever their context: its cache plan, its passes, its
    pipeline stages and the weights a decode step reads (a sweep makes it once per model and settings, so that a row
    computes what its context changes, and no more)."""

    cache: CachePlan
    passes: RowPasses | None
    stages: tuple[Stage, ...]
    decode_weights: int


def row_plan(spec: ModelSpec, s: Settings) -> RowPlan:
    """The RowPlan of `spec` at settings `s` (their context not read; the layout checked)."""
    check_layout(spec, s)
    return RowPlan(cache_plan(spec, s), row_passes(spec, s), stages(spec, s), decode_weights(spec, s))


def context_figures(spec: ModelSpec, s: Settings, cache: CacheReport, plan: RowPlan | None = None) -> dict[str, Any]:
    """The figures of figure_values that the context changes (a row of a sweep, whose head holds the fixed ones);
    `cache`: kv_cache(spec, s); `plan`: row_plan(spec, s), when the caller has it."""
    if plan is None:
        plan = row_plan(spec, s)
    f = row_flops_with(spec, s, plan.passes)
    decode = f.decode
    read = sum(decode_bytes(spec, s, cache, plan.decode_weights).values())
    gpu = busiest_gpu(s, plan.stages)
    out = {
        "flops_prefill": f.prefill,
        "flops_decode_token": decode,
        "flops_generate_cached": f.generate_cached,
        "flops_generate_uncached": f.generate_uncached,
        "decode_bytes_read": read,
        "decode_intensity": decode / read,
        "gpus": gpu.gpus,
        "kv_cache_bytes_per_gpu": gpu.kv_cache_bytes,
        "state_bytes_per_gpu": gpu.state_bytes,
        "weights_bytes_per_gpu": gpu.weights_bytes,
    }
    if f.decode_by_schedule:  # MLA: naive, and absorbed from a latent cache
        out.update({f"flops_decode_token_{name}": flops for name, flops in f.decode_by_schedule.items()})
    if s.hardware is not None:
        out.update(_roofline(spec, s, s.hardware, f.prefill, decode, read, gpu, cache))
    return out


def _roofline(spec: ModelSpec, s: Settings, hw: Hardware, prefill_flops_: int, decode: int, read: int,
              gpu: PerGpu, cache: CacheReport) -> dict:
    from kvcalc.hardware import roofline

    if s.gpus > 1:
        prefill, step = _parallel_roofline(spec, s, hw)
    else:
        prefill = roofline(prefill_flops_, sum(prefill_bytes(spec, s, cache).values()), hw)
        step = roofline(decode, read, hw)
    return {
        "hardware": hw.name,
        "prefill_seconds": float(prefill.seconds),
        "decode_seconds_per_token": float(step.seconds),
        "tokens_per_second": float(s.batch / step.seconds),
        "decode_bound": step.bound,
        "fits_in_memory": gpu.weights_bytes + gpu.kv_cache_bytes + gpu.state_bytes <= hw.memory_bytes,
    }


def _parallel_roofline(spec: ModelSpec, s: Settings, hw: Hardware) -> tuple[Roofline, Roofline]:
    """Prefill and decode rooflines of one GPU's share under a parallel layout (README, Serving): a replica's
    ceil(batch / dp) sequences; FLOPs and weights divided by tp; the cache and states one rank writes and reads (MLA's
    latent is not divided), as elements and states once, not an engine's pages (stage_written_bytes,
    stage_read_bytes); pipeline stages run one after another for a token, so pp does not shorten a step."""
    from kvcalc.hardware import roofline

    replica = replace(s, batch=-(-s.batch // s.dp), tp=1, pp=1, dp=1, ep=1, dp_attention=False)
    ranked = replace(replica, tp=s.tp, dp_attention=s.dp_attention)
    tp = s.tp
    decode = -(-decode_total(spec, replica) // tp)
    read = stage_read_bytes(ranked, stages(spec, ranked)[0], step_tokens(spec, s))  # the keys its queries attend, its states
    decode_read = _rank_weights(spec, s, decode_bytes(spec, replica)["weights"], replica.batch, prefill=False) + read
    prefill = -(-prefill_total(spec, replica) // tp)
    # the MLA prefill's form at the layout: SGLang's prefill graphs are off under pp, its forwards a replica's
    prefill_moved = (_rank_weights(spec, s, prefill_bytes(spec, replica, layout=s)["weights"], replica.batch,
                                   prefill=True) + stage_written_bytes(ranked, stages(spec, ranked)[0]))
    return roofline(prefill, prefill_moved, hw), roofline(decode, decode_read, hw)


def _rank_weights(spec: ModelSpec, s: Settings, weights: int, sequences: int, prefill: bool) -> int:
    """One rank's share of the weights a replica's pass reads (`weights`, its `sequences`' pass): divided by tp, but
    the routed experts over the G ranks one copy of them spans (expert_ranks), which serve the tokens of G / tp
    replicas: a decode step's top-k (the lower bound's one expert set), a prefill's min(E, T · k) of those tokens;
    under --ep whole experts, ceil(reached / ep) a layer on the busiest group (the next layer's routing waits on this
    one's), split over its tp / ep ranks where ep < tp; under vLLM's MoE over dp · tp (no --ep) a 1/G slice of each.
    Without --ep, where G = tp, the replica's weights over tp."""
    from fractions import Fraction

    from kvcalc.costs.engine_files import expert_ranks, expert_tokens
    from kvcalc.costs.traffic import routed_read_bytes

    ranks = expert_ranks(s)
    if ranks <= s.tp and s.ep == 1:
        return -(-weights // s.tp)
    replica = replace(s, batch=sequences, tp=1, pp=1, dp=1, ep=1, dp_attention=False)
    tokens = sequences * s.ctx if prefill else 1
    experts = routed_read_bytes(spec, replica, tokens)
    served = expert_tokens(s, sequences) if prefill else 1
    if s.ep > 1:  # whole experts, ceil(E / ep) a group of max(1, tp / ep) ranks that split each (parallel.routed_share)
        share = Fraction(weights - experts, s.tp) + Fraction(routed_read_bytes(spec, replica, served, ranks=s.ep) * s.ep,
                                                              max(s.ep, s.tp))
    else:
        share = Fraction(weights - experts, s.tp) + Fraction(routed_read_bytes(spec, replica, served), ranks)
    return -(-share.numerator // share.denominator)


def cost_breakdowns(spec: ModelSpec, s: Settings) -> dict[str, dict[str, int]]:
    """FLOPs by component for each pass `cost` reports, keyed by pass name.

    Passes: prefill (ctx tokens), decode_token (one step at context ctx), generate_cached and generate_uncached
    (gen tokens after ctx). Models with decode schedules (MLA) get decode and cached generation under each
    (naive, and absorbed when the cache is latent), suffixed _naive / _absorbed.
    """
    out = {"prefill": prefill_flops(spec, s)}
    schedules = [s.schedule]
    if spec.has_schedules():
        schedules = ["naive", "absorbed"] if s.mla_cache == "latent" else ["naive"]
    for schedule in schedules:
        suffix = f"_{schedule}" if spec.has_schedules() else ""
        at = s.with_schedule(schedule) if spec.has_schedules() else s
        out[f"decode_token{suffix}"] = decode_flops(spec, at)
        out[f"generate_cached{suffix}"] = generate_flops(spec, at, cached=True)
    out["generate_uncached"] = generate_flops(spec, s, cached=False)
    return out

"""What fits on a set of GPUs: the longest context for a batch, or the largest batch for a context, solved exactly.

The budget of each GPU is its memory less a reserved fraction (0.1; under --engine vllm its gpu_memory_utilization
0.92 reserves 0.08; under --engine sglang 1 − its default mem_fraction_static, sglang_mem_fraction), less
the weights the busiest GPU holds and an activation estimate for one prefill chunk (none under SGLang, whose fraction
leaves their room); the cache of the busiest GPU
(kvcalc.costs.parallel) must fit in what is left. The search is an integer bisection against the real cache
function, never a division: with sliding-window, chunked or constant-state layers the cache is not linear in context.
A context fits when every context up to it does (a sequence grows through each): a window's pages under an engine
other than vLLM rise and fall by one page as ctx grows, so each step of the search also checks the last fall.
Under SGLang the memory is divided into its static pools (states, full-attention and sliding-window tokens) as its
startup divides it, and each pool must hold its own part (sglang_fits). Under vLLM each stage's GPU keeps one block of
its pool back (the null block: Stage.held_back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from kvcalc.costs.parallel import PerGpu, SGLangPools, Stage, check_layout, per_gpu, sglang_pools, stage_gpu, stages
from kvcalc.fields import figure
from kvcalc.settings import Settings
from kvcalc.solve import largest_fitting

if TYPE_CHECKING:
    from kvcalc.costs.cache import CacheReport
    from kvcalc.hardware import Hardware
    from kvcalc.spec import ModelSpec

BATCH_LIMIT = 1 << 20  # the largest batch `fit` searches
# SGLang's defaults for dividing a GPU's cache memory between its pools (sglang arg_groups/fields/schedule.py):
# --swa-full-tokens-ratio, the SWA pool's tokens over the full pool's; --mamba-full-memory-ratio, the state pool's
# memory over the KV pools'.
SGLANG_SWA_FULL_TOKENS_RATIO = Fraction(4, 5)
SGLANG_MAMBA_FULL_MEMORY_RATIO = Fraction(9, 10)
# --max-running-requests under speculative decoding when not given (sglang arg_groups/speculative_hook.py)
SGLANG_SPEC_MAX_RUNNING_REQUESTS = 48


@dataclass(frozen=True)
class FitRow:
    """One answer of `fit`: the layout, the memory it spends, and the maximum found, with what limits it."""

    model: str = figure("Model", "text", "the model's name")
    hardware: str = figure("Hardware", "text", "the hardware preset")
    gpus: int = figure("GPUs", "int", "GPUs: tp · pp · dp")
    memory_bytes: int = figure("Memory", "bytes", "device memory of all GPUs")
    reserved_bytes: int = figure("Reserved", "bytes", "memory left unused by the reserve fraction, all GPUs")
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
                          "the engine's default cap on sequences at once (max_num_seqs, max_running_requests), "
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
    reserve: float = figure("Reserve", "float", "fraction of each GPU's memory left unused (--reserve, or its default)")
    prefill_chunk: int = figure("Prefill\nchunk", "tokens", "tokens of one prefill chunk, for the activation estimate (SGLang: its chunked_prefill_size, in its static fraction)")



VLLM_LARGE_GPU = 70 * 2**30  # vLLM's thresholds for its larger batch defaults
VLLM_LARGEST_GPU = 160 * 2**30
RESERVE = "0.1"  # --reserve's default
VLLM_RESERVE = "0.08"  # under --engine vllm: CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION 0.92 (vLLM 0.34.0)


def default_reserve(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> Fraction:
    """The fraction of each GPU's memory --reserve leaves unused when not given: vLLM's 1 − 0.92 under --engine vllm,
    1 − SGLang's default --mem-fraction-static under --engine sglang (sglang_mem_fraction), else 0.1 (vLLM's earlier
    0.9)."""
    if s.engine == "sglang":
        return 1 - sglang_mem_fraction(spec, s, hw, chunk)
    return Fraction(VLLM_RESERVE if s.engine == "vllm" else RESERVE)


# SGLang 0.5.23's defaults by the GPU's memory in MiB (srt/arg_groups/memory_hook.py handle_gpu_memory_settings): below
# each bound, chunked_prefill_size and the decode CUDA graphs' max_bs at tp < 4 and at tp >= 4; the last, any larger
SGLANG_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


# Families whose published checkpoints SGLang 0.5.23 serves as multimodal (model_config.py is_multimodal: Gemma 3 and
# Llama 4 are served as text by default): it turns their breakable prefill CUDA graphs off unless allow-listed
# (cuda_graph_hook.py; Qwen3.5 alone of these), and for those with a vision (or audio) tower trims their static
# fraction (memory_hook.py adjust_mem_fraction_for_vlm) and loads the tower's weights, neither in kvcalc's text specs
SGLANG_MULTIMODAL = frozenset({"gemma4", "gemma3n", "qwen3_vl", "qwen3_5_moe", "whisper"})
SGLANG_MULTIMODAL_GRAPHS = frozenset({"qwen3_5_moe"})  # is_multimodal_breakable_cuda_graph_supported
SGLANG_TOWERS = SGLANG_MULTIMODAL - {"whisper"}  # Whisper's config has no vision_config, its encoder is in its spec
# Families whose attention backend SGLang picks before its ROCm default, aiter (model_override_base.py): Whisper's
# flashinfer, and the model overrides' triton for Gemma 4 and OLMo 2 (arg_groups/model_overrides gemma4.py, olmo2.py;
# SGLang serves OLMo 3 as OLMo 2, configs/olmo3.py)
SGLANG_NOT_AITER = frozenset({"whisper", "gemma4", "olmo2", "olmo3"})


def _sglang_tier(hw: Hardware, tp: int) -> tuple[int, int]:
    """SGLang's chunked_prefill_size and decode graphs' max_bs on `hw` at `tp` (SGLANG_TIERS)."""
    mib = Fraction(hw.memory_bytes, 2**20)
    bound, chunk, small, large = next(t for t in SGLANG_TIERS if t[0] is None or mib < t[0])
    return chunk, small if tp < 4 else large


def sglang_mem_fraction(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> Fraction:
    """SGLang 0.5.23's default --mem-fraction-static, (weights + KV pools) / GPU memory, as its start-up computes it
    (memory_hook.py handle_gpu_memory_settings; one server of a text model on one node, no DeepEP, post-capture KV
    sizing off as by default): (memory − _sglang_reserved_mib) / memory rounded to 3 places, in SGLang's own floats
    (a fraction to 3 places, never a byte count), then aiter's × 0.85 on AMD GPUs (_sglang_aiter). The memory is the
    preset's (SGLang reads nvidia-smi's total, a little less: README, Hardware presets)."""
    from kvcalc.errors import KvcalcError

    gpu_mem, reserved = hw.memory_bytes / 2**20, _sglang_reserved_mib(spec, s, hw, chunk)
    fraction = Fraction(str(round((gpu_mem - reserved) / gpu_mem, 3)))
    if fraction <= 0:
        raise KvcalcError(f"--prefill-chunk {chunk:,} --engine sglang: SGLang would keep {reserved:,.0f} MiB of the "
                          f"{gpu_mem:,.0f} MiB of {hw.name} for activations and graphs (1.5 MiB a chunk token), leaving "
                          "no static memory: give a smaller --prefill-chunk, or --reserve")
    return fraction * (Fraction(85, 100) if _sglang_aiter(spec, s, hw) else 1)


def _sglang_reserved_mib(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> float:
    """The MiB SGLang keeps out of its static fraction (memory_hook.py, reserve_for_graph_mb): 512 + 1.5 a token of
    max(chunk, 2048) (activations) + tp·pp/8 · 1024 + 2 a decode graph batch of its max_bs (+ max_bs · attention-dp
    size · 3, and · 1.5 more past 300, under DP attention) + the prefill graphs (on by default on CUDA at pp 1, off for
    KDA hybrids and multimodal models outside its allow-list: 1.5 GiB for an MLA model, else 8 a captured size up to
    chunk), at least 10 GiB on a GPU of over 60 GiB."""
    from kvcalc.attention import MLA

    max_bs = _sglang_tier(hw, s.tp)[1]
    reserved = 512 + max(chunk, 2048) * 1.5 + s.tp * s.pp / 8 * 1024 + max_bs * 2
    if s.dp_attention:  # attention-dp size: kvcalc's --dp-attention is SGLang's --dp = --tp
        reserved += max_bs * s.tp * 3 + (max_bs * s.tp * 1.5 if max_bs > 300 else 0)
    graphs = spec.family not in SGLANG_MULTIMODAL - SGLANG_MULTIMODAL_GRAPHS and spec.family != "kimi_linear"
    if hw.vendor.casefold() == "nvidia" and s.pp == 1 and graphs:  # breakable prefill graphs (the CUDA default)
        mla = any(isinstance(g.attention, MLA) for g in spec.groups)
        reserved += 1.5 * 1024 if mla else 8 * _prefill_captures(chunk)
    return max(reserved, 10 * 1024) if hw.memory_bytes > 60 * 2**30 else reserved


def _sglang_aiter(spec: ModelSpec, s: Settings, hw: Hardware) -> bool:
    """Whether SGLang trims its fraction by 0.85 for aiter's non-static workspace (attention_hook.py): on AMD GPUs
    (a preset's vendor, in any case), where aiter is its default attention backend (MHA models; MLA at 16 or 128 heads
    a rank; not where a model override picks another first: SGLANG_NOT_AITER, and DeepSeek Sparse Attention's dsa),
    for a model whose context is over 8,192."""
    from kvcalc.attention import MLA

    mla = [g.attention for g in spec.groups if isinstance(g.attention, MLA)]
    aiter = not mla or mla[0].n_heads // s.tp in (16, 128) and not mla[0].indexed
    return hw.vendor.casefold() == "amd" and aiter and spec.family not in SGLANG_NOT_AITER and spec.max_context > 8192


def _prefill_captures(max_bs: int) -> int:
    """How many token counts SGLang captures prefill graphs at, up to max_bs (cuda_graph_hook.py
    generate_prefill_cuda_graph_batch_sizes: 4..32 by 4, 48..256 by 16, 288..512 by 32, 576..1,024 by 64, 1,280..4,096
    by 256, then by 512 from 4,608), counted, never listed: --prefill-chunk goes up to 2^40."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))
    count = sum((min(hi, max_bs) - lo) // by + 1 for lo, hi, by in steps if lo <= max_bs)
    return count + ((max_bs - 4608) // 512 + 1 if max_bs >= 4608 else 0)


def default_prefill_chunk(engine: str | None, hw: Hardware) -> int:
    """Tokens of one prefill chunk when --prefill-chunk is not given: `vllm serve`'s max_num_batched_tokens (16384 on
    a device of at least 160 GiB, 8192 on one of at least 70 GiB that is not an A100, else 2048:
    vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER, vLLM 0.34.0; vLLM's TPU overrides are
    not modelled), SGLang's chunked_prefill_size for the GPU (SGLANG_TIERS), else 2048."""
    if engine == "sglang":
        return _sglang_tier(hw, 1)[0]  # the chunk of the GPU's tier, whatever the tp
    if engine == "vllm" and hw.memory_bytes >= VLLM_LARGEST_GPU:
        return 16384
    if engine == "vllm" and hw.memory_bytes >= VLLM_LARGE_GPU and "a100" not in hw.name.lower():
        return 8192
    return 2048


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


class SGLangCapacity(NamedTuple):
    """SGLang's static pools on one GPU: state slots (None without states), full-pool tokens (its
    max_total_num_tokens), SWA-pool tokens (None without freed sliding layers)."""

    slots: int | None
    tokens: int
    swa_tokens: int | None


def sglang_capacity(p: SGLangPools, room: int) -> SGLangCapacity | None:
    """SGLang's pools in `room` bytes (a GPU's memory after weights and activations), as its startup divides them
    (None where not even the state pool fits): the state pool first (kv_cache_configurator._handle_max_mamba_cache:
    max_mamba_cache_size K = (room · r/(1 + r)) // S slots of one sequence's states S, K · S bytes taken from the room;
    MambaPool allocates K + 1, its slot 0 a padding slot outside that split, so K are usable), then with both
    full and sliding layers, full_tokens = room / (full rate + 0.8 · SWA rate) and swa_tokens = 0.8 · full_tokens
    (pool_configurator.HybridSWAPoolConfigurator), else room / rate tokens, each rounded down to whole pages."""
    slots = None
    if p.state_per_sequence:
        r = SGLANG_MAMBA_FULL_MEMORY_RATIO
        slots = int(room * r / (1 + r) // p.state_per_sequence)
        room -= slots * p.state_per_sequence
    if room < 0 or slots is not None and slots < 1:
        return None

    def whole_pages(tokens: Fraction) -> int:
        return tokens // p.block * p.block

    full_rate, swa_rate = p.full_rate + p.sized_full_rate, p.swa_rate + p.sized_swa_rate  # as the sizing counts them
    if full_rate and swa_rate:
        full_tokens = whole_pages(room / (full_rate + SGLANG_SWA_FULL_TOKENS_RATIO * swa_rate))
        return SGLangCapacity(slots, full_tokens, whole_pages(full_tokens * SGLANG_SWA_FULL_TOKENS_RATIO))
    rate = full_rate + swa_rate
    return SGLangCapacity(slots, whole_pages(room / rate) if rate else 0, None)


def sglang_short(p: SGLangPools, room: int) -> str | None:
    """The SGLang static pool a stage's cache and states overflow in `room` bytes (sglang_capacity), or None where
    they fit: 'state' (each running sequence holds a state slot), 'swa' (the sliding-window pool's tokens) or 'kv'
    (the token pool's)."""
    c = sglang_capacity(p, room)
    if c is None or c.slots is not None and p.sequences > c.slots:
        return "state"
    if c.swa_tokens is not None:
        return "kv" if p.full_bytes > c.tokens * p.full_rate else "swa" if p.swa_bytes > c.swa_tokens * p.swa_rate else None
    return "kv" if p.full_bytes + p.swa_bytes > c.tokens * (p.full_rate + p.swa_rate) else None


def sglang_fits(p: SGLangPools, room: int) -> bool:
    """Whether a stage's cache and states fit SGLang's static pools in `room` bytes."""
    return sglang_short(p, room) is None


# SGLang's mamba radix cache takes the extra-buffer strategy for these architectures (arg_groups/overrides.py
# _MAMBA_EXTRA_BUFFER_ARCHS, with the default triton linear-attention backend and overlap schedule): a running request
# holds 3 + 2 state slots (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + the tracking slots), otherwise 3
SGLANG_EXTRA_BUFFER_FAMILIES = frozenset({"qwen3_next", "nemotron_h", "falcon_h1", "granitemoehybrid", "kimi_linear",
                                          "qwen3_5_moe"})
VLLM_MAX_NUM_SEQS = (1024, 256)  # vllm serve's default max_num_seqs: GPUs of 70 GiB or more but A100s, and the rest


def engine_batch_cap(spec: ModelSpec, s: Settings, hw: Hardware, room: dict[int, int]) -> tuple[int, str] | None:
    """The most sequences the engine runs at once by default, and its name: vLLM's max_num_seqs (get_batch_defaults:
    1024 on a GPU of 70 GiB or more that is not an A100, else 256), SGLang's max_running_requests
    (kv_cache_configurator.resolve_max_num_reqs: min(clamp(tokens / context_len · 512, 2048, 4096), tokens // 2);
    under --mtp, speculative decoding, min(max(1, 48 // its attention-DP workers), tokens // 2), as SGLang sets 48
    (arg_groups/speculative_hook.py _handle_eagle_family); with states min(that, K // 3, or // 5 with its extra
    buffer)); per data-parallel replica, so times dp, and
    SGLang's per attention-DP worker ("per dp worker": under --dp-attention each of a replica's tp ranks runs its own
    scheduler over its own pool), so times tp there too. `room`: each stage's bytes for the cache (SGLang's pools).
    None without an engine."""
    if s.engine == "vllm":
        large = hw.memory_bytes >= VLLM_LARGE_GPU and ("a100" not in hw.name.lower() or hw.memory_bytes >= VLLM_LARGEST_GPU)
        return VLLM_MAX_NUM_SEQS[0 if large else 1] * s.dp, "max_num_seqs"
    if s.engine != "sglang":
        return None
    caps = []
    workers = s.tp if s.dp_attention else 1  # a replica's attention-DP workers
    for plan in stages(spec, s.at(1)):
        c = sglang_capacity(sglang_pools(s.at(1), plan), room[plan.stage])
        if c is None:
            return None
        if s.mtp and spec.mtp_layers:  # speculative decoding: 48 unless set, split over the workers
            cap = min(max(1, SGLANG_SPEC_MAX_RUNNING_REQUESTS // workers), c.tokens // 2)
        else:
            cap = min(max(min(c.tokens * 512 // spec.max_context, 4096), 2048), c.tokens // 2)
        if c.slots is not None:
            cap = min(cap, c.slots // (5 if spec.family in SGLANG_EXTRA_BUFFER_FAMILIES else 3))
        caps.append(cap)
    return min(caps) * s.dp * workers, "max_running_requests"


def budget_bytes(hw: Hardware, reserve: Fraction) -> int:
    """A GPU's memory less the reserved fraction, in whole bytes."""
    return (hw.memory_bytes * (1 - reserve)).__floor__()


def batch_cap(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int) -> tuple[int, str] | None:
    """engine_batch_cap with each stage's room for the cache at the budget `fit` uses."""
    acts = activation_bytes(spec, s, chunk)
    budget = budget_bytes(hw, reserve)
    return engine_batch_cap(spec, s, hw, {p.stage: pool_room(budget, p, acts) for p in stages(spec, s)})


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
            return all(sglang_fits(sglang_pools(t, plan), pool_room(budget, plan, acts)) for plan in stages(spec, t))
        return _tightest(spec, t, budget, acts)[1] >= 0

    return fits


def sglang_pool_binding(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int,
                        solve: str, best: int) -> tuple[str, int | None] | None:
    """Under --engine sglang, which of its static pools stops one step past the answer `best` (a batch or a context):
    'state' (every state slot taken: sglang_capacity's slots, the room's mamba_full_memory_ratio share), 'swa' (the
    sliding-window pool) or 'kv' (the token pool, beside a state or sliding-window pool), with the state slots there
    are; None elsewhere, where one pool holds everything, or where none stops it."""
    if s.engine != "sglang":
        return None
    budget, acts = budget_bytes(hw, reserve), activation_bytes(spec, s, chunk)
    falls = _window_falls(spec, s)
    tries = [replace(s.at(x), batch=best + 1) for x in _peaks_up_to(s.ctx, falls)] if solve == "batch" else \
        [replace(s.at(x), batch=s.batch) for x in _peaks_up_to(best + 1, falls)]
    for t in tries:
        for plan in stages(spec, t):
            p, room = sglang_pools(t, plan), pool_room(budget, plan, acts)
            if (short := sglang_short(p, room)) is None:
                continue
            c = sglang_capacity(p, room)
            if short == "kv" and (c is None or c.slots is None and c.swa_tokens is None):
                return None  # one pool: plain memory
            return short, None if c is None else c.slots
    return None


def pool_room(budget: int, plan: Stage, acts: int) -> int:
    """What an engine's pools divide on a stage's GPU: the budget less the stage's weights and the activation estimate."""
    return budget - plan.weights_bytes - acts


def binding_context(spec: ModelSpec, s: Settings, hw: Hardware, reserve: Fraction, chunk: int, batch: int) -> int | None:
    """The context below `s.ctx` that stops one sequence more than `batch`, where that many fit at `s.ctx` itself: the
    last fall of a window's pages that they pass through (see `_peaks_up_to`); None when `s.ctx` binds."""
    fits = _fitter(spec, budget_bytes(hw, reserve), activation_bytes(spec, s, chunk))
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

    budget = budget_bytes(hw, reserve)
    acts = activation_bytes(spec, s, chunk)
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
        at = s.at(max(best, 1))
        binding = nothing_fits() if not best else "max_context" if best == spec.max_context else "max_ctx" if best == limit else "memory"
    else:
        # the sequences pass through every context up to s.ctx: a batch fits when it does at each peak below it
        peaks = _peaks_up_to(s.ctx, _window_falls(spec, s))
        best = largest_fitting(lambda b: all(fits(replace(s.at(x), batch=b)) for x in peaks),
                               BATCH_LIMIT)
        binding = nothing_fits() if not best else "batch_limit" if best == BATCH_LIMIT else "memory"
        cap = batch_cap(spec, s, hw, reserve, chunk)
        if cap is not None and best > cap[0]:  # the engine runs no more at once by default
            best, binding = cap
        at = replace(s, batch=max(best, 1))
    g, left = _tightest(spec, at, budget, acts)
    return FitRow(
        model=spec.name, hardware=hw.name, gpus=s.gpus, memory_bytes=s.gpus * hw.memory_bytes,
        reserved_bytes=s.gpus * (hw.memory_bytes - budget), weights_bytes=weights_bytes(param_counts(spec, s.mtp).total, s.weights_dtype),
        weights_bytes_per_gpu=g.weights_bytes, activation_bytes=acts, batch=at.batch, ctx=at.ctx,
        max_ctx=best if solve == "ctx" else None, max_batch=best if solve == "batch" else None,
        kv_cache_bytes=_kv_bytes(kv_cache(spec, at)), kv_cache_bytes_per_gpu=g.kv_cache_bytes + g.state_bytes,
        state_bytes_per_gpu=g.state_bytes or None, free_bytes_per_gpu=left, binding=binding, exceeds_max_context=at.ctx > spec.max_context,
        kv_dtype=s.kv_dtype, kv_quant=s.kv_quant, weights_dtype=s.weights_dtype, engine=s.engine, tp=s.tp, pp=s.pp,
        dp=s.dp, ep=s.ep, dp_attention=s.dp_attention, mtp=s.mtp, reserve=float(reserve), prefill_chunk=chunk,
    )

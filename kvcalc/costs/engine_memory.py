"""How each serving engine divides a GPU's memory when its own defaults stand: the fraction it leaves unused (vLLM's
gpu_memory_utilization, SGLang's mem_fraction_static as its start-up computes it), its prefill chunk, how SGLang
divides what is left between its static pools, and how many sequences each runs at once. `fit` asks these; the cache's
pages and the weights each engine holds are in kvcalc.costs.paged and kvcalc.costs.engine_files."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from kvcalc.costs.paged import sglang_window
from kvcalc.costs.parallel import AdmissionGroup, SGLangPools, Stage, sglang_pools, stages
from kvcalc.settings import Settings

if TYPE_CHECKING:
    from kvcalc.hardware import Hardware
    from kvcalc.spec import ModelSpec

# SGLang's defaults for dividing a GPU's cache memory between its pools (sglang arg_groups/fields/schedule.py):
# --swa-full-tokens-ratio, the SWA pool's tokens over the full pool's; --mamba-full-memory-ratio, the state pool's
# memory over the KV pools'.
SGLANG_SWA_FULL_TOKENS_RATIO = Fraction(4, 5)
SGLANG_MAMBA_FULL_MEMORY_RATIO = Fraction(9, 10)
# --max-running-requests under speculative decoding when not given (sglang arg_groups/speculative_hook.py)
SGLANG_SPEC_MAX_RUNNING_REQUESTS = 48
VLLM_LARGE_GPU = 70 * 2**30  # vLLM's thresholds for its larger batch defaults
VLLM_LARGEST_GPU = 160 * 2**30
RESERVE = "0.1"  # --reserve's default
# vllm serve's max_num_batched_tokens on a TPU by its chip, which the memory tiers' give way to (arg_utils.py
# get_batch_defaults: "tpu specific default values", OPENAI_API_SERVER); a preset's name says its chip
VLLM_TPU_CHUNK = {"v6e": 1024, "v5e": 512, "v5p": 256}
# under --engine vllm where its extensible KV cache is off (vLLM 0.34.0 config/cache.py: DEFAULT_GPU_MEMORY_UTILIZATION
# 0.92, resolved_gpu_memory_utilization); where it is on, the utilization defaults to 1.0
VLLM_RESERVE = "0.08"
# vLLM 0.34.0's extensible KV cache, on by default on CUDA and ROCm (config/vllm.py _resolve_extensible_kv_cache:
# "only supported on CUDA and ROCm"), sizes the cache from the memory measured free after warmup, less a margin of
# max(floor, 0.75 · the transient peak P) and P itself (v1/worker/extensible_kv_cache.py measure_kv_cache_bytes,
# KV_CACHE_MARGIN_FLOOR_BYTES: 1 GiB, 3 GiB on ROCm; KV_CACHE_MARGIN_FRACTION 0.75). By a preset's vendor.
VLLM_MARGIN_FLOOR = {"cuda": 1 << 30, "rocm": 3 << 30}  # by Hardware.platform
VLLM_MARGIN_FRACTION = Fraction(3, 4)


def vllm_extensible(hw: Hardware) -> bool:
    """Whether vLLM 0.34.0 sizes its cache on `hw` with its extensible KV cache (its default on CUDA and ROCm GPUs)."""
    return hw.platform in VLLM_MARGIN_FLOOR


def vllm_margin(hw: Hardware, acts: int) -> int:
    """The bytes vLLM's extensible KV cache keeps free beside the transient peak, whatever the utilization:
    max(1 GiB (3 on ROCm), ⌊0.75 · P⌋), with kvcalc's activation estimate `acts` for the peak P it measures
    (measure_kv_cache_bytes: int(transient_peak_bytes * KV_CACHE_MARGIN_FRACTION)). 0 where the cache is not
    extensible."""
    if not vllm_extensible(hw):
        return 0
    return max(VLLM_MARGIN_FLOOR[hw.platform], (acts * VLLM_MARGIN_FRACTION).__floor__())


def default_reserve(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> Fraction:
    """The fraction of each GPU's memory --reserve leaves unused when not given: under --engine vllm 1 − its default
    gpu_memory_utilization (1.0 where its extensible KV cache is on, NVIDIA and AMD GPUs, whose margin budget_bytes
    keeps; else 0.92), 1 − SGLang's default --mem-fraction-static under --engine sglang (sglang_mem_fraction), else
    0.1 (vLLM's earlier 0.9)."""
    if s.engine == "sglang":
        return 1 - sglang_mem_fraction(spec, s, hw, chunk)
    if s.engine == "vllm":
        return Fraction(0 if vllm_extensible(hw) else VLLM_RESERVE)
    return Fraction(RESERVE)


def budget_bytes(hw: Hardware, reserve: Fraction, engine: str | None, acts: int) -> int:
    """What a GPU's weights, activations and cache may take, in whole bytes: its memory less the reserved fraction;
    under --engine vllm the memory it requests, ⌈memory · (1 − reserve)⌉ (v1/worker/utils.py request_memory), and
    where its extensible KV cache is on at most the memory less its margin (vllm_margin; measure_kv_cache_bytes:
    min(requested − used, free − margin) − P, with the weights in `used`, the activation estimate `acts` for P and
    the preset's memory for what CUDA reports free, README: Hardware presets)."""
    memory = hw.memory_bytes
    if engine != "vllm":
        return (memory * (1 - reserve)).__floor__()
    return min(vllm_requested(hw, reserve), memory - vllm_margin(hw, acts))


def vllm_requested(hw: Hardware, reserve: Fraction) -> int:
    """The memory vLLM requests at gpu_memory_utilization 1 − `reserve`: ⌈memory · (1 − reserve)⌉ (v1/worker/utils.py
    request_memory); below it, budget_bytes is bound by the margin."""
    return (hw.memory_bytes * (1 - reserve)).__ceil__()


# SGLang 0.5.23's defaults by the GPU's memory in MiB (srt/arg_groups/memory_hook.py handle_gpu_memory_settings): below
# each bound, chunked_prefill_size and the decode CUDA graphs' max_bs at tp < 4 and at tp >= 4; the last, any larger
SGLANG_TIERS = ((20 * 1024, 2048, 8, 8), (35 * 1024, 4096, 48, 160), (60 * 1024, 4096, 32, 160),
                (90 * 1024, 8192, 256, 512), (160 * 1024, 8192, 256, 512), (None, 16384, 512, 512))


# Families whose published checkpoints SGLang 0.5.23 serves as multimodal (model_config.py is_multimodal: Gemma 3 and
# Llama 4 are served as text by default): it turns their breakable prefill CUDA graphs off unless allow-listed
# (cuda_graph_hook.py; Qwen3.5 alone of these), and for those with a vision (or audio) tower trims their static
# fraction (memory_hook.py adjust_mem_fraction_for_vlm) and loads the tower's weights, neither in kvcalc's text specs
SGLANG_MULTIMODAL = frozenset({"gemma4", "gemma3n", "qwen3_vl", "qwen3_5_moe", "whisper", "mistral", "ministral3"})
# Of those, the families whose checkpoints are multimodal only where the spec says so (ModelSpec.multimodal true):
# Mistral 3's (Mistral3ForConditionalGeneration, with its Pixtral tower: model_config.py multimodal_model_archs),
# whose text model is a Mistral or Ministral 3 like the text-only checkpoints
OPT_IN_TOWERS = frozenset({"mistral", "ministral3"})
SGLANG_MULTIMODAL_GRAPHS = frozenset({"qwen3_5_moe"})  # is_multimodal_breakable_cuda_graph_supported
# What SGLang takes from a multimodal model's KV budget for memory it allocates after the pools are sized
# (kv_cache_configurator.py mm_runtime_reservation_gb, in _profile_available_bytes): its embedding cache,
# SGLANG_VLM_CACHE_SIZE_MB (100), and with the cuda_ipc feature transport SGLANG_MM_FEATURE_CACHE_MB (1,024) more;
# Qwen3-VL on a Hopper GPU of 60 GiB or more turns the first off and the transport on
# (model_overrides/qwen3_vl.py _qwen3vl_hopper_serving_overrides, large_hopper_qwen3_vl_model_type)
SGLANG_VLM_CACHE_BYTES = 100 * 2**20
SGLANG_MM_FEATURE_CACHE_BYTES = 1024 * 2**20


def sglang_mm_reservation(spec: ModelSpec, s: Settings) -> int:
    """Bytes SGLang takes from a multimodal checkpoint's KV budget (SGLANG_VLM_CACHE_BYTES, or Qwen3-VL's feature
    cache on a large Hopper), 0 for a text model."""
    if not with_tower(spec, SGLANG_MULTIMODAL):
        return 0
    hw = s.hardware
    if spec.family == "qwen3_vl" and hw is not None and hw.platform == "cuda" and hw.capability is not None \
            and hw.capability[0] == 9 and hw.memory_bytes >= 60 * 2**30:
        return SGLANG_MM_FEATURE_CACHE_BYTES
    return SGLANG_VLM_CACHE_BYTES
SGLANG_TOWERS = SGLANG_MULTIMODAL - {"whisper"}  # Whisper's config has no vision_config, its encoder is in its spec
# Families whose published checkpoints carry a vision (or audio) tower both engines load though kvcalc's specs are
# text models: the above, and Gemma 3 (4B and up) and Llama 4, whose Gemma3ForConditionalGeneration and
# Llama4ForConditionalGeneration SGLang builds with the tower though it serves them as text (gemma3_mm.py builds
# SiglipVisionModel; model_config.py only turns their multimodal processing off); vLLM loads the tower of all of them
TOWER_FAMILIES = SGLANG_TOWERS | {"gemma3", "llama4"}


def with_tower(spec: ModelSpec, families: frozenset[str]) -> bool:
    """Whether `spec`'s checkpoint is one of `families`' multimodal ones: its family's, unless the spec says it is a
    text model (ModelSpec.multimodal false: Gemma 3 1B, a gemma4_text import); for OPT_IN_TOWERS only where the
    spec says it is multimodal (a Mistral 3 import)."""
    if spec.family not in families:
        return False
    return spec.multimodal is True if spec.family in OPT_IN_TOWERS else spec.multimodal is not False
# Families whose attention backend SGLang picks before its ROCm default, aiter (model_override_base.py): Whisper's
# flashinfer, and the model overrides' triton for Gemma 4 and OLMo 2 (arg_groups/model_overrides gemma4.py, olmo2.py;
# SGLang serves OLMo 3 as OLMo 2, configs/olmo3.py)
SGLANG_NOT_AITER = frozenset({"whisper", "gemma4", "olmo2", "olmo3"})


def vllm_a100(hw: Hardware) -> bool:
    """Whether vLLM's batch defaults take `hw` for an A100 (engine/arg_utils.py get_batch_defaults tests the CUDA
    device's name, 'NVIDIA A100-SXM4-80GB'): Hardware.names_a100."""
    return hw.names_a100


def sglang_prefill_graphs(spec: ModelSpec, s: Settings, platform: str) -> bool:
    """Whether SGLang builds its breakable CUDA graphs for `spec`'s prefills on a GPU of `platform`
    (Hardware.platform; cuda_graph_config.py default_prefill_backend: on CUDA; cuda_graph_hook.py: off at pp > 1, for
    KDA hybrids and for multimodal models outside its allow-list)."""
    graphs = not with_tower(spec, SGLANG_MULTIMODAL - SGLANG_MULTIMODAL_GRAPHS) and spec.family != "kimi_linear"
    return platform == "cuda" and s.pp == 1 and graphs


def sglang_chunk(memory_bytes: int) -> int:
    """SGLang's default chunked_prefill_size on a GPU of `memory_bytes` (SGLANG_TIERS), whatever the tp."""
    return _sglang_tier(memory_bytes, 1)[0]


def _sglang_tier(memory_bytes: int, tp: int) -> tuple[int, int]:
    """SGLang's chunked_prefill_size and decode graphs' max_bs on a GPU of `memory_bytes` at `tp` (SGLANG_TIERS)."""
    mib = Fraction(memory_bytes, 2**20)
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
        parts = _sglang_reserved_parts(spec, s, hw, chunk)
        words = {"chunk": f"a prefill chunk of {chunk:,} tokens at 1.5 MiB a token",
                 "ranks": f"{s.tp * s.pp:,} rank{'s' if s.tp * s.pp != 1 else ''} (tp · pp) at 128 MiB each",
                 "dp": f"attention-dp decode graphs of {s.tp:,} ranks",
                 "graphs": "prefill graphs", "base": "its base and decode graphs"}
        largest = max(parts, key=lambda k: parts[k])
        fix = {"chunk": "a smaller --prefill-chunk", "ranks": "fewer GPUs", "dp": "no --dp-attention or a smaller --tp",
               "graphs": "a smaller --prefill-chunk"}.get(largest, "a GPU with more memory")
        shown = ", ".join(f"{parts[k]:,.0f} MiB for {words[k]}" for k in sorted(parts, key=lambda k: -parts[k])
                          if parts[k])
        raise KvcalcError(f"--engine sglang: SGLang would keep {reserved:,.0f} MiB of the {gpu_mem:,.0f} MiB of "
                          f"{hw.name} for activations and graphs ({shown}), leaving no static memory: give {fix}, "
                          "or --reserve")
    return fraction * (Fraction(85, 100) if _sglang_aiter(spec, s, hw) else 1)


def _sglang_reserved_mib(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> float:
    """The MiB SGLang keeps out of its static fraction (memory_hook.py, reserve_for_graph_mb): 512 + 1.5 a token of
    max(chunk, 2048) (activations) + tp·pp/8 · 1024 + 2 a decode graph batch of its max_bs (+ max_bs · attention-dp
    size · 3, and · 1.5 more past 300, under DP attention) + the prefill graphs (on by default on CUDA at pp 1, off for
    KDA hybrids and multimodal models outside its allow-list: 1.5 GiB for an MLA model, else 8 a captured size up to
    chunk), at least 10 GiB on a GPU of over 60 GiB."""
    reserved = sum(_sglang_reserved_parts(spec, s, hw, chunk).values())
    return max(reserved, 10 * 1024) if hw.memory_bytes > 60 * 2**30 else reserved


def _sglang_reserved_parts(spec: ModelSpec, s: Settings, hw: Hardware, chunk: int) -> dict[str, float]:
    """_sglang_reserved_mib's terms in MiB, by name (each a sum of halves and eighths of 1,024: exact in floats)."""
    from kvcalc.attention import MLA

    max_bs = _sglang_tier(hw.memory_bytes, s.tp)[1]
    parts = {"base": 512 + max_bs * 2, "chunk": max(chunk, 2048) * 1.5, "ranks": s.tp * s.pp / 8 * 1024,
             "dp": 0.0, "graphs": 0.0}
    if s.dp_attention:  # attention-dp size: kvcalc's --dp-attention is SGLang's --dp = --tp
        parts["dp"] = max_bs * s.tp * 3 + (max_bs * s.tp * 1.5 if max_bs > 300 else 0)
    if sglang_prefill_graphs(spec, s, hw.platform):  # breakable prefill graphs (the CUDA default)
        mla = any(isinstance(g.attention, MLA) for g in spec.groups)
        parts["graphs"] = 1.5 * 1024 if mla else 8 * _prefill_captures(chunk)
    return parts


def _sglang_aiter(spec: ModelSpec, s: Settings, hw: Hardware) -> bool:
    """Whether SGLang trims its fraction by 0.85 for aiter's non-static workspace (attention_hook.py): on AMD GPUs
    (a preset's vendor, in any case), where aiter is its default attention backend (MHA models; MLA at 16 or 128 heads
    a rank; not where a model override picks another first: SGLANG_NOT_AITER, and DeepSeek Sparse Attention's dsa),
    for a model whose context is over 8,192."""
    from kvcalc.attention import MLA

    mla = any(isinstance(g.attention, MLA) for g in spec.groups)
    aiter = not mla or sglang_mla_aiter(spec, s.tp)
    return hw.platform == "rocm" and aiter and spec.family not in SGLANG_NOT_AITER and spec.max_context > 8192


def sglang_mla_aiter(spec: ModelSpec, tp: int) -> bool:
    """Whether SGLang picks aiter for `spec`'s MLA on an AMD GPU (model_override_base.py get_default_attn_backend): its
    heads over tp (num_kv_heads at tp_size, whatever DP attention) 16 or 128, and no DeepSeek Sparse Attention indexer
    (whose model override picks dsa); else Triton."""
    from kvcalc.attention import MLA

    mla = next(g.attention for g in spec.groups if isinstance(g.attention, MLA))
    return mla.n_heads // tp in (16, 128) and not mla.indexed


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
    vllm/engine/arg_utils.py EngineArgs.get_batch_defaults, OPENAI_API_SERVER, vLLM 0.34.0; on a TPU its chip's:
    VLLM_TPU_CHUNK), SGLang's chunked_prefill_size for the GPU (SGLANG_TIERS), else 2048."""
    if engine == "sglang":
        return sglang_chunk(hw.memory_bytes)
    if engine == "vllm" and hw.platform == "tpu":
        chip = next((c for c in VLLM_TPU_CHUNK if c in hw.name.casefold()), None)
        if chip is not None:
            return VLLM_TPU_CHUNK[chip]
    if engine == "vllm" and hw.memory_bytes >= VLLM_LARGEST_GPU:
        return 16384
    if engine == "vllm" and hw.memory_bytes >= VLLM_LARGE_GPU and not vllm_a100(hw):
        return 8192
    return 2048

class SGLangCapacity(NamedTuple):
    """SGLang's static pools on one GPU: state slots (None without states), full-pool tokens (its
    max_total_num_tokens), SWA-pool tokens (None without freed sliding layers)."""

    slots: int | None
    tokens: int
    swa_tokens: int | None


def sglang_capacity(p: SGLangPools, room: int) -> SGLangCapacity | None:
    """SGLang's pools in `room` bytes (sglang_pool_sizes), None where it refuses to start (sglang_refusal)."""
    c = sglang_pool_sizes(p, room)
    return None if c is None or sglang_refusal(p, c) else c


def sglang_refusal(p: SGLangPools, c: SGLangCapacity) -> str | None:
    """The pool SGLang refuses to start with, None where both serve a request: 'state', fewer slots than a request's
    ratio (resolve_max_num_reqs: max_mamba_cache_size // ratio = 0 requests, a RuntimeError), or 'swa', an SWA pool of
    at most its window and a page (pool_configurator.validate_swa_pool_size: a ValueError)."""
    if c.slots is not None and c.slots < mamba_ratio(p.state_slots):
        return "state"
    return "swa" if c.swa_tokens is not None and c.swa_tokens <= p.swa_floor else None


def sglang_pool_sizes(p: SGLangPools, room: int) -> SGLangCapacity | None:
    """SGLang's pools in `room` bytes (a GPU's memory after weights and activations), as its startup divides them
    (None where not even one state slot fits): the state pool first (kv_cache_configurator._handle_max_mamba_cache:
    max_mamba_cache_size K = (room · r/(1 + r) − S) // S slots of one sequence's states S, the pool's padding slot
    inside that share, and (K + 1) · S bytes taken from the room: "+1 accounts for each pool's padding slot"), then with both
    full and sliding layers, full_tokens = room / (full rate + 0.8 · SWA rate) and swa_tokens = 0.8 · full_tokens
    (pool_configurator.HybridSWAPoolConfigurator), else room / rate tokens, each rounded down to whole pages."""
    slots = None
    if p.state_per_sequence:
        r = SGLANG_MAMBA_FULL_MEMORY_RATIO
        slots = int(room * r / (1 + r) // p.state_slot) - 1  # (share − S) // S
        room -= (slots + 1) * p.state_slot
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
    they fit: 'state' (each running sequence holds its state slots, kvcalc.costs.paged.state_slots), 'swa' (the
    sliding-window pool's tokens) or 'kv' (the token pool's)."""
    c = sglang_pool_sizes(p, room)
    if c is None:
        return "state"
    if refused := sglang_refusal(p, c):
        return refused
    if c.slots is not None and p.sequences * p.state_slots > c.slots:
        return "state"
    if c.swa_tokens is not None:
        return "kv" if p.full_bytes > c.tokens * p.full_rate else "swa" if p.swa_bytes > c.swa_tokens * p.swa_rate else None
    return "kv" if p.full_bytes + p.swa_bytes > c.tokens * (p.full_rate + p.swa_rate) else None


def sglang_fits(p: SGLangPools, room: int) -> bool:
    """Whether a stage's cache and states fit SGLang's static pools in `room` bytes."""
    return sglang_short(p, room) is None


# State slots SGLang keeps a running request beside its radix cache's (kv_cache_configurator.py
# MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO); _calculate_mamba_ratio adds the extra-buffer strategy's tracking slots
# (kvcalc.costs.paged.state_slots), and resolve_max_num_reqs caps max_running_requests at max_mamba_cache_size // ratio
SGLANG_MAMBA_RATIO = 3


def mamba_ratio(state_slots: int) -> int:
    """The state slots SGLang reserves a running request (_calculate_mamba_ratio): SGLANG_MAMBA_RATIO and the tracking
    slots of `state_slots` (kvcalc.costs.paged.state_slots: its own slot and those)."""
    return SGLANG_MAMBA_RATIO + state_slots - 1
VLLM_MAX_NUM_SEQS = (1024, 256)  # vllm serve's default max_num_seqs: GPUs of 70 GiB or more but A100s, and the rest


def sglang_stage_pools(spec: ModelSpec, t: Settings, budget: int, acts: int) -> list[tuple[Stage, SGLangPools, int]]:
    """Each stage's SGLang pools at settings `t` with the room they divide, as SGLang's start-up sizes every rank
    alike: the least memory free over all ranks after loading (kv_cache_configurator._profile_available_bytes:
    get_available_gpu_memory over the world group), so the budget less the heaviest stage's weights (and `acts`) on
    each; under pp the largest stage's constant states a sequence charged on each (_handle_max_mamba_cache: "Charge
    the largest per-stage share so every rank derives the same pool"; its layers' share of the whole, equal for equal
    layers); and the SWA pool's floor, SGLang's window and a page (kvcalc.costs.paged.sglang_window). A multimodal
    checkpoint's room is sglang_mm_reservation less (its embedding or feature cache)."""
    plans = stages(spec, t)
    pools = [sglang_pools(t, plan) for plan in plans]
    heaviest = max(plan.weights_bytes for plan in plans)
    embeddings = sglang_mm_reservation(spec, t)
    state = max(p.state_per_sequence for p in pools)
    window = sglang_window(spec)
    return [(plan, p._replace(state_per_sequence=state, swa_floor=window + p.block if window else 0),
             budget - heaviest - acts - embeddings) for plan, p in zip(plans, pools)]


# SGLang's context_len where a config names none of the keys it reads (utils/hf_transformers/common.py
# get_context_length: max_sequence_length, seq_length, max_seq_len, model_max_length, max_position_embeddings)
SGLANG_DEFAULT_CONTEXT = 2048


def sglang_context_len(spec: ModelSpec) -> int:
    """SGLang's context_len for `spec` (its default --context-length): the model's max_context, but Whisper's 2,048,
    as WhisperConfig names none of get_context_length's keys (its 448 is max_target_positions, whose positions
    SGLang's whisper.py clamps rather than refuses)."""
    return SGLANG_DEFAULT_CONTEXT if spec.family == "whisper" else spec.max_context


def sglang_running(spec: ModelSpec, s: Settings, budget: int, acts: int) -> int | None:
    """SGLang's max_running_requests, one scheduler's (engine_batch_cap's words), the least over the stages; None
    where its pools do not start."""
    caps = []
    workers = s.tp if s.dp_attention else 1  # a replica's attention-DP workers
    for _, pools, room in sglang_stage_pools(spec, s.at(1), budget, acts):
        c = sglang_capacity(pools, room)
        if c is None:
            return None
        if s.mtp and spec.mtp_layers:  # speculative decoding: 48 unless set, split over the workers
            cap = min(max(1, SGLANG_SPEC_MAX_RUNNING_REQUESTS // workers), c.tokens // 2)
        else:
            cap = min(max(min(c.tokens * 512 // sglang_context_len(spec), 4096), 2048), c.tokens // 2)
        if c.slots is not None:
            cap = min(cap, c.slots // mamba_ratio(pools.state_slots))
        caps.append(cap)
    return min(caps)


def sglang_request_table(spec: ModelSpec, s: Settings, budget: int, acts: int) -> int | None:
    """Bytes of SGLang's request table on a GPU, outside its static pools: (max_running_requests + 1) rows, a padding
    row among them, of context_len + 4 int32 token slots, and the draft tokens more under --mtp (ReqToTokenPool;
    kv_cache_configurator._build_req_to_token_pool; allocation_sizing.get_req_to_token_extra_context_len, which under
    speculation on pages of P tokens makes the extra at least its decode reserve + P − 1: up to about 63 slots more a
    row at 64, not counted), context_len SGLang's default (sglang_context_len);
    None where its pools do not start."""
    from kvcalc.costs.paged import SGLANG_SPEC_DRAFT_TOKENS

    running = sglang_running(spec, s, budget, acts)
    if running is None:
        return None
    extra = 4 + (SGLANG_SPEC_DRAFT_TOKENS if s.mtp and spec.mtp_layers else 0)
    return (running + 1) * (sglang_context_len(spec) + extra) * 4


def engine_batch_cap(spec: ModelSpec, s: Settings, hw: Hardware, budget: int, acts: int,
                     chunk: int) -> tuple[int, str] | None:
    """The most sequences the engine runs at once by default, and its name: vLLM's max_num_seqs (get_batch_defaults:
    1024 on a GPU of 70 GiB or more that is not an A100, else 256; at most the prefill chunk `chunk`, its
    max_num_batched_tokens: _set_default_max_num_seqs_and_batched_tokens_args, 256 on a TPU v5p), SGLang's max_running_requests
    (kv_cache_configurator.resolve_max_num_reqs: min(clamp(tokens / context_len · 512, 2048, 4096), tokens // 2);
    under --mtp, speculative decoding, min(max(1, 48 // its attention-DP workers), tokens // 2), as SGLang sets 48
    (arg_groups/speculative_hook.py _handle_eagle_family); with states min(that, K // (3 + its tracking slots),
    kvcalc.costs.paged.tracking_slots)); under pp its pp micro-batches of max(that // pp, 1) sequences each
    (scheduler.py pp_max_micro_batch_size, scheduler_pp_mixin); per data-parallel replica, so times dp, and
    SGLang's per attention-DP worker ("per dp worker": under --dp-attention each of a replica's tp ranks runs its own
    scheduler over its own pool), so times tp there too. `budget` and `acts`: a GPU's budget and activation estimate,
    whose rest SGLang's pools divide (sglang_stage_pools).
    None without an engine."""
    if s.engine == "vllm":
        large = hw.memory_bytes >= VLLM_LARGE_GPU and (not vllm_a100(hw) or hw.memory_bytes >= VLLM_LARGEST_GPU)
        return min(VLLM_MAX_NUM_SEQS[0 if large else 1], chunk) * s.dp, "max_num_seqs"
    if s.engine != "sglang":
        return None
    workers = s.tp if s.dp_attention else 1  # a replica's attention-DP workers
    running = sglang_running(spec, s, budget, acts)
    if running is None:
        return None
    cap, name = running, "max_running_requests"
    if s.pp > 1 and s.pp * max(cap // s.pp, 1) < cap:  # pp micro-batches of max(cap // pp, 1) sequences each
        cap, name = s.pp * max(cap // s.pp, 1), "pp_max_micro_batch_size"  # scheduler.py, its default
    return cap * s.dp * workers, name


def vllm_admission_blocks(groups: Sequence[AdmissionGroup], length: int, in_flight: int, encoder: int = 0) -> int:
    """Blocks vLLM's start-up check reserves for one request of `length` tokens (its max_model_len): each group's
    max_admission_blocks_per_request (vllm/v1/kv_cache_interface.py, 0.34.0): full attention cdiv(L, B); a window W
    cdiv(min(W − 1 + in_flight, L), B) + 1 (its tokens in flight beside the window, and a page the window may start
    inside); a chunk C cdiv(min(C + in_flight, L), B); cross-attention cdiv(encoder, B) for `encoder` input tokens
    (CrossAttentionSpec: max_num_encoder_input_tokens); a state its blocks (MambaSpec.max_memory_usage_bytes,
    AdmissionGroup.span)."""
    total = 0
    for g in groups:
        if g.kind == "full":
            total += -(-length // g.block)
        elif g.kind == "window":
            total += -(-min(g.span - 1 + in_flight, length) // g.block) + 1
        elif g.kind == "chunk":
            total += -(-min(g.span + in_flight, length) // g.block)
        elif g.kind == "cross":
            total += -(-encoder // g.block)
        else:
            total += g.span
    return total


def vllm_admitted(spec: ModelSpec, s: Settings, budget: int, acts: int, chunk: int, upper: int) -> int | None:
    """The longest max_model_len vLLM starts with at these settings, up to `upper` tokens (0: none): its
    start-up check (kv_cache_planning._check_enough_kv_cache_memory) wants one request's blocks
    (vllm_admission_blocks) and the null block in each worker's memory for the cache, the budget less the stage's
    weights and `acts`; the tokens in flight are max_in_flight_tokens, (pp + 1) prefill chunks under async
    scheduling, vLLM's default (VllmConfig.max_concurrent_batches), and an encoder's input tokens one prefill chunk
    (SchedulerConfig: max_num_encoder_input_tokens = max_num_batched_tokens). None without --engine vllm, and under --mtp,
    whose speculative blocks and retained tokens it does not count."""
    from kvcalc.solve import largest_fitting

    if s.engine != "vllm" or s.mtp and spec.mtp_layers:  # --mtp without MTP layers decodes plainly
        return None
    in_flight = (s.pp + 1) * chunk
    plans = stages(spec, s)

    def starts(length: int) -> bool:
        return all((vllm_admission_blocks(p.admission, length, in_flight, chunk) + 1) * p.held_back
                   <= budget - p.weights_bytes - acts for p in plans)

    return largest_fitting(starts, upper)

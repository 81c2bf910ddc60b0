"""Which form an engine attends an MLA prefill in, query by query: per head through kv_b_proj (the MHA prefill, the
FLOPs kvcalc counts) or absorbed, in the latent space through the engine's W_UK, W_UV copies, forward by forward as
vLLM 0.34.0 and SGLang 0.5.23 decide on the settings' GPU. The prefill notes (kvcalc.present.outputs) give the total
of that form; the prefill traffic (kvcalc.costs.traffic) reads the copies, kv_b_proj or both.
"""

from __future__ import annotations

from kvcalc.attention import MLA
from kvcalc.costs.engine_files import ceil_div
from kvcalc.costs.params import ffn_runs
from kvcalc.costs.sglang_pages import is_sm100
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec, MoEFFN

# SGLang 0.5.23 families whose MLA is DeepseekV2AttentionMLA (deepseek_v2.py, models/deepseek_common): DeepSeek V2, V3
# and V3.2, Kimi K2 (DeepseekV3ForCausalLM), GLM-5 (GlmMoeDsa), Kimi Linear's MLA layers (kimi_linear.py, its
# prefill graphs off); their breakable prefill CUDA graphs capture prefill forwards of up to SGLANG_MLA_CAPTURE tokens
# (memory_hook.py: min(8192, chunked_prefill_size) for an MLA model)
SGLANG_GRAPH_MLA = frozenset({"deepseek", "kimi", "glm", "kimi_linear"})
SGLANG_MLA_CAPTURE = 8192
# The GPU memory the rules assume without --hardware: an 80 GiB Hopper GPU's (an H100), SGLang's chunk its tier's
ASSUMED_GPU_MEMORY = 80 * 2**30
# the prefix below which fa3 and flashinfer attend a continuing prefill forward absorbed (forward_mha.py
# chunked_prefix_cache_threshold: SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD, 8192)
SGLANG_CHUNKED_PREFIX_THRESHOLD = 8192


def absorbed_queries(spec: ModelSpec, s: Settings, engine: str | None = None) -> int | None:
    """How many of each sequence's s.ctx prompt queries the engine attends absorbed (absorbed_ranges'), None where
    that varies with the sequence."""
    ranges = absorbed_ranges(spec, s, engine)
    return None if ranges is None else sum(b - a for a, b in ranges)


def absorbed_ranges(spec: ModelSpec, s: Settings, engine: str | None = None) -> tuple[tuple[int, int], ...] | None:
    """The query positions [a, b) of each sequence's s.ctx-token prompt that the settings' engine (or `engine`)
    attends absorbed, in the latent space: ((0, ctx),) for all, () for none; None where a scheduler's batch mixes
    the forms forward by forward across its sequences (not told sequence by sequence). None attended so without an
    engine or MLA, and from an expanded cache (no latent to attend). Without --hardware, on an 80 GiB Hopper GPU's
    defaults (the notes say so).

    - vLLM: DeepSeek Sparse Attention's past top-k tokens (its dense MHA prefill needs seq_len <= top-k,
      sparse_mla_attention.py _use_dense_mha_prefill; the masked MHA that attends some longer prompts per head runs
      on Blackwell with a bf16 cache alone, not followed); every other MLA prefill per head (forward_mha).
    - SGLang: MiniCPM3 always (minicpm3.py replaces kv_b_proj with its absorbed copies); the DeepSeek-V2 attention
      of SGLANG_GRAPH_MLA's families forward by forward (sglang_forward_absorbed), one scheduler's prompts prefilled
      one after another in forwards of its chunk (sglang_forwards)."""
    mla = any(isinstance(g.attention, MLA) for g in spec.groups)
    engine = engine or s.engine
    if engine not in ("vllm", "sglang") or not mla or s.mla_cache != "latent":
        return ()
    topk = spec.sparse_topk()
    whole = ((0, s.ctx),)
    if engine == "vllm":
        return whole if topk is not None and s.ctx > topk else ()
    if spec.family == "minicpm3":
        return whole
    if spec.family not in SGLANG_GRAPH_MLA:
        return ()
    chunk, sequences = sglang_forwards(s)
    if sequences == 1:
        return _one_prompt_ranges(spec, s, chunk)
    total = sequences * s.ctx
    n = ceil_div(total, chunk)
    if n == 1:  # one forward of whole prompts, each at a prefix of 0, its keys ending at ctx
        return whole if sglang_forward_absorbed(spec, s, total, 0, s.ctx) else ()
    if s.ctx % chunk == 0:  # each prompt in whole forwards of its own, as one prompt alone
        return _one_prompt_ranges(spec, s, chunk)
    last = total - (n - 1) * chunk
    # forward k starts k·chunk into the stream, (k·chunk) mod ctx into a prompt: its prefix (the prompts after it in
    # the forward start there); the residues, a period of ctx / gcd(chunk, ctx) forwards, told apart up to 4,096
    prefixes = {k * chunk % s.ctx for k in range(min(n - 1, 4096))}  # the full forwards
    verdicts = {sglang_forward_absorbed(spec, s, chunk, p, s.ctx if chunk > s.ctx - p else p + chunk) for p in prefixes}
    verdicts.add(sglang_forward_absorbed(spec, s, last, (n - 1) * chunk % s.ctx, s.ctx))
    if verdicts == {True}:
        return whole
    return () if verdicts == {False} else None


def _one_prompt_ranges(spec: ModelSpec, s: Settings, chunk: int) -> tuple[tuple[int, int], ...]:
    """absorbed_ranges for a scheduler prefilling one prompt: its forwards [k·chunk, (k + 1)·chunk), each by
    sglang_forward_absorbed, the runs of absorbed ones merged. The forwards past the thresholds (a prefix of 8,192 and
    more, keys past top-k) are alike: the first few told one by one, the rest at once (no loop over 2^40 tokens)."""
    n = ceil_div(s.ctx, chunk)
    alike = min(n - 1, ceil_div(max(SGLANG_CHUNKED_PREFIX_THRESHOLD, (spec.sparse_topk() or 0) + 1), chunk) + 1)
    spans = [(k * chunk, (k + 1) * chunk) for k in range(alike)]
    if n - 1 > alike:
        spans.append((alike * chunk, (n - 1) * chunk))  # the full forwards after them, each like forward `alike`
    spans.append(((n - 1) * chunk, s.ctx))
    out: list[tuple[int, int]] = []
    for a, b in spans:
        tokens = min(b - a, chunk)  # a span of several forwards: each a chunk
        if sglang_forward_absorbed(spec, s, tokens, a, a + tokens):
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return tuple(out)


def sglang_forward_absorbed(spec: ModelSpec, s: Settings, tokens: int, prefix: int, end: int) -> bool:
    """Whether SGLang attends a prefill forward of `tokens` tokens absorbed, its prompts' prefix (the tokens of its
    first prompt before it; the others start in it) `prefix` and its keys ending at position `end` at most. Inside its
    breakable prefill CUDA graph (sglang_graphs; a forward of 2 to SGLANG_MLA_CAPTURE tokens: prefill_cuda_graph_runner.py
    can_replay_locally refuses one padded past twice its size, and the smallest capture is of 4) always
    (attention_backend_handler.py pins the method; dsa_backend.py turns use_mha off); eagerly DeepSeek Sparse Attention
    per head where its keys end within top-k on a GPU with its per-head kernel (sglang_dsa_per_head), the others by
    their backend (sglang_mla_backend): fa3 and flashinfer per head at a prefix of 0 or of at least
    SGLANG_CHUNKED_PREFIX_THRESHOLD (_handle_attention_backend), Triton at a prefix of 0 (handle_attention_triton),
    trtllm_mla and aiter always per head."""
    if sglang_graphs(spec, s) and 2 <= tokens <= SGLANG_MLA_CAPTURE:
        return True
    topk = spec.sparse_topk()
    if topk is not None:
        return end > topk or not sglang_dsa_per_head(s)
    backend = sglang_mla_backend(spec, s)
    if backend == "triton":
        return prefix > 0
    if backend in ("fa3", "flashinfer"):
        return 0 < prefix < SGLANG_CHUNKED_PREFIX_THRESHOLD
    return False  # trtllm_mla, aiter, and off NVIDIA and AMD


def sglang_graphs(spec: ModelSpec, s: Settings) -> bool:
    """Whether SGLang builds its breakable prefill CUDA graphs for an MLA model: engine_memory.sglang_prefill_graphs,
    but not for a DeepseekV3ForCausalLM (sglang_deepseek_v3) on compute capability 10.x, whose default backend there,
    trtllm_mla, turns them off (model_overrides/deepseek_v2.py; cuda_graph_hook.py
    disable_prefill_cuda_graph_for_deepseek_trtllm_mla)."""
    from kvcalc.costs.engine_memory import sglang_prefill_graphs

    platform = "cuda" if s.hardware is None else s.hardware.platform
    return sglang_prefill_graphs(spec, s, platform) and sglang_mla_backend(spec, s) != "trtllm_mla"


def sglang_mla_backend(spec: ModelSpec, s: Settings) -> str:
    """SGLang's default attention backend for `spec`'s MLA on the settings' GPU (model_override_base.py
    get_default_attn_backend; model_overrides/deepseek_v2.py): 'dsa' for DeepSeek Sparse Attention; fa3 on compute
    capability 9.0 (and without --hardware, or an NVIDIA preset without a compute_capability), trtllm_mla for a
    DeepseekV3ForCausalLM on 10.x and flashinfer for another there, Triton on the other NVIDIA GPUs; on AMD aiter where
    the heads over tp (num_kv_heads at tp_size, whatever DP attention) are 16 or 128, else Triton; 'other' elsewhere."""
    hw = s.hardware
    if spec.sparse_topk() is not None:
        return "dsa"
    if hw is None or (hw.platform == "cuda" and (hw.capability is None or hw.capability == (9, 0))):
        return "fa3"
    if hw.platform == "cuda":
        if is_sm100(s):
            return "trtllm_mla" if sglang_deepseek_v3(spec) else "flashinfer"
        return "triton"
    if hw.platform == "rocm":
        from kvcalc.costs.engine_memory import sglang_mla_aiter

        return "aiter" if sglang_mla_aiter(spec, s.tp) else "triton"
    return "other"


def sglang_deepseek_v3(spec: ModelSpec) -> bool:
    """Whether SGLang serves `spec` as a DeepseekV3ForCausalLM (DeepSeek-V3, R1, Kimi K2), told from DeepSeek-V2 by its
    routing: noaux_tc's e_score_correction_bias (a router bias), which V2's greedy routing lacks; DSA models apart."""
    return spec.family in ("deepseek", "kimi") and spec.sparse_topk() is None and \
        any(isinstance(run.ffn, MoEFFN) and run.ffn.router_bias for run in ffn_runs(spec))


def sglang_dsa_per_head(s: Settings) -> bool:
    """Whether SGLang's eager DSA prefill can attend a prompt within top-k per head (dsa_backend.py
    set_dsa_prefill_impl, MHA_ONE_SHOT): on compute capability 9.0 or 10.x, or AMD's gfx95x (MI355X: CDNA 4), with a
    bf16 or fp8 cache; without --hardware, or an NVIDIA preset without a compute_capability, Hopper's."""
    hw = s.hardware
    if s.kv_dtype not in ("bf16", "fp8"):
        return False
    if hw is None or (hw.platform == "cuda" and hw.capability is None):
        return True
    if hw.platform == "rocm":
        return "cdna 4" in hw.description.casefold()
    return hw.platform == "cuda" and hw.capability == (9, 0) or is_sm100(s)


def sglang_forwards(s: Settings) -> tuple[int, int]:
    """The tokens of an SGLang prefill forward at most (chunked_prefill_size by the GPU, engine_memory.sglang_chunk;
    an 80 GiB Hopper's without --hardware; under DP attention divided among the attention-DP workers,
    parallel_hook.py) and the sequences one scheduler prefills: a replica's ceil(batch / dp), and under DP attention a
    worker's share of them."""
    from kvcalc.costs.engine_memory import sglang_chunk

    chunk = sglang_chunk(ASSUMED_GPU_MEMORY if s.hardware is None else s.hardware.memory_bytes)
    workers = s.tp if s.dp_attention else 1  # kvcalc's --dp-attention: an attention-DP worker a tp rank
    return chunk // workers, ceil_div(ceil_div(s.batch, s.dp), workers)

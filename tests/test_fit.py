"""#7: `kvcalc fit`, exact to the token: the cache at max_ctx fits the budget and at max_ctx + 1 does not, with the
cache computed here by hand from the model's numbers."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from conftest import REFERENCE, ROOT, run

GIB = 1 << 30


def fit(*args: str) -> list[dict]:
    return json.loads(run("fit", *args, "-f", "json").stdout)


def budget(row: dict, memory: int, reserve_tenths: int = 1) -> int:
    """What one GPU has for its cache: its memory less the reserve (floored), its weights and the activations."""
    return memory * (10 - reserve_tenths) // 10 - row["weights_bytes_per_gpu"] - row["activation_bytes"]


def test_dense_model_on_eight_gpus_exact_to_the_token():
    # llama3.1-405b, 8 × h100-80gb, tp 8, fp8 weights, batch 8: each GPU holds 1 of the 8 KV heads (d_h 128) of 126
    # layers for 8 sequences, bf16
    (row,) = fit("llama3.1-405b", "--hardware", "h100-80gb", "--gpus", "8", "--weights-dtype", "fp8", "--batch", "8")
    kv = lambda c: 8 * 126 * c * 2 * 1 * 128 * 2  # noqa: E731
    room = budget(row, 80 * GIB)
    assert kv(row["max_ctx"]) <= room < kv(row["max_ctx"] + 1) and row["binding"] == "memory"
    # the weights one rank holds, fp8 (1 byte each): heads, FFN width and vocabulary split by 8
    d, ff, v = 16384, 53248, 128256
    layer = d * 16 * 128 + 2 * d * 1 * 128 + 16 * 128 * d + 3 * d * (ff // 8) + 2 * d
    assert row["weights_bytes_per_gpu"] == 126 * layer + 2 * -(-v // 8) * d + d
    # the activation estimate: 2048 tokens × (4·d + 2·d_ff / 8) in bf16
    assert row["activation_bytes"] == 2048 * (4 * d + 2 * (ff // 8)) * 2
    assert row["gpus"] == 8 and row["memory_bytes"] == 8 * 80 * GIB and row["reserved_bytes"] == 8 * (80 * GIB - 72 * GIB)


def test_windowed_model_is_not_linear_in_context():
    # gemma3-27b on one h100-80gb, batch 3: 10 global layers hold every token, 52 local layers at most 1024
    (row,) = fit("gemma3-27b", "--hardware", "h100-80gb", "--batch", "3")
    kv = lambda c: 3 * (10 * c + 52 * min(c, 1024)) * 2 * 16 * 128 * 2  # noqa: E731
    room = budget(row, 80 * GIB)
    assert kv(row["max_ctx"]) <= room < kv(row["max_ctx"] + 1)
    assert row["max_ctx"] < 131072 and row["binding"] == "memory"


def test_largest_batch_for_each_context():
    rows = fit("llama3-8b", "--hardware", "h100-80gb", "--ctx", "2k,8k")
    for r in rows:
        kv = lambda b, c=r["ctx"]: b * 32 * c * 2 * 8 * 128 * 2  # noqa: E731
        room = budget(r, 80 * GIB)
        assert kv(r["max_batch"]) <= room < kv(r["max_batch"] + 1) and r["binding"] == "memory"
    assert rows[0]["max_batch"] > rows[1]["max_batch"]


def test_the_model_context_binds_when_memory_does_not():
    (row,) = fit("llama3-8b", "--hardware", "h200-141gb")
    assert (row["max_ctx"], row["binding"]) == (8192, "max_context")


def test_nothing_fits_and_bad_input_say_why():
    (row,) = fit("llama3.1-405b", "--hardware", "h100-80gb")  # 810 GB of bf16 weights on one GPU
    assert (row["max_ctx"], row["binding"], row["ctx"]) == (0, "weights", 1)
    # the row's figures are those of ctx 1, the smallest tried: one token's cache, 126 layers × 2·8·128 × 2 bytes, in
    # all and on the one GPU alike (the total was 0 beside a per-GPU 516,096), and the budget it misses by
    assert row["kv_cache_bytes"] == row["kv_cache_bytes_per_gpu"] == 126 * 2 * 8 * 128 * 2 == 516_096
    budget = 80 * 2**30 - 8 * 2**30  # 10% reserved of 80 GiB
    assert row["free_bytes_per_gpu"] == budget - row["weights_bytes_per_gpu"] - row["activation_bytes"] - 516_096 < 0
    res = run("fit", "llama3-8b", ok=False)
    assert res.exit_code == 2 and "fit needs --hardware NAME" in res.stderr and "Usage: kvcalc fit" in res.stderr
    res = run("fit", "llama3-8b", "--hardware", "h100-80gb", "--reserve", "1.5", ok=False)
    assert res.exit_code == 2 and "Invalid value for '--reserve': 1.5: must be at least 0 and below 1" in res.stderr
    res = run("fit", "llama3-8b", "--hardware", "h100-80gb", "--gpus", "4", "--tp", "2", ok=False)
    assert res.exit_code == 1 and "--gpus 4 differs from --tp 2 × --pp 1 × --dp 1 = 2" in res.stderr


def test_weights_count_the_mtp_layers_when_asked():
    # --mtp adds DeepSeek-V3's multi-token-prediction layer: the one-copy weights_bytes holds it as the per-GPU does
    # (one GPU here), int4: params / 2 bytes
    row = fit("deepseek-v3", "--hardware", "h200-141gb", "--mtp", "--weights-dtype", "int4")[0]
    params = json.loads(run("compare", "deepseek-v3", "--mtp", "--columns", "all", "-f", "json").stdout)[0]["params_total"]
    assert row["weights_bytes"] == row["weights_bytes_per_gpu"] == params // 2 == 341_318_243_712
    without = fit("deepseek-v3", "--hardware", "h200-141gb", "--weights-dtype", "int4")[0]
    assert without["weights_bytes"] < row["weights_bytes"]


def test_kv_cache_of_all_sequences_is_in_pages_under_an_engine():
    # one GPU: the whole batch's KV cache in vLLM's pages (12 attention layers, 576-token pages of 2 KV heads, 256,
    # bf16: 2,048 bytes a token) is what the GPU holds without the states' pages
    row = fit("qwen3-next-80b-a3b", "--hardware", "h200-141gb", "--engine", "vllm", "--block-size", "16", "--weights-dtype", "fp8",
              "--reserve", "0.1", "--ctx", "100000")[0]
    pages = -(-100_000 // 576)  # 64 · ceil(1,097,728 / (64 · 2,048)): on the Gated DeltaNet's 64-token grid
    assert row["kv_cache_bytes"] == row["batch"] * 12 * pages * 576 * 2048
    state_pages = row["batch"] * 36 * 2 * 576 * 2048  # each Gated DeltaNet layer's states in two padded pages
    assert row["kv_cache_bytes_per_gpu"] == row["kv_cache_bytes"] + state_pages
    # 21 sequences (22 when the fp8 figure counted the embedding, LM head and routers in fp8: the engines keep them in
    # bf16, 0.6 GB more here)
    assert (row["batch"], row["kv_cache_bytes"]) == (21, 21 * 12 * 174 * 576 * 2048) == (21, 51_725_205_504)


@pytest.mark.slow
def test_a_context_fits_when_every_context_before_it_does():
    # gemma3-27b's 52 windowed layers (W = 1024) in pages of 16 (the ideal engine; SGLang pages Gemma 3's windows
    # whole, outside its hybrid-SWA models): the window's 1,024 positions span 64
    # pages when ctx − W is a multiple of 16, else 65, so the cache falls by a page a window layer after each
    # ctx ≡ W − 1 (mod 16). A sequence grows through every context: the longest that fits is the one before the first
    # that does not (a bisection on the raw cache answered 5,664 here, past 5,649, which does not fit)
    from fractions import Fraction

    from conftest import spec
    from kvcalc.costs.parallel import per_gpu
    from kvcalc.fit import activation_bytes
    from kvcalc.fit import fit as solve
    from kvcalc.hardware import load_hardware
    from kvcalc.settings import Settings

    model, s = spec("gemma3-27b"), Settings(ctx=1, batch=64, engine="ideal", block_size=16)
    hw = load_hardware("h100-80gb").model_copy(update={"memory_bytes": 112_248_523_906})
    acts = activation_bytes(model, s, 2048)

    def used(ctx: int) -> int:
        g = per_gpu(model, s.at(ctx))
        return g.weights_bytes + acts + g.kv_cache_bytes + g.state_bytes

    first_too_big = next(c for c in range(1, 10_000) if used(c) > hw.memory_bytes)
    assert first_too_big == 5649 and used(5664) <= hw.memory_bytes  # the cache falls again after 5,649
    for limit in (None, 100_000):  # two bisections, two paths through the contexts
        assert solve(model, s, hw, Fraction(0), 2048, "ctx", limit).max_ctx == first_too_big - 1


def test_the_largest_batch_fits_at_every_context_up_to_ctx():
    # an audit: solving for the batch tested only --ctx, but under pages of 16 (--engine ideal --block-size 16; SGLang's
    # did the same until its static pools were modelled) gpt-oss-20b's windowed layers (W = 128) hold 9 pages at
    # ctx 143 and 8 at 144, so fit --ctx 144 answered 5,286 sequences, which overflow at 143, a context they pass
    # through. The batch must fit at every context up to --ctx (as solving for ctx does)
    from fractions import Fraction

    from conftest import spec
    from kvcalc.costs.parallel import per_gpu
    from kvcalc.fit import activation_bytes
    from kvcalc.fit import fit as solve
    from kvcalc.hardware import load_hardware
    from kvcalc.settings import Settings

    model, hw = spec("gpt-oss-20b"), load_hardware("h100-80gb")
    s = Settings(ctx=144, batch=1, engine="ideal", block_size=16)
    budget = (hw.memory_bytes * Fraction(9, 10)).__floor__()
    acts = activation_bytes(model, s, 2048)

    def fits(batch: int, ctx: int) -> bool:
        g = per_gpu(model, Settings(ctx=ctx, batch=batch, engine="ideal", block_size=16))
        return g.weights_bytes + acts + g.kv_cache_bytes + g.state_bytes <= budget

    best = solve(model, s, hw, Fraction(1, 10), 2048, "batch").max_batch
    assert best == solve(model, s.at(143), hw, Fraction(1, 10), 2048, "batch").max_batch == 4992
    assert all(fits(best, c) for c in range(1, 145)) and not all(fits(best + 1, c) for c in range(1, 145))
    assert fits(5286, 144) and not fits(5286, 143)  # the old answer: fits at 144 alone


def test_a_batch_stopped_below_ctx_is_said():
    # an audit: mistral-7b (32 layers, 8 KV heads of 128, W = 4,096) in ideal pages of 16 on an h200 at 131,072 tokens
    # showed 225 sequences with 757 MiB left, more than a sequence's 512 MiB there: at 131,072 the window's 4,096
    # positions start on a page (256 pages of 16 · 32 · 2 · 8 · 128 · 2 = 2,097,152 bytes), at 131,071 they span 257,
    # and the sequences pass through 131,071. The figures stay at --ctx; a note on stderr (in the human formats, as
    # every warning) says where 226 fail.
    args = ("fit", "mistral-7b", "--hardware", "h200-141gb", "--engine", "ideal", "--block-size", "16", "--ctx",
            "3000,131072")
    rows, res = json.loads(run(*args, "-f", "json").stdout), run(*args)
    page = 16 * 32 * 2 * 8 * 128 * 2
    room = _room(rows[1])
    assert rows[1]["max_batch"] == 225 and rows[1]["kv_cache_bytes"] == 225 * 256 * page
    assert 226 * 256 * page <= room and 225 * 257 * page <= room < 226 * 257 * page
    assert ("note: mistral-7b: 226 sequences fit at 131,072 tokens but not at 131,071, which they pass through"
            in res.stderr)
    # at 3,000 tokens the window is not reached: 188 pages of 16, and 3,000 itself binds (no note for that row)
    assert rows[0]["max_batch"] * 188 * page <= room < (rows[0]["max_batch"] + 1) * 188 * page
    assert res.stderr.count("note:") == 1
    # gpt-oss-20b at 144 (the README's example): 4,993 fit at 144, not at 143; without pages (B = 1) nothing falls
    res = run("fit", "gpt-oss-20b", "--hardware", "h100-80gb", "--engine", "ideal", "--block-size", "16",
              "--ctx", "144")
    assert "note: gpt-oss-20b: 4,993 sequences fit at 144 tokens but not at 143" in res.stderr
    assert "note:" not in run("fit", "gpt-oss-20b", "--hardware", "h100-80gb", "--engine", "ideal", "--ctx", "144").stderr


def test_where_nothing_fits_the_binding_names_what_does_not():
    # at ctx 1M one sequence of deepseek-v2 (60 layers × 576 elements × 2 bytes × 2^20 tokens = 72,477,573,120 bytes,
    # on each of 8 GPUs: the latent is not split) passes an h100's budget while its weights fit: 'memory', not 'weights'
    rows = fit("deepseek-v2", "--hardware", "h100-80gb", "--ctx", "1M", "--gpus", "8")
    assert (rows[0]["max_batch"], rows[0]["binding"]) == (0, "memory")
    assert rows[0]["kv_cache_bytes_per_gpu"] == 60 * 576 * 2 * 2**20 == 72_477_573_120
    # a prefill chunk of 2^40 tokens: the activation estimate alone passes the budget
    (row,) = fit("llama3-8b", "--hardware", "h100-80gb", "--prefill-chunk", str(2**40))
    assert (row["max_ctx"], row["binding"]) == (0, "activations")
    assert row["weights_bytes_per_gpu"] < 72 * 2**30 < row["weights_bytes_per_gpu"] + row["activation_bytes"]
    (row,) = fit("llama3.1-405b", "--hardware", "h100-80gb")
    assert row["binding"] == "weights" and row["weights_bytes_per_gpu"] > 72 * 2**30


def _room(row: dict) -> int:
    """The busiest GPU's memory for cache and states in a fit row: its budget less its weights and activations (none
    under SGLang, whose static fraction leaves their room)."""
    budget = (row["memory_bytes"] - row["reserved_bytes"]) // row["gpus"]
    return budget - row["weights_bytes_per_gpu"] - row["activation_bytes"]


def test_sglang_divides_a_hybrid_swa_models_memory_between_its_full_and_window_pools():
    # an audit: SGLang sizes its pools at startup (pool_configurator.HybridSWAPoolConfigurator): full_tokens =
    # room / (full rate + 0.8 · SWA rate), swa_tokens = 0.8 · full_tokens (--swa-full-tokens-ratio 0.8), so a
    # sequence's full layers can use only the full pool. gpt-oss-20b: 12 full and 12 sliding layers of 2 · 8 · 64 · 2
    # = 2,048 bytes a token each, 24,576 a token in each pool: full_tokens = room / (24,576 · 9/5); 16 sequences of
    # ctx tokens need 16 · ctx of them (their 128-token windows fit the SWA pool easily). kvcalc pooled all the memory:
    # 89,742 tokens. The room: SGLang's default static fraction on an H100, 0.83 (sglang_mem_fraction; 49,927 tokens
    # at kvcalc's old 0.9 less an activation estimate)
    row = fit("gpt-oss-20b", "--hardware", "h100-80gb", "--engine", "sglang", "--batch", "16")[0]
    full_tokens = 5 * _room(row) // (9 * 24_576)
    assert row["reserve"] == 0.17 and row["activation_bytes"] == 0
    assert row["max_ctx"] == full_tokens // 16 == 41_632
    # without an engine (or under vLLM's shared pool) the memory is not divided
    assert fit("gpt-oss-20b", "--hardware", "h100-80gb", "--batch", "16")[0]["max_ctx"] > 89_000


def test_sglang_sets_aside_a_state_pool_for_a_hybrid_with_constant_states():
    # kv_cache_configurator._handle_max_mamba_cache: the state pool gets room · 0.9 / 1.9 (--mamba-full-memory-ratio
    # 0.9), max_mamba_cache_size K = (that − S) // S slots of one sequence's states S, and (K + 1) · S bytes with the
    # pool's padding slot ("+1 accounts for each pool's padding slot", SGLang 0.5.23; 0.5.9 took that // S, the
    # padding slot outside); the KV pool the rest.
    # Qwen3-Next at tp 4, per GPU: S = 36 Gated DeltaNet layers · ((32 / 4) · 128 · 128 · 4 bytes (fp32) + (8192 / 4)
    # · 3 · 2 (bf16 conv)) = 19,316,736; a token: 12 attention layers · 2 · 1 KV head (of 2, replicated) · 256 · 2 =
    # 12,288 bytes
    s = 36 * (8 * 128 * 128 * 4 + 2048 * 3 * 2)
    assert s == 19_316_736
    row = fit("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4", "--batch", "32")[0]
    room = _room(row)
    slots = (room * 9 // 19 - s) // s
    tokens = (room - (slots + 1) * s) // 12_288
    assert slots == 745 and row["max_ctx"] == tokens // 32 == 40_729  # SGLang's static fraction at tp 4 on an H100: 0.819
    # each running sequence needs a state slot: at 1,024 tokens the slots bind, not the KV pool (745), and SGLang
    # runs at most a fifth of them at once (the next test)
    row = fit("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4", "--ctx", "1024")[0]
    assert row["max_batch"] == (_room(row) * 9 // 19 - s) // s // 5 == 149


def test_sglang_extra_buffer_gives_a_running_request_three_state_slots():
    # a review: under SGLang's extra-buffer radix cache (Qwen3-Next: overrides.py _MAMBA_EXTRA_BUFFER_ARCHS, the
    # default overlap schedule) HybridReqToTokenPool.alloc takes a request's working slot and _alloc_ping_pong_buffer
    # get_mamba_tracking_slots(extra_buffer=True, overlap=True) = 2 more, freed together (free_mamba_cache); kvcalc
    # counted one. S as above, 19,316,736 bytes a GPU at tp 4; 77,266,944 on one GPU (tp 1: 36 · (32 · 128 · 128 · 4
    # + 8,192 · 3 · 2))
    s = 36 * (8 * 128 * 128 * 4 + 2048 * 3 * 2)
    row = fit("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4", "--ctx", "8k")[0]
    assert (row["max_batch"], row["binding"]) == (149, "max_running_requests")  # K // 5 = 745 // 5, unchanged
    assert row["state_bytes_per_gpu"] == 149 * 3 * s == 8_634_580_992
    one = 36 * (32 * 128 * 128 * 4 + 8192 * 3 * 2)
    show = json.loads(run("show", "qwen3-next-80b-a3b", "--engine", "sglang", "--ctx", "8k", "--batch", "4",
                          "-f", "json").stdout)["summary"]
    assert (show["state_bytes"], show["engine_state_bytes"]) == (4 * one, 3 * 4 * one) == (309_067_776, 927_203_328)
    # 745 slots hold 248 such requests (744 slots), not 249: the state pool binds there, not the KV pool
    ok = fit("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4", "--batch", "248")[0]
    over = run("fit", "qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4",
               "--batch", "249")
    assert ok["max_ctx"] > 0 and json.loads(run("fit", "qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine",
                                                "sglang", "--gpus", "4", "--batch", "249", "-f", "json").stdout)[0]["max_ctx"] == 0
    assert "its state pool: 745 slots" in over.stderr and "3 a sequence" in " ".join(over.stderr.split())
    # vLLM's states are its pages (two resident a layer), and a family without the extra buffer keeps one slot
    from kvcalc.costs.paged import state_slots
    from kvcalc.settings import Settings

    at = lambda engine, pp=1: Settings(ctx=1, engine=engine, pp=pp)  # noqa: E731
    assert (state_slots("qwen3_next", at("sglang")), state_slots("qwen3_next", at("vllm")),
            state_slots("jamba", at("sglang")), state_slots("nemotron_h", at(None)),
            state_slots("nemotron_h", at("sglang", 2))) == (3, 1, 1, 1, 2)


def test_sglang_pools_leave_a_plain_model_as_one_pool():
    # one kind of layer: one pool of room / rate tokens, as without the pools (llama3-70b at tp 8: 80 layers ·
    # 2 · 1 KV head · 128 · 2 = 40,960 bytes a token a GPU)
    row = fit("llama3-70b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "8", "--batch", "256")[0]
    assert row["max_ctx"] == _room(row) // 40_960 // 256 < 8192
    # the ideal engine on the same budget (its activation estimate aside) holds the same tokens
    ideal = fit("llama3-70b", "--hardware", "h100-80gb", "--engine", "ideal", "--gpus", "8", "--batch", "256",
                "--reserve", str(row["reserve"]))[0]
    assert ideal["max_ctx"] == (_room(row) - ideal["activation_bytes"]) // 40_960 // 256


@pytest.mark.slow
def test_engines_cap_the_sequences_they_run_at_once():
    # an audit: fit --ctx answered what memory holds, but vllm serve runs at most max_num_seqs sequences at once
    # (get_batch_defaults: 1024 on a GPU of 70 GiB or more but an A100, else 256; per data-parallel replica) and SGLang
    # max_running_requests (resolve_max_num_reqs: min(clamp(tokens / context_len · 512, 2048, 4096), tokens // 2))
    def best(*args):
        r = fit("llama3.2-1b", "--hardware", *args, "--ctx", "512")[0]
        return r["max_batch"], r["binding"]

    assert best("h100-80gb", "--engine", "vllm") == (1024, "max_num_seqs")
    assert best("a100-80gb", "--engine", "vllm") == (256, "max_num_seqs")
    assert best("h100-80gb", "--engine", "vllm", "--tp", "2", "--dp", "2") == (2 * 1024, "max_num_seqs")
    # SGLang: llama3.2-1b's pool holds millions of tokens, context_len 131,072: the 4,096 ceiling
    assert best("h100-80gb", "--engine", "sglang") == (4096, "max_running_requests")
    memory = best("h100-80gb")
    assert memory[1] == "memory" and memory[0] > 4096
    # with states, SGLang's cap is K // 5 state slots (Qwen3-Next takes the extra-buffer strategy: 3 + 2 slots a
    # request): 746 // 5 at tp 4 and 1,024 tokens (the slots as test_sglang_sets_aside_a_state_pool... derives)
    row = fit("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--engine", "sglang", "--gpus", "4", "--ctx", "1024")[0]
    assert (row["max_batch"], row["binding"]) == (746 // 5, "max_running_requests") == (149, "max_running_requests")
    # solving for the context, a batch past the cap is computed, with a warning
    res = run("fit", "llama3.2-1b", "--hardware", "h100-80gb", "--engine", "vllm", "--batch", "2000")
    assert "vllm runs at most 1,024 sequences at once by default (max_num_seqs)" in res.stderr
    # a mutation review: vLLM clamps a default max_num_seqs to max_num_batched_tokens, the prefill chunk
    # (arg_utils.py _set_default_max_num_seqs_and_batched_tokens_args): 256 on a TPU v5p (its chunk), 512 with a
    # --prefill-chunk of 512, per replica
    assert best("tpu-v5p", "--engine", "vllm") == (256, "max_num_seqs")
    assert best("h100-80gb", "--engine", "vllm", "--prefill-chunk", "512") == (512, "max_num_seqs")
    assert best("h100-80gb", "--engine", "vllm", "--prefill-chunk", "512", "--dp", "2") == (2 * 512, "max_num_seqs")
    assert best("h100-80gb", "--engine", "vllm", "--prefill-chunk", "4096") == (1024, "max_num_seqs")


def test_a_layout_from_gpus_is_named_as_gpus():
    # a fuzz audit: `fit --gpus 3` was refused as '--tp 3: ...', an option the user never gave
    res = run("fit", "llama3-8b", "--hardware", "h100-80gb", "--gpus", "3", ok=False)
    assert res.exit_code == 1 and res.stderr.startswith("error: --gpus 3 (tensor parallelism over 3; --tp, --pp and "
                                                        "--dp give another layout): every layer of llama3-8b has 32 "
                                                        "query heads, which 3 ranks cannot split evenly"), str(res)
    res = run("fit", "llama3-8b", "--hardware", "h100-80gb", "--tp", "3", ok=False)
    assert res.stderr.startswith("error: --tp 3: every layer of llama3-8b has 32 query heads")


def test_sglang_caps_each_attention_dp_worker():
    # an audit: under --dp-attention each of a replica's tp ranks runs its own scheduler over its own pool, and SGLang's
    # max_running_requests is "per dp worker" (kv_cache_configurator.resolve_max_num_reqs); kvcalc capped the whole
    # replica at one worker's 2,048. DeepSeek-V3 on 8 H200s in fp8 under DP attention: SGLang's static fraction is
    # 0.759 (sglang_mem_fraction: 512 + 1.5 · 8,192 + 8/8 · 1,024 + 2 · 512 + 1.5 · 1,024 (MLA prefill graphs) + 512 · 8
    # · 3 + 512 · 8 · 1.5 = 34,816 MiB of 144,384), so each GPU's room for the cache is
    # ⌊151,397,597,184 · 0.759⌋ − 97,965,690,880 weights = 16,945,085,382 bytes (the weights:
    # 94,769,911,296 in fp8; the absorbed w_kc, w_vc that SGLang dequantizes to bf16 beside kv_b_proj, whole under
    # DP attention: 61 · 128 heads · (128 + 128) · 512 · 2 = 2,046,820,352; and a byte more a parameter for what
    # SGLang keeps in bf16: the embedding, whole under DP attention (129,280 rows of 7,168), the LM head's share
    # (16,160 rows) and the 58 routers (7,168 · 256 and 256 biases)); a token of the latent cache takes 61
    # layers · 576 · 2 = 70,272 bytes on every worker, so a worker's pool holds 241,135 tokens: 235 sequences of 1,024,
    # and the 8 workers 1,880, which memory, not the cap (8 · 2,048), binds
    args = ("deepseek-v3", "--hardware", "h200-141gb", "--engine", "sglang", "--tp", "8", "--dp-attention",
            "--weights-dtype", "fp8")
    weights = 94_769_911_296 + 61 * 128 * 256 * 512 * 2 + (129_280 + 16_160) * 7168 + 58 * (7168 * 256 + 256)
    room = 151_397_597_184 * 759 // 1000 - weights
    assert room // (61 * 576 * 2) == 241_135
    row = json.loads(run("fit", *args, "--ctx", "1024", "-f", "json").stdout)[0]
    assert row["weights_bytes_per_gpu"] == weights == 97_965_690_880 and row["reserve"] == 0.241
    assert (row["max_batch"], row["binding"]) == (241_135 // 1024 * 8, "memory") == (1880, "memory")
    # at 64 tokens memory would hold 8 · 3,767 sequences; each worker runs at most 2,048 (clamp's floor)
    row = json.loads(run("fit", *args, "--ctx", "64", "-f", "json").stdout)[0]
    assert (row["max_batch"], row["binding"]) == (8 * 2048, "max_running_requests")


def test_vllm_holds_one_block_of_its_pool_back():
    # an audit: vLLM's BlockPool takes block 0 out of its free queue as the null block (vllm/v1/core/block_pool.py,
    # 0.34.0), so num_blocks − 1 blocks hold sequences. Llama 3.1 8B on an RTX 4090: budget 24 GiB less vLLM's
    # margin, 1 GiB (its extensible KV cache; 0.75 of the activations is less), less the weights and one chunk's
    # activations; a block is a 64-token page of each of the 32 layers, 64 · 32 · (2 · 8 · 128 · 2) = 8,388,608
    # bytes; 1,007 blocks fit, 1,006 are the sequence's: 64,384 tokens, not 64,448
    row = json.loads(run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--batch", "1",
                         "-f", "json").stdout)[0]
    assert (row["weights_bytes_per_gpu"], row["activation_bytes"]) == (16_060_522_496, 184_549_376)
    room = 23 * 2**30 - 16_060_522_496 - 184_549_376
    block = 64 * 32 * 2 * 8 * 128 * 2
    assert room == 8_450_990_080 and room // block == 1007
    assert (row["max_ctx"], row["binding"]) == ((1007 - 1) * 64, "memory") == (64_384, "memory")
    assert row["free_bytes_per_gpu"] == room - 1007 * block  # the null block is not left over
    # vLLM's gpu_memory_utilization 0.92 given: it requests ⌈24 GiB · 0.92⌉ = ⌈23,708,219,473.92⌉ bytes, 889 blocks
    row = json.loads(run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--batch", "1",
                         "--reserve", "0.08", "-f", "json").stdout)[0]
    room = -(-24 * 2**30 * 92 // 100) - 16_060_522_496 - 184_549_376
    assert room == 23_708_219_474 - 16_245_071_872 and room // block == 889
    assert (row["max_ctx"], row["free_bytes_per_gpu"]) == (888 * 64, room - 889 * block) == (56_832, 5_675_090)
    # without an engine (or under ideal pages) nothing is held back: the floor of the budget takes 889 · 64 tokens and more
    ideal = json.loads(run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "ideal", "--batch", "1",
                           "--reserve", "0.08", "-f", "json").stdout)[0]
    assert ideal["max_ctx"] == (room - 1) // (32 * 2 * 8 * 128 * 2) >= 889 * 64


def test_under_vllm_the_gpu_shown_is_the_one_with_least_left():
    # an audit: Llama 3.1 8B in 5 stages of 6, 6, 7, 7, 6 layers; the last is the busiest by cache and weights (the
    # embedding beside the head), but the 7-layer stages hold a null block one layer's page larger. The answer was
    # right (every stage is checked) but the row showed the last stage, with 8,192 bytes left, while stages 2 and 3
    # had none: the row now shows the GPU that binds
    row = json.loads(run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--pp", "5", "--batch", "3",
                         "--reserve", "370899/524288", "-f", "json").stdout)[0]
    page = 64 * 2 * 8 * 128 * 2  # one layer's 64-token page
    assert row["max_ctx"] == 49_984 and row["free_bytes_per_gpu"] == 0
    assert row["kv_cache_bytes_per_gpu"] == 3 * 7 * -(-49_984 // 64) * page == 4_299_423_744


def test_the_title_names_the_null_block_no_column_shows():
    # the table's Left, KV cache, weights and activations leave vLLM's null block out: the title says it, a 64-token
    # page of each of Llama 3.1 8B's 32 layers (8 K/V heads of 128, bf16): 8,388,608 bytes, 8.00 MiB
    res = run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--batch", "1")
    assert ("vllm pages (8.00 MiB a GPU held back: the pool's null block), vLLM's margin of 1.00 GiB kept free"
            in res.stdout.splitlines()[0])
    assert 64 * 32 * 2 * 8 * 128 * 2 == 8 * 2**20
    # with stages of 26, 27 and 27 layers at tp 2 the blocks differ: the largest, 27 · 64 · 2 · 4 · 128 · 2 bytes
    res = run("fit", "llama3-70b", "--hardware", "h100-80gb", "--engine", "vllm", "--pp", "3", "--tp", "2", "--batch", "1")
    assert "(up to 3.38 MiB a GPU held back" in res.stdout and 27 * 64 * 2 * 4 * 128 * 2 == 3_538_944
    assert "held back" not in run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--batch", "1").stdout
    # the block in the table's --units: 8,388,608 bytes are 8.39 MB
    res = run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--batch", "1", "--units", "si")
    assert "(8.39 MB a GPU held back" in res.stdout.splitlines()[0]


@pytest.mark.parametrize("reserve, says", [("0.005", "0.5%"), ("0.995", "99.5%"), ("0.125", "12.5%"), ("0.1", "10%"),
                                           ("1/3", "33.3%"), ("0", "0%"), ("0.00012345", "0.0123%")])
def test_the_title_says_the_reserve_exactly_or_to_three_digits(reserve, says):
    # an audit: the title rounded to a whole percent ('0% reserved' for 0.005, whose Reserved column was 410 MiB)
    res = run("fit", "llama3-8b", "--hardware", "h100-80gb", "--reserve", reserve)
    assert res.stdout.splitlines()[0].endswith(f", {says} reserved")


def test_the_states_in_a_rows_per_gpu_cache_are_given_apart():
    # an audit: fit's kv_cache_bytes_per_gpu counts the states (so the budget adds up) where compare's leaves them to
    # state_bytes_per_gpu: on one GPU it read above the whole kv_cache_bytes. The row now says how much is states.
    row = json.loads(run("fit", "nemotron-h-56b", "--hardware", "h200-141gb", "--batch", "4", "-f", "json").stdout)[0]
    same = json.loads(run("compare", "nemotron-h-56b", "--ctx", str(row["ctx"]), "--batch", "4", "--columns", "all",
                          "-f", "json").stdout)[0]
    assert row["state_bytes_per_gpu"] == same["state_bytes_per_gpu"] > 0
    assert row["kv_cache_bytes_per_gpu"] == same["kv_cache_bytes_per_gpu"] + same["state_bytes_per_gpu"]
    assert row["kv_cache_bytes"] == same["kv_cache_bytes"]
    plain = json.loads(run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "-f", "json").stdout)[0]
    assert "state_bytes_per_gpu" not in plain  # no states: left out


def test_nothing_fitting_is_said():
    # a usability review: DeepSeek-V3 in bf16 on 8 H200s printed 'Max batch 0' (binding weights) with no word more
    for extra in (["--ctx", "32k"], []):
        res = run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--gpus", "8", *extra)
        assert res.exit_code == 0 and "warning: deepseek-v3: nothing fits: the weights leave the busiest GPU" in res.stderr
    assert "nothing fits" not in run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--gpus", "8",
                                     "--weights-dtype", "fp8").stderr


def test_sglang_names_the_pool_that_binds():
    # a usability review: Qwen3-Next under SGLang said 'memory' with 15.9 GiB left a GPU: the token pool is full while
    # the state pool keeps its share of the room (mamba_full_memory_ratio), so which pool binds is said
    row = json.loads(run("fit", "qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--gpus", "4", "--engine", "sglang",
                         "--ctx", "32k", "-f", "json").stdout)[0]
    assert row["binding"] == "memory" and row["max_batch"] == 39  # the json keeps its value
    # the slots by hand: SGLang's room (80 GiB at its static fraction, 0.819 at tp 4 on an H100, less the GPU's
    # weights) gives its state pool r/(1 + r) = 9/19; a sequence's states on one of 4 tp ranks: 36 Gated DeltaNet
    # layers of an fp32 recurrent state (32/4)·128·128 and a bf16 conv state 3·(2·16·128 + 32·128)/4
    room = 80 * 2**30 * 819 // 1000 - row["weights_bytes_per_gpu"]
    per_sequence = 36 * ((32 // 4) * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) // 4 * 2)
    # max_mamba_cache_size = (share − S) // S: the pool's padding slot inside the share (an exactness review: 746
    # counted it as a sequence's)
    slots = (room * 9 // 19 - per_sequence) // per_sequence
    res = run("fit", "qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--gpus", "4", "--engine", "sglang", "--ctx", "32k")
    assert (f"note: qwen3-next-80b-a3b: at 32,768 tokens SGLang's limit is its token pool (the state pool keeps {slots:,} "
            "slots)") in res.stderr and slots == 745
    assert "SGLang's limit" not in run("fit", "llama3-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32k").stderr


def test_a_fit_row_carries_its_settings():
    # a usability review: fit's csv and json rows had no kv dtype, engine, layout or reserve, so a script that gathered
    # several runs could not tell them apart
    row = json.loads(run("fit", "deepseek-v3", "--hardware", "h200-141gb", "--tp", "8", "--engine", "vllm",
                         "--kv-dtype", "fp8", "--weights-dtype", "fp8", "--mtp", "--ctx", "32k", "-f", "json").stdout)[0]
    assert {k: row[k] for k in ("kv_dtype", "kv_quant", "weights_dtype", "engine", "tp", "pp", "dp", "ep", "dp_attention",
                                "mtp", "reserve", "prefill_chunk")} == {
        "kv_dtype": "fp8", "kv_quant": "none", "weights_dtype": "fp8", "engine": "vllm", "tp": 8, "pp": 1, "dp": 1, "ep": 1,
        "dp_attention": False, "mtp": True, "reserve": 0.0,  # vLLM's gpu_memory_utilization 1.0 on NVIDIA GPUs
        "prefill_chunk": 8192}  # vllm serve's max_num_batched_tokens on a GPU of 70 GiB or more (141 < 160)
    plain = json.loads(run("fit", "llama3-8b", "--hardware", "h100-80gb", "--gpus", "2", "--reserve", "1/8", "-f",
                           "json").stdout)[0]
    assert "engine" not in plain and plain["tp"] == 2 and plain["reserve"] == 0.125 and plain["prefill_chunk"] == 2048
    assert "kv_quant" not in run("fit", "llama3-8b", "--hardware", "h100-80gb").stdout.splitlines()[1]  # not a column


@pytest.mark.parametrize(("model", "hardware", "at", "reserved_mib", "fraction"), [
    # SGLang 0.5.23's default --mem-fraction-static, by hand from memory_hook.py (a serving review: fit kept kvcalc's
    # 0.1 under --engine sglang, 14 sequences of llama3.1-8b at 32k on an H100 where SGLang holds 12). MiB reserved:
    # 512 + 1.5 · max(chunk, 2048) + tp · pp / 8 · 1024 + 2 · decode max_bs + prefill graphs (8 a captured size, 58
    # sizes up to 8,192, 50 up to 4,096; 1,536 for MLA; none at pp > 1 or off CUDA), at least 10,240 past 60 GiB
    ("llama3.1-8b", "h100-80gb", {}, 512 + 12288 + 128 + 512 + 8 * 58, "0.83"),  # (81,920 − 13,904) / 81,920
    ("llama3.1-8b", "rtx-4090", {}, 512 + 6144 + 128 + 96 + 8 * 50, "0.704"),  # 24 GiB: chunk 4,096, max_bs 48
    ("deepseek-v3", "h200-141gb", {"tp": 8}, 512 + 12288 + 1024 + 1024 + 1536, "0.887"),  # max_bs 512 at tp >= 4
    # DP attention: + max_bs · 8 attention-dp ranks · 3, and · 1.5 more past a max_bs of 300
    ("deepseek-v3", "h200-141gb", {"tp": 8, "dp_attention": True}, 16384 + 512 * 8 * 3 + 512 * 8 * 1.5, "0.759"),
    ("llama3-70b", "h100-80gb", {"tp": 4, "pp": 2}, 512 + 12288 + 1024 + 1024, "0.819"),  # no prefill graphs at pp 2
    # 192 GiB: chunk 16,384, max_bs 512; ROCm: no prefill graphs, and aiter's × 0.85 past an 8,192-token context
    # (a review: attention_hook.py, SGLang's default backend on AMD GPUs)
    ("llama3.1-8b", "mi300x", {}, 512 + 24576 + 128 + 1024, "0.867"),
    ("deepseek-v3", "mi300x", {"tp": 8}, 512 + 24576 + 1024 + 1024, "0.862"),  # MLA at 128 / 8 = 16 heads: aiter too
    ("deepseek-v3", "mi300x", {"tp": 4}, 512 + 24576 + 512 + 1024, "0.865"),  # 32 heads a rank: triton, no × 0.85
    # a review: model overrides pick another backend first: DeepSeek Sparse Attention's dsa, Gemma 4's triton
    ("deepseek-v3.2", "mi300x", {"tp": 8}, 512 + 24576 + 1024 + 1024, "0.862"),
    ("gemma4-26b-a4b", "mi300x", {}, 512 + 24576 + 128 + 1024, "0.867"),
])
def test_sglang_default_static_fraction(model, hardware, at, reserved_mib, fraction):
    from fractions import Fraction

    from conftest import spec
    from kvcalc.costs.engine_memory import default_prefill_chunk, default_reserve, sglang_mem_fraction
    from kvcalc.hardware import load_hardware
    from kvcalc.settings import Settings

    hw = load_hardware(hardware)
    s = Settings(ctx=1, engine="sglang", **at)
    chunk = default_prefill_chunk("sglang", hw)
    mib = hw.memory_bytes // 2**20
    assert round((mib - max(reserved_mib, 10240 if mib > 60 * 1024 else 0)) / mib, 3) == float(fraction)
    aiter = Fraction(85, 100) if hardware == "mi300x" and at.get("tp") != 4 and model in ("llama3.1-8b", "deepseek-v3") else 1
    assert sglang_mem_fraction(spec(model), s, hw, chunk) == Fraction(fraction) * aiter
    assert default_reserve(spec(model), s, hw, chunk) == 1 - Fraction(fraction) * aiter


def test_sglang_fit_takes_its_static_fraction_and_no_activation_estimate():
    # llama3.1-8b at 32k on one H100: SGLang's pool is 80 GiB · 0.83 less the weights (its fraction leaves the room
    # for activations and graphs), 131,072 bytes a token (32 layers · 2 · 8 · 128 · 2): 12 sequences
    row = fit("llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32768")[0]
    tokens = (85_899_345_920 * 83 // 100 - row["weights_bytes_per_gpu"]) // 131_072
    assert (row["reserve"], row["activation_bytes"], row["prefill_chunk"]) == (0.17, 0, 8192)
    assert row["max_batch"] == tokens // 32_768 == 12
    # --reserve still sets it (1 − --mem-fraction-static), and --prefill-chunk SGLang's chunked_prefill_size
    assert fit("llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32768", "--reserve", "0.1")[0][
        "reserve"] == 0.1
    assert fit("llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32768", "--prefill-chunk",
               "16384")[0]["reserve"] == 0.321  # 512 + 24,576 + 128 + 512 + 8 · 74 sizes = 26,320 MiB: 0.679
    # a chunk whose activations would take the whole GPU is refused, not a negative fraction (a review: the largest
    # --prefill-chunk, 2^40, also listed its 2^31 capture sizes and ran out of memory)
    res = run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "4k", "--prefill-chunk",
              str(2**40), ok=False)
    assert res.exit_code == 1 and "leaving no static memory: give a smaller --prefill-chunk, or --reserve" in res.stderr
    # where the ranks' 128 MiB each is the larger term, the message names them, not the chunk (a review: it always
    # named --prefill-chunk). An RTX 4090, 24,576 MiB, tp 8: chunk 4,096 and max_bs 160 (SGLang's tier under 35 GiB);
    # 512 + 2 · 160 = 832 MiB, 4,096 · 1.5 = 6,144 MiB, 8 · 20 / 8 · 1,024 = 20,480 MiB (pp > 1: no prefill graphs)
    res = run("fit", "llama3.1-405b", "--hardware", "rtx-4090", "--engine", "sglang", "--ctx", "4k", "--tp", "8", "--pp",
              "20", ok=False)
    assert res.exit_code == 1 and ("SGLang would keep 27,456 MiB of the 24,576 MiB of rtx-4090 for activations and "
                                   "graphs (20,480 MiB for 160 ranks (tp · pp) at 128 MiB each, 6,144 MiB for a prefill "
                                   "chunk of 4,096 tokens at 1.5 MiB a token, 832 MiB for its base and decode graphs), "
                                   "leaving no static memory: give fewer GPUs, or --reserve") in res.stderr, res.stderr
    from kvcalc.costs.engine_memory import _prefill_captures

    assert (_prefill_captures(8192), _prefill_captures(16384), _prefill_captures(2**40)) == (58, 74, 50 + (2**40 - 4608) // 512 + 1)


def test_sglang_caps_requests_by_its_pool_between_the_clamps():
    # a mutation review: SGLang's max_running_requests, min(clamp(int(tokens / context_len · 512), 2048, 4096),
    # tokens // 2) (kv_cache_configurator resolve_max_num_reqs), was tested only at its floor and ceiling.
    # llama3.2-1b on an RTX 5090: SGLang's fraction 0.778 (7,280 MiB of 32,768 kept), a token of 16 layers ·
    # 2 · 8 · 64 · 2 = 32,768 bytes, context_len 131,072
    row = fit("llama3.2-1b", "--engine", "sglang", "--ctx", "64", "--hardware", "rtx-5090")[0]
    tokens = _room(row) // 32_768
    assert row["reserve"] == 0.222 and 2048 < tokens * 512 // 131_072 < 4096
    assert (row["max_batch"], row["binding"]) == (int(tokens / 131_072 * 512), "max_running_requests") \
        == (2892, "max_running_requests")


def test_sglang_multimodal_checkpoints_are_noted():
    # a review: SGLang serves Gemma 4's published checkpoint as multimodal, trimming its static fraction for the vision
    # tower (0.836 · 0.91 on an H100) and loading the tower: kvcalc's text spec knows neither, and says so
    res = run("fit", "gemma4-26b-a4b", "--ctx", "32k", "--hardware", "h100-80gb", "--engine", "sglang")
    assert "note: gemma4-26b-a4b: SGLang serves its published checkpoint as multimodal" in res.stderr
    assert "multimodal" not in run("fit", "gemma4-26b-a4b", "--ctx", "32k", "--hardware", "h100-80gb", "--engine",
                                   "sglang", "--reserve", "0.25").stderr
    # vLLM trims no fraction but loads the tower too (a SGLang sizing review)
    res = run("fit", "gemma4-26b-a4b", "--ctx", "32k", "--hardware", "h100-80gb", "--engine", "vllm")
    assert "serves its published checkpoint" not in res.stderr and "vLLM loads the vision tower" in res.stderr
    assert "multimodal" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang").stderr


def test_sglang_with_a_reserve_says_the_prefill_chunk_changes_nothing():
    # a review: the chunk only sets SGLang's default static fraction; with --reserve it changed nothing, in silence
    args = ("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32k")
    res = run(*args, "--reserve", "0.2", "--prefill-chunk", "4096")
    assert "--prefill-chunk under --engine sglang only sets SGLang's default static fraction" in res.stderr
    assert "only sets" not in run(*args, "--prefill-chunk", "4096").stderr
    assert "only sets" not in run(*args, "--reserve", "0.2").stderr


def test_sglang_fraction_for_multimodal_families_and_any_vendor_spelling(tmp_path):
    # a review: SGLang captures no prefill graphs for the multimodal families outside its allow-list (Whisper: (81,920
    # − 13,440) / 81,920 = 0.836, with no tower to trim: no note), serves OLMo 3 as OLMo 2 (triton, so no aiter factor
    # on AMD GPUs), and a preset's vendor is free text ('amd' is AMD)
    row = fit("whisper-large-v3", "--engine", "sglang", "--hardware", "h100-80gb")[0]
    assert round(1 - (81920 - (512 + 8192 * 1.5 + 128 + 256 * 2)) / 81920, 3) == row["reserve"] == 0.164
    assert "multimodal" not in run("fit", "whisper-large-v3", "--engine", "sglang", "--hardware", "h100-80gb").stderr
    amd = tmp_path / "amd.yaml"
    amd.write_text((ROOT / "hardware_specs" / "mi300x.yaml").read_text().replace("vendor: AMD", "vendor: amd"))
    assert fit("llama3.1-8b", "--engine", "sglang", "--hardware", str(amd), "--ctx", "32k")[0]["reserve"] == 0.26305
    olmo3 = tmp_path / "olmo3.json"
    cfg = json.loads((REFERENCE / "configs-extra" / "olmo-2-1124-7b.json").read_text())
    olmo3.write_text(json.dumps({**cfg, "model_type": "olmo3", "max_position_embeddings": 65536}))
    assert fit(str(olmo3), "--engine", "sglang", "--hardware", "mi300x", "--ctx", "32k")[0]["reserve"] == 0.133


def test_the_library_fit_takes_the_engines_defaults_as_the_command_line_does():
    # a review: the defaults of --reserve and --prefill-chunk (SGLang's static fraction) lived in the command line's
    # output layer alone, so the API's fit() needed them written out
    from kvcalc.fit import fit as solve
    from kvcalc.hardware import load_hardware
    from kvcalc.registry import load_model
    from kvcalc.settings import Settings

    s = Settings(ctx=32768, engine="sglang")
    row = solve(load_model("llama3.1-8b").spec, s, load_hardware("h100-80gb"), None, None, "batch")
    assert (row.reserve, row.prefill_chunk, row.max_batch) == (0.17, 8192, 12)
    assert row.max_batch == fit("llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "32768")[0]["max_batch"]


@pytest.mark.parametrize(("model", "hardware", "args", "reserve"), [
    # a mutation review: SGLang's fraction at points the other cases miss, each by hand (MiB of the GPU's)
    # 48 GiB (below 60): chunk 4,096, max_bs 32: 512 + 6,144 + 128 + 64 + 8 · 50 captures = 7,248 of 49,152 → 0.853
    ("llama3.1-8b", "l40s", (), 0.147),
    # a chunk below 2,048 still reserves 2,048 tokens: 512 + 3,072 + 128 + 96 + 8 · 30 = 4,048 of 24,576 → 0.835
    ("llama3.1-8b", "rtx-4090", ("--prefill-chunk", "512"), 0.165),
    # the 10 GiB floor binds: 512 + 3,072 + 128 + 512 + 8 · 42 = 4,560 → 10,240 of 81,920 → 0.875
    ("llama3.1-8b", "h100-80gb", ("--prefill-chunk", "2048"), 0.125),
    # DP attention at max_bs 256 (tp 2): 512 + 12,288 + 256 + 512 + 256 · 2 · 3 + 1,536 (MLA) = 16,640 → 0.797
    ("deepseek-v2-lite", "h100-80gb", ("--tp", "2", "--dp-attention"), 0.203),
    # a Qwen3.5 checkpoint keeps its prefill graphs (allow-listed): 512 + 12,288 + 128 + 512 + 464 = 13,904 of 144,384
    (str(REFERENCE / "configs-extra-2" / "qwen3.5-35b-a3b.json"), "h200-141gb", (), 0.096),
    # Kimi Linear (KDA) captures none: 512 + 12,288 + 128 + 512 = 13,440 → 0.907
    (str(REFERENCE / "configs-extra-3" / "kimi-linear-48b-a3b-instruct.json"), "h200-141gb", (), 0.093),
    # Gemma 3n, multimodal, none either: 512 + 6,144 + 128 + 64 = 6,848 of 49,152 → 0.861
    (str(REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json"), "l40s", (), 0.139),
    # on an MI300X: MLA at 128 heads a rank takes aiter: 512 + 24,576 + 128 + 1,024 = 26,240 → 0.867 · 0.85
    ("deepseek-v2", "mi300x", ("--weights-dtype", "fp8"), 0.26305),
    # a context of 8,192, not over it: no aiter factor
    ("llama3-8b", "mi300x", (), 0.133),
])
def test_sglang_fraction_at_its_edges(model, hardware, args, reserve):
    assert fit(model, "--hardware", hardware, "--engine", "sglang", "--ctx", "4k", *args)[0]["reserve"] == reserve


def test_sglang_prefill_captures_are_its_list_counted():
    from kvcalc.costs.engine_memory import _prefill_captures

    def listed(max_bs):  # generate_prefill_cuda_graph_batch_sizes, as SGLang 0.5.23 writes it
        sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
                 *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]
        return len([n for n in sizes if n <= max_bs])

    assert all(_prefill_captures(m) == listed(m) for m in range(0, 20_000))


def test_vllm_notes_what_its_measured_sizing_takes_and_a_context_it_refuses():
    # a vLLM sizing review: vLLM 0.34.0's extensible KV cache measures memory kvcalc cannot (CUDA's context and graphs)
    # and refuses to start where one request of max_model_len does not fit (kv_cache_planning.py
    # _check_enough_kv_cache_memory). Llama 3.1 8B on an RTX 4090: 1,006 blocks of 64 tokens hold one sequence of
    # 64,384 tokens, below its 131,072
    res = run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--ctx", "8k")
    assert "vLLM sizes its cache from the memory it measures free after warmup" in res.stderr
    assert ("vLLM with its default max_model_len, the model's 131,072 tokens, refuses to start here: one sequence of "
            "that length does not fit its pool (at most 64,384 tokens do: give vLLM --max-model-len 64384 or less)"
            ) in res.stderr
    # a --reserve given: no note of the measured sizing; on a TPU vLLM's sizing is its estimate at 0.92: none either
    assert "measures free" not in run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--ctx",
                                      "8k", "--reserve", "0.08").stderr
    assert "measures free" not in run("fit", "llama3.1-8b", "--hardware", "tpu-v5p", "--engine", "vllm").stderr
    # one sequence of 131,072 tokens fits an H100 (16 GiB of cache): no refusal
    assert "refuses to start" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm").stderr
    # SGLang divides the memory the GPU reports, below the preset's (a sizing review): said where the default stands
    res = run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "8k")
    assert "note: llama3.1-8b: SGLang divides the memory the device reports" in res.stderr
    assert "reports" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "8k",
                                "--reserve", "0.2").stderr


@pytest.mark.parametrize("reserve, title", [
    ("0.005", ", vLLM's margin of 1.00 GiB kept free (more than the 0.5% reserved)"),  # 410 MiB of 80 GiB
    ("0.0125", ", 1.25% reserved"),  # 1.00 GiB exactly: the fraction's ⌈80 GiB · 0.9875⌉ ties the margin's
    ("0.02", ", 2% reserved"),
])
def test_vllm_keeps_the_larger_of_the_reserve_and_its_margin(reserve, title):
    # measure_kv_cache_bytes: min(requested − used, free − margin) − P, requested = ⌈memory · utilization⌉
    row = json.loads(run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm", "--reserve", reserve,
                         "-f", "json").stdout)[0]
    assert row["reserved_bytes"] == max(80 * 2**30 - (80 * 2**30 * (1 - Fraction(reserve))).__ceil__(), 2**30)
    assert run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm", "--reserve",
               reserve).stdout.splitlines()[0].endswith(title)


def test_sglang_state_slots_keep_the_padding_slot_inside_the_share():
    # an exactness review: SGLang 0.5.23 solves max_mamba_cache_size K = (share − S) // S, its pool's padding slot
    # inside the share (kv_cache_configurator.py: "+1 accounts for each pool's padding slot"); kvcalc took share // S,
    # one more. Qwen3-Next at tp 4 on H200s, --reserve 0.11: the extra-buffer strategy runs K // 5 requests
    row = json.loads(run("fit", "qwen3-next-80b-a3b", "--hardware", "h200-141gb", "--tp", "4", "--engine", "sglang",
                         "--ctx", "1k", "--reserve", "0.11", "-f", "json").stdout)[0]
    room = 141 * 2**30 * 89 // 100 - row["weights_bytes_per_gpu"]
    per_sequence = 36 * ((32 // 4) * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) // 4 * 2)
    slots = (room * 9 // 19 - per_sequence) // per_sequence
    assert slots == 2324 and (row["max_batch"], row["binding"]) == (slots // 5, "max_running_requests") == (464, "max_running_requests")


def test_the_engines_load_the_vision_tower_of_multimodal_checkpoints():
    # a SGLang sizing review: SGLang builds Gemma3ForConditionalGeneration with its SigLIP tower though it serves Gemma 3
    # as text (gemma3_mm.py; model_config.py turns only the processing off), and vLLM loads the towers too: noted
    for engine in ("vllm", "sglang"):
        res = run("fit", "gemma3-27b", "--hardware", "h100-80gb", "--engine", engine, "--ctx", "4k")
        assert "loads the vision tower of the family's multimodal checkpoints" in res.stderr
        assert "vision tower" not in run("fit", "gemma3-27b", "--hardware", "h100-80gb", "--engine", engine, "--ctx",
                                         "4k", "--reserve", "0.2").stderr
    assert "vision tower" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm").stderr


@pytest.mark.parametrize(("args", "said"), [(("--kv-dtype", "int4"), "--kv-dtype int4"),
                                            (("--kv-dtype", "int8"), "--kv-dtype int8"),
                                            (("--kv-dtype", "fp8", "--kv-quant", "per-token"), "--kv-quant per-token"),
                                            (("--kv-dtype", "fp8", "--kv-quant", "g64"), "--kv-quant g64")])
def test_sglang_caches_it_lacks_are_warned_of(args, said):
    # a SGLang sizing review: SGLang 0.5.23's kv_cache_dtype is auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, nvfp4 or
    # fp4_mx_block16 (arg_groups/fields/model.py): an int cache or kvcalc's scaled schemes passed in silence
    res = run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx", "8k", *args)
    assert f"warning: llama3.1-8b: --engine sglang {said}: SGLang 0.5.23 has no such cache" in res.stderr
    assert "no such cache" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "sglang", "--ctx",
                                      "8k", "--kv-dtype", "fp8").stderr


def test_a_text_checkpoint_of_a_multimodal_family_gets_no_tower():
    # a review of today's changes: Gemma 3 1B (Gemma3ForCausalLM) has no vision tower, yet the family's note said so;
    # the spec says multimodal: false, and an import reads it from the architectures
    import copy

    from kvcalc.costs.engine_memory import sglang_mem_fraction
    from kvcalc.hardware import load_hardware
    from kvcalc.hf import import_config
    from kvcalc.settings import Settings
    from kvcalc.spec import spec_from_dict

    for engine in ("vllm", "sglang"):
        assert "vision tower" not in run("fit", "gemma3-1b", "--hardware", "h100-80gb", "--engine", engine).stderr
    assert import_config(json.loads((REFERENCE / "models" / "gemma-3-1b-it.json").read_text()), "g", "g").data[
        "multimodal"] is False
    # Gemma 4's text model under SGLang: prefill CUDA graphs on (a text model is no multimodal checkpoint), so SGLang
    # keeps 8 MiB a captured size more out of its static fraction than for the multimodal checkpoint, which has none
    cfg = json.loads((REFERENCE / "models-2026" / "gemma-4-26b-a4b.json").read_text())
    whole = spec_from_dict(import_config(cfg, "g", "g").data, "g")
    text_cfg = copy.deepcopy(cfg)
    text_cfg["architectures"] = ["Gemma4ForCausalLM"]
    text = spec_from_dict(import_config(text_cfg, "g", "g").data, "g")
    assert (whole.multimodal, text.multimodal) == (True, False)
    hw, s = load_hardware("h100-80gb"), Settings(ctx=1, engine="sglang")
    assert sglang_mem_fraction(text, s, hw, 8192) < sglang_mem_fraction(whole, s, hw, 8192)


def test_vllm_refusal_note_only_where_kvcalcs_cache_is_vllms_admission_bound():
    # a review of today's changes: vLLM admits one request of max_model_len by max_admission_blocks_per_request, which
    # for a window or chunk adds the tokens in flight (cdiv(W − 1 + in-flight, B) + 1 pages), so kvcalc's steady cache
    # told Gemma 3 12B on an RTX 4090 '--max-model-len 9344' where vLLM takes about 2,368. Now its admission bound is
    # counted (kvcalc.costs.engine_memory.vllm_admitted; test_vllm_starts_only_with_a_max_model_len...): 2,368
    res = run("fit", "gemma3-12b", "--hardware", "rtx-4090", "--engine", "vllm")
    assert "give vLLM --max-model-len 2368 or less" in res.stderr and "9344" not in res.stderr
    assert "refuses to start" in run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm").stderr


@pytest.mark.parametrize(("args", "said"), [(("--kv-dtype", "int8"), "int8"), (("--kv-dtype", "int4"), "int4")])
def test_vllm_plain_int_caches_are_warned_of(args, said):
    # vLLM 0.34.0's int caches are per token and head (CacheDType int8_per_token_head): a plain one is not among them
    res = run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm", "--ctx", "8k", *args)
    assert f"warning: llama3.1-8b: --engine vllm --kv-dtype {said}: vLLM 0.34.0 has no such cache" in res.stderr
    assert "no such cache" not in run("fit", "llama3.1-8b", "--hardware", "h100-80gb", "--engine", "vllm", "--ctx", "8k",
                                      *args, "--kv-quant", "per-head").stderr


def test_sglang_refuses_to_start_where_a_pool_serves_no_request():
    # a review: SGLang's start-up raises where its pools cannot serve one request, so nothing fits there.
    # - pool_configurator.validate_swa_pool_size: an SWA pool of sliding_window_size + page_size tokens or fewer; for
    #   Llama 4 that window is attention_chunk_size, 8,192 (load_model_utils.resolve_sliding_window_size). Scout at tp
    #   2: 12 full and 36 chunked layers of 2 · 4 KV heads · 128 · 2 = 2,048 bytes a token a GPU, full_tokens = room /
    #   (12 · 2,048 + 0.8 · 36 · 2,048), swa_tokens = 0.8 · full_tokens
    def pools(row):
        full = int(Fraction(_room(row)) / (12 * 2048 + Fraction(4, 5) * 36 * 2048))
        return full, int(full * Fraction(4, 5))

    args = ("llama4-scout", "--hardware", "h200-141gb", "--tp", "2", "--engine", "sglang", "--reserve")
    refused, served = fit(*args, "0.2835")[0], fit(*args, "0.28")[0]
    assert pools(refused) == (8402, 6721) and 6721 <= 8192 + 1 and refused["max_ctx"] == 0
    assert pools(served) == (14_743, 11_794) and served["max_ctx"] == 14_743
    res = run("fit", *args, "0.2835")
    assert ("warning: llama4-scout: nothing fits: SGLang refuses to start: its sliding-window pool of 6,721 tokens "
            "would not hold one request's window and a page (8,192 + 1 tokens: validate_swa_pool_size)") in " ".join(
        res.stderr.split())
    # - resolve_max_num_reqs: max_mamba_cache_size // ratio requests, ratio 3 + 2 under Nemotron-H's extra buffer; 0
    #   raises a RuntimeError. K = (room · 9/19 − S) // S, S = 54 Mamba-2 layers · (256 · 64 · 256 fp32 + 3 · 20,480
    #   bf16)
    s = 54 * (256 * 64 * 256 * 4 + 3 * 20_480 * 2)
    args = ("nemotron-h-56b", "--hardware", "h200-141gb", "--engine", "sglang", "--reserve")
    refused, served = fit(*args, "0.18")[0], fit(*args, "0.17")[0]
    assert ((_room(refused) * 9 // 19 - s) // s, refused["max_ctx"]) == (4, 0)
    assert ((_room(served) * 9 // 19 - s) // s, served["max_ctx"], served["batch"]) == (5, 8192, 1)
    assert ("nothing fits: SGLang refuses to start: its state pool holds 4 slots, fewer than the 5 it reserves a "
            "request") in " ".join(run("fit", *args, "0.18").stderr.split())
    # gpt-oss's SGLang window is sliding_window − 1 (gpt_oss.py get_attention_sliding_window_size: exclusive)
    from kvcalc.costs.paged import sglang_window
    from kvcalc.registry import load_model

    assert [sglang_window(load_model(m).spec) for m in ("gpt-oss-20b", "llama4-scout", "gemma3-27b", "llama3-70b")] \
        == [127, 8192, 0, 0]


def test_vllm_starts_only_with_a_max_model_len_its_admission_check_holds():
    # a review: vLLM's start-up check (kv_cache_planning._check_enough_kv_cache_memory) wants one request of
    # max_model_len's blocks and the null block in the pool, each group's max_admission_blocks_per_request: a window
    # W takes cdiv(min(W − 1 + I, L), B) + 1 with I = max_in_flight_tokens = (pp + 1) · max_num_batched_tokens (async
    # scheduling): more than the ceil(W / B) + 1 pages a decoding sequence holds, so fit said 131,072 tokens fit where
    # vLLM does not start. Gemma 3 27B on an H100 (B = 64, M = 8,192, I = 16,384): groups of 10 layers, 1 full and 6
    # windowed (W = 1,024); a block is 10 · 64 · 8,192 bytes (16 KV heads · 128 · 2 · 2); A(L) = cdiv(L, 64) + 6 ·
    # (cdiv(1,023 + 16,384, 64) + 1) = cdiv(L, 64) + 6 · 273
    args = ("gemma3-27b", "--hardware", "h100-80gb", "--engine", "vllm", "--reserve", "0.2")
    row = fit(*args)[0]
    blocks = _room(row) // (10 * 64 * 8192)
    assert blocks == 2602
    assert (row["max_ctx"], row["binding"]) == (64 * (blocks - 1 - 6 * 273), "startup") == (61_632, "startup")
    # the row's figures are at that context (they were at the 131,072 memory alone holds): the full group's 10 layers
    # cdiv(61,632, 64) = 963 pages and the windowed groups' 60 slots 17, of 64 · 8,192 bytes
    page = 64 * 8192
    assert (row["ctx"], row["kv_cache_bytes"]) == (61_632, (10 * 963 + 60 * 17) * page) == (61_632, 5_583_667_200)
    res = run("fit", *args)
    assert ("vLLM with its default max_model_len, the model's 131,072 tokens, refuses to start here: one request's "
            "blocks (its windows' prefill tokens in flight included: max_admission_blocks_per_request) do not fit its "
            "pool (at most 61,632 tokens do: give vLLM --max-model-len 61632 or less)") in " ".join(res.stderr.split())
    # solving for the batch: at 32k A = 512 + 1,638 fits the 2,601 blocks, at 64k 1,024 + 1,638 does not
    rows = fit(*args, "--ctx", "32k,64k")
    assert [(r["max_batch"] > 0, r["binding"]) for r in rows] == [(True, "memory"), (False, "startup")]
    # at the default reserve vLLM starts at 131,072 (3,686 blocks of the 5,673 free): nothing said
    assert fit("gemma3-27b", "--hardware", "h100-80gb", "--engine", "vllm")[0]["max_ctx"] == 131_072
    # a hybrid's states: Nemotron-H on an H200 (pages of 4,160 tokens, 10 · 4,160 · 4,096-byte blocks): 1 attention
    # group and 6 state groups of 2 resident blocks and Mamba-2's prefill checkpoint each, A(1) = 1 + 18 = 19; at
    # --reserve 0.225 the pool has 18 blocks: vLLM starts at no length
    row = fit("nemotron-h-56b", "--hardware", "h200-141gb", "--engine", "vllm", "--reserve", "0.225")[0]
    assert (_room(row) // (10 * 4160 * 4096), row["max_ctx"], row["binding"]) == (18, 0, "startup")
    assert "do not fit its pool at any length" in run("fit", "nemotron-h-56b", "--hardware", "h200-141gb", "--engine",
                                                      "vllm", "--reserve", "0.225").stderr
    # Whisper's cross-attention is a group of its own (CrossAttentionSpec): cdiv(max_num_encoder_input_tokens, B)
    # blocks, that a prefill chunk (8,192 on an H100), 128, beside cdiv(L, 64); a block 32 · 64 · 20 · 64 · 2 · 2 bytes
    row = fit("whisper-large-v3", "--hardware", "h100-80gb", "--engine", "vllm", "--reserve", "0.95")[0]
    block = 32 * 64 * 20 * 64 * 2 * 2
    assert (1 + 128 + 1) * block > _room(row) >= (-(-448 // 64) + 24 + 1) * block  # what decoding alone holds fits
    assert (row["max_ctx"], row["binding"]) == (0, "startup")
    # plain models are as before, and a --ctx past the model's maximum is computed anyway, not refused as 'startup'
    rows = fit("llama3-70b", "--hardware", "h100-80gb", "--tp", "2", "--engine", "vllm", "--ctx", "8k,16k,32k")
    assert [(r["max_batch"], r["binding"]) for r in rows] == [(9, "memory"), (4, "memory"), (2, "memory")]


def test_sglang_caps_a_request_a_few_tokens_below_its_pool_and_context():
    # a review: SGLang's max_req_len is min(context_len − 1, pool − 1) (tp_worker.get_worker_info) and a request's
    # output stops at max_req_len − prompt − 1 (scheduler.init_req_max_new_tokens), by memory at pool − ⌈prompt / P⌉·P
    # − P − 1: a request is at most min(context_len − 2, pool − P − 1) tokens. Llama 3.1 8B on an RTX 4090: a pool of
    # room / (32 · 8 · 128 · 2 · 2) tokens, pages of 1
    row = fit("llama3.1-8b", "--hardware", "rtx-4090", "--engine", "sglang")[0]
    pool = _room(row) // 131_072
    assert row["max_ctx"] == pool == 15_879
    said = "SGLang serves a request of at most {:,} tokens, prompt and output"
    assert said.format(pool - 2) in run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "sglang").stderr
    # gpt-oss-20b on an H100: its context binds, 131,072 − 2
    assert said.format(131_070) in run("fit", "gpt-oss-20b", "--hardware", "h100-80gb", "--engine", "sglang").stderr
    # DeepSeek-V3.2's pages of 64 (its NSA page): 158,336 − 64 − 1
    args = ("deepseek-v3.2", "--hardware", "h200-141gb", "--tp", "8", "--weights-dtype", "fp8", "--kv-dtype", "fp8",
            "--reserve", "0.38", "--engine", "sglang")
    assert fit(*args)[0]["max_ctx"] == 158_336
    assert said.format(158_336 - 64 - 1) in run("fit", *args).stderr
    # not where the answer is below it (a batch of 8 shares the pool)
    assert "serves a request" not in run("fit", "llama3.1-8b", "--hardware", "rtx-4090", "--engine", "sglang",
                                         "--batch", "8").stderr


def test_sglang_extra_buffer_under_pp_keeps_one_tracking_slot():
    # a review: under pp > 1 SGLang turns its overlap schedule off (overrides._pipeline_parallel_overlap_disable)
    # after choosing the extra-buffer strategy, so get_mamba_tracking_slots(extra_buffer=True, overlap=False) = 1: a
    # request holds 2 slots and the cap is K // (3 + 1). Nemotron-H at pp 2 on H100s: K = 14 slots a stage of S =
    # 27 of its 54 Mamba-2 layers · (256 · 64 · 256 · 4 + 3 · 20,480 · 2) = 456,302,592 bytes
    s = 27 * (256 * 64 * 256 * 4 + 3 * 20_480 * 2)
    assert s == 456_302_592
    row = fit("nemotron-h-56b", "--engine", "sglang", "--hardware", "h100-80gb", "--pp", "2", "--ctx", "8k")[0]
    slots = (_room(row) * 9 // 19 - s) // s
    # max_running_requests 14 // 4 = 3, run in pp = 2 micro-batches of max(3 // 2, 1) = 1 each (scheduler.py
    # pp_max_micro_batch_size; a review): 2 at once
    mrr = slots // 4
    assert slots == 14 and (row["max_batch"], row["binding"]) == (2 * max(mrr // 2, 1), "pp_max_micro_batch_size") \
        == (2, "pp_max_micro_batch_size")
    assert row["state_bytes_per_gpu"] == 2 * 2 * s
    show = json.loads(run("show", "nemotron-h-56b", "--engine", "sglang", "--pp", "2", "--ctx", "8k", "--batch", "2",
                          "-f", "json").stdout)["summary"]
    assert show["engine_state_bytes"] == 2 * show["state_bytes"]
    # a batch of 7 takes 14 slots: it fits (above the cap of 2, warned), where 3 a sequence said nothing did
    res = run("fit", "nemotron-h-56b", "--engine", "sglang", "--hardware", "h100-80gb", "--pp", "2", "--batch", "7")
    assert "its state pool" not in res.stderr and ("sglang runs at most 2 sequences at once by default "
                                                    "(pp_max_micro_batch_size); the rest wait, or raise it "
                                                    "(--pp-max-micro-batch-size") in res.stderr
    # pp with speculative decoding: SGLang needs SGLANG_ENABLE_PP_SPEC (a note), which refuses attention DP
    # (arg_groups/validation_hook.py check_pipeline_parallel_compat)
    args = ("deepseek-v3", "--engine", "sglang", "--hardware", "h200-141gb", "--tp", "8", "--weights-dtype", "fp8",
            "--mtp", "--ctx", "1024")
    assert "only with SGLANG_ENABLE_PP_SPEC=1 set" in run("fit", *args, "--pp", "2").stderr
    assert "SGLANG_ENABLE_PP_SPEC" not in run("fit", *args).stderr
    res = run("fit", *args, "--pp", "4", "--dp-attention", ok=False)
    assert res.exit_code == 1 and "which refuses attention DP" in res.stderr
    # a pool of one slot is said in the singular, and one of none names the check that raises
    one = run("fit", "nemotron-h-56b", "--hardware", "h200-141gb", "--engine", "sglang", "--reserve", "0.22").stderr
    none = run("fit", "nemotron-h-56b", "--hardware", "h200-141gb", "--engine", "sglang", "--reserve", "0.24").stderr
    assert "its state pool holds 1 slot, fewer than the 5" in " ".join(one.split())
    assert "not one sequence's states (_handle_max_mamba_cache" in " ".join(none.split())


def test_mtp_without_mtp_layers_keeps_vllms_startup_check_and_the_weights_shortfall_is_the_weights():
    # a review: --mtp on a model without MTP layers decodes plainly, so vLLM's start-up check still binds (it switched
    # the check off: 131,072 where 61,632 is the answer)
    args = ("gemma3-27b", "--engine", "vllm", "--hardware", "h100-80gb", "--reserve", "0.2")
    assert [(r["max_ctx"], r["binding"]) for r in (fit(*args)[0], fit(*args, "--mtp")[0])] == [(61_632, "startup")] * 2
    # a review: 'the weights leave the busiest GPU X over its budget' gave the row's Left (activations and a
    # token's cache off too, so X grew with --ctx); X is the weights less the budget: Llama 3.1 70B in bf16 on an RTX
    # 4090, 141,107,412,992 − (25,769,803,776 − 2,576,980,378) = 117,914,589,594 bytes, at any context
    for ctx in ("1", "128k"):
        res = run("fit", "llama3.1-70b", "--hardware", "rtx-4090", "-c", ctx, "--units", "bytes")
        assert "the weights leave the busiest GPU 117,914,589,594 B over its budget" in res.stderr
    assert 141_107_412_992 - (25_769_803_776 - 2_576_980_378) == 117_914_589_594


def test_fit_rows_carry_the_layout_page_states_and_encoder_settings():
    # a review: runs differing in --mla-cache, --block-size, --state-dtype or --enc-ctx gave rows with the same setting
    # keys (deepseek-v2 at tp 8, batch 4: max_ctx 163,840 latent, 30,926 expanded, told apart by nothing)
    def row(*args):
        return json.loads(run("fit", *args, "-f", "json").stdout)[0]

    latent, expanded = (row("deepseek-v2", "--hardware", "h200-141gb", "--tp", "8", "--batch", "4", "--mla-cache", m)
                        for m in ("latent", "expanded"))
    assert (latent["mla_cache"], expanded["mla_cache"]) == ("latent", "expanded")
    assert latent["max_ctx"] != expanded["max_ctx"]
    # the page the engine gives the model: vLLM raises a hybrid's attention page to hold a layer's state
    assert row("gemma3-27b", "--hardware", "h100-80gb", "--batch", "4", "--engine", "vllm", "--block-size", "16")[
        "block_size"] == 16
    assert row("nemotron-h-56b", "--hardware", "h100-80gb", "--gpus", "2", "--engine", "vllm", "--block-size", "16")[
        "block_size"] == 4128
    assert row("nemotron-h-56b", "--hardware", "h100-80gb", "--gpus", "2", "--state-dtype", "bf16")["state_dtype"] == "bf16"
    assert row("nemotron-h-56b", "--hardware", "h100-80gb", "--gpus", "2")["state_dtype"] == "fp32+bf16"
    assert row("whisper-large-v3", "--hardware", "h100-80gb", "--enc-ctx", "100")["enc_ctx"] == 100
    plain = row("llama3-8b", "--hardware", "h100-80gb")
    assert not {"mla_cache", "block_size", "state_dtype", "enc_ctx"} & set(plain)  # none applies: left out

"""#7: what one GPU holds under tensor, pipeline, data and expert parallelism. Every figure is written out from the
model's numbers with the rule it follows (kvcalc/costs/parallel.py states the rules and their engine sources)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from conftest import REFERENCE, run, spec
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.parallel import per_gpu, pp_stages, stages
from kvcalc.errors import KvcalcError
from kvcalc.settings import Settings

K = 1024


def row(*args: str) -> dict:
    return json.loads(run("compare", *args, "-f", "json").stdout)[0]


def test_gqa_kv_heads_split_then_replicate():
    # llama3-70b: 8 KV heads. tp 8: one head per GPU, 1/8 of the cache; tp 16: still one head per GPU (replicated)
    total = 80 * 2 * 8 * 128 * 128 * K * 2
    for tp, heads in ((1, 8), (2, 4), (8, 1), (16, 1)):
        r = row("llama3-70b", "--ctx", "128k", "--tp", str(tp))
        assert (r["gpus"], r["kv_cache_bytes_per_gpu"], r["kv_cache_bytes"]) == (tp, total * heads // 8, total)


def test_mla_latent_is_replicated_and_dp_attention_splits_the_batch():
    # deepseek-v2: the 512 + 64 latent is on every TP rank; with SGLang's DP attention a batch of 8 over tp 8
    # leaves one sequence's latent cache per GPU
    one = 60 * 576 * 128 * K * 2
    assert row("deepseek-v2", "--ctx", "128k", "--tp", "8")["kv_cache_bytes_per_gpu"] == one
    r = row("deepseek-v2", "--ctx", "128k", "--tp", "8", "--batch", "8", "--dp-attention")
    assert (r["kv_cache_bytes"], r["kv_cache_bytes_per_gpu"]) == (8 * one, one)
    res = run("compare", "llama3-8b", "--dp-attention", ok=False)
    assert res.exit_code == 1 and "--dp-attention: llama3-8b has no MLA layer" in res.stderr
    # the reason is kvcalc's, not SGLang's (a review: SGLang runs DP attention on GQA models too, qwen3_moe.py)
    assert "kvcalc models SGLang's DP attention for MLA models only" in res.stderr
    # an audit: with the expanded layout the heads were split over tp as well as the sequences (a 64th of the
    # cache on a GPU); a rank attends with every head, so one sequence's 128 heads of K (192) and V (128) per GPU
    seq = 60 * 128 * (192 + 128) * 4 * K * 2
    r = row("deepseek-v2", "--ctx", "4k", "--tp", "8", "--batch", "8", "--dp-attention", "--mla-cache", "expanded")
    assert (r["kv_cache_bytes"], r["kv_cache_bytes_per_gpu"]) == (8 * seq, seq) == (161_061_273_600, 20_132_659_200)


@pytest.mark.slow
@pytest.mark.parametrize("model, tp, message", [
    ("llama3-70b", 3, "--tp 3: every layer of llama3-70b has 64 query heads, which 3 ranks cannot split evenly"),
    ("llama3-70b", 128, "--tp 128: every layer of llama3-70b has 64 query heads"),
    ("falcon-7b", 2, "--tp 2: every layer of falcon-7b has 71 query heads"),
    # its Gated DeltaNet layers come first: 16 key heads (its full layers' 16 query heads fail too)
    ("qwen3-next-80b-a3b", 32, "--tp 32: qwen3-next-80b-a3b's linear layers have 16 key heads (linear_num_key_heads), "
                               "which 32 ranks cannot split evenly"),
    # an audit: Mamba-2's 8 groups over 16 ranks were reported as one a rank (vLLM 0.34.0's MambaMixer2 asserts
    # n_groups % tp == 0 or n_groups == 1); its 64 attention heads alone allowed tp 64
    ("nemotron-h-56b", 16, "--tp 16: nemotron-h-56b's mamba2 layers have 8 groups (n_groups), which 16 ranks can "
                           "neither split evenly nor replicate"),
    ("whisper-large-v3", 8, "--tp 8: every layer of whisper-large-v3 has 20 query heads"),
])
def test_a_tp_that_does_not_split_the_heads_is_refused(model, tp, message):
    # an audit: ceil(n / tp) heads a rank was reported for layouts vLLM refuses (ModelConfig.verify_with_parallel_config:
    # attention heads divisible by tp); tp 16 on llama3-70b's 8 K/V heads replicates them, which is allowed
    res = run("compare", model, "--tp", str(tp), ok=False)
    assert res.exit_code == 1 and message in res.stderr and "Traceback" not in res.stderr
    assert row("llama3-70b", "--tp", "16")["gpus"] == 16


def test_kv_heads_that_neither_split_nor_replicate_are_refused(tmp_path):
    # 12 query heads and 3 K/V heads over tp 2: 3 heads neither split in two nor replicate evenly (QKVParallelLinear)
    path = tmp_path / "kv3.yaml"
    path.write_text("name: kv3\nfamily: test\nd_model: 768\nn_layers: 2\nvocab_size: 100\nmax_context: 4096\n"
                    "ffn: {kind: dense, d_ff: 1024}\nlayer_groups:\n"
                    "  - layers: all\n    attention: {kind: gqa, n_heads: 12, n_kv_heads: 3, head_dim: 64}\n")
    res = run("compare", str(path), "--tp", "2", ok=False)
    assert "--tp 2: every layer of kv3 has 3 K/V heads, which 2 ranks can neither split evenly nor replicate" in res.stderr
    # tp 3: one K/V head a rank, 2 layers × (K, V) × 64 × 4096 tokens × 2 bytes
    assert row(str(path), "--tp", "3", "--ctx", "4k")["kv_cache_bytes_per_gpu"] == 2 * 2 * 1 * 64 * 4096 * 2


MAMBA2 = ("name: m2\nfamily: test\nd_model: 256\nn_layers: 2\nvocab_size: 100\nmax_context: 4096\n"
          "ffn: {kind: dense, d_ff: 512}\nlayer_groups:\n  - layers: all\n    attention: {kind: mamba2, "
          "mamba_num_heads: %d, mamba_head_dim: 16, ssm_state_size: 32, n_groups: %d, conv_kernel: 4}\n")


def test_mamba2_heads_split_and_its_groups_split_or_one_is_replicated(tmp_path):
    # vLLM 0.34.0 MambaMixer2: num_heads % tp == 0, and n_groups % tp == 0 or n_groups == 1 (then every rank holds
    # the one group: conv state (K − 1)·(H/tp·P + 2·N))
    one = tmp_path / "one.yaml"
    one.write_text(MAMBA2 % (8, 1))
    per_seq = 2 * ((8 // 4) * 16 * 32 + 3 * ((8 // 4) * 16 + 2 * 1 * 32))  # layers × (H/tp·P·N + (K − 1)·conv dim)
    assert row(str(one), "--tp", "4", "--ctx", "1k")["state_bytes_per_gpu"] == per_seq * 2 == 5_248  # bf16
    res = run("compare", str(one), "--tp", "16", ok=False)
    assert "--tp 16: every layer of m2 has 8 SSM heads (mamba_num_heads), which 16 ranks cannot split evenly" in res.stderr
    two = tmp_path / "two.yaml"
    two.write_text(MAMBA2 % (8, 2))
    res = run("compare", str(two), "--tp", "4", ok=False)
    assert "every layer of m2 has 2 groups (n_groups), which 4 ranks can neither split evenly nor replicate" in res.stderr
    assert row(str(two), "--tp", "2")["gpus"] == 2


@pytest.mark.slow
def test_jamba_mamba_layers_split_d_inner_over_tp():
    # an audit: Mamba-1's weights and state were whole on every rank; vLLM's MambaMixer shards in_proj, conv1d,
    # x_proj, dt_proj, A, D, out_proj and the state along d_inner (mamba1_state_shape: divide(intermediate_size, tp))
    jamba = str(REFERENCE / "models-2026" / "jamba-v0.1.json")
    d, d_inner, n, k, r, mamba_layers = 4096, 8192, 16, 4, 256, 28
    for tp in (1, 2, 8):
        state = mamba_layers * (d_inner // tp) * (n + k - 1) * 2  # SSM d_inner·N + conv (K − 1)·d_inner, bf16
        assert row(jamba, "--tp", str(tp), "--ctx", "4k")["state_bytes_per_gpu"] == state
    assert state == 1_089_536
    from kvcalc.attention import Layer
    from kvcalc.registry import load_model
    group = next(g for g in load_model(jamba).spec.groups if g.attention.kind == "mamba")
    layer = group.layer
    whole = sum(w.size for w in group.attention.weights(layer))
    for tp in (2, 4):
        rank = sum(w.size for w in group.attention.per_rank(layer, tp).weights(layer))
        # every weight split but Jamba's three inner RMSNorms (dt: R, B and C: N each), whole on every rank
        assert tp * rank == whole + (tp - 1) * (r + 2 * n)
    assert isinstance(layer, Layer) and layer.d_model == d
    res = run("compare", jamba, "--tp", "3", ok=False)
    assert "--tp 3: jamba-v0.1's group 0 layers have 8192 Mamba channels (d_inner), which 3 ranks cannot split" in res.stderr


def test_pipeline_stages_split_as_vllm_does():
    # vLLM get_pp_indices: n // pp each, the remainder one at a time to the stages before the last, backwards
    assert [len(r) for r in pp_stages(80, 3)] == [27, 27, 26]
    assert [len(r) for r in pp_stages(61, 4)] == [15, 15, 16, 15]
    assert [len(r) for r in pp_stages(32, 4)] == [8, 8, 8, 8]
    # the busiest llama3-70b stage under pp 3 is the first: 27 layers plus the embedding
    g = per_gpu(spec("llama3-70b"), Settings(ctx=4 * K, pp=3))
    assert (g.stage, len(g.layers), g.kv_cache_bytes) == (0, 27, 27 * 2 * 8 * 128 * 4 * K * 2)
    with pytest.raises(KvcalcError, match="--pp 100: llama3-8b has only 32 layers"):
        per_gpu(spec("llama3-8b"), Settings(ctx=1, pp=100))


def test_weights_per_gpu_under_tensor_parallelism_written_out():
    d, v, ff, layers = 8192, 128256, 28672, 80
    per_layer = d * 8 * 128 + 2 * d * 1 * 128 + 8 * 128 * d  # q (64/8 heads), k and v (8/8), o: one rank's share
    per_layer += 3 * d * (ff // 8) + 2 * d  # the FFN's hidden size split; two norms whole
    params = layers * per_layer + 2 * -(-v // 8) * d + d  # embedding and LM head split by vocabulary; final norm
    assert row("llama3-70b", "--ctx", "1k", "--tp", "8")["weights_bytes_per_gpu"] == 2 * params


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-v3.2"])
def test_mtp_layers_sit_on_the_last_stage(name):
    # one GPU holds everything --mtp counts: per-GPU figures equal the totals (they left the MTP layer out before)
    r = row(name, "--ctx", "128k", "--mtp")
    assert (r["kv_cache_bytes_per_gpu"], r["weights_bytes_per_gpu"]) == (r["kv_cache_bytes"], r["weights_bytes"])
    r = row(name, "--ctx", "128k", "--mtp", "--engine", "vllm")  # the engine's pages, its MTP layer's among them
    assert r["kv_cache_bytes_per_gpu"] == r["engine_kv_bytes"] > row(name, "--ctx", "128k", "--engine", "vllm")["engine_kv_bytes"]
    # pp 2 (61 layers: 31 + 30): the MTP layer joins the last stage's 30, so both stages hold 31 layers' caches
    m, plain = spec(name), Settings(ctx=4 * K, pp=2)
    with_mtp = Settings(ctx=4 * K, pp=2, mtp=True)
    per_layer = kv_cache(m, Settings(ctx=4 * K)).bytes // 61
    from kvcalc.costs.parallel import stages
    from kvcalc.costs.params import param_counts

    before, after = stages(m, plain), stages(m, with_mtp)
    assert [len(st.layers) for st in after] == [31, 30]
    assert per_gpu(m, with_mtp).kv_cache_bytes == 31 * per_layer
    # the last stage's weights grow by the MTP block's parameters (bf16), the first stage's not at all
    assert after[0].weights_bytes == before[0].weights_bytes
    mtp_params = param_counts(m, mtp=True).total - param_counts(m).total
    assert after[1].weights_bytes - before[1].weights_bytes == 2 * mtp_params
    # tp 8: the block splits like the last layer (its MoE's experts and its attention heads), eh_proj stays whole
    d = 7168
    eight = row(name, "--ctx", "4k", "--tp", "8", "--mtp")["weights_bytes_per_gpu"]
    assert eight - row(name, "--ctx", "4k", "--tp", "8")["weights_bytes_per_gpu"] > 2 * 2 * d * d  # at least eh_proj
    assert eight - row(name, "--ctx", "4k", "--tp", "8")["weights_bytes_per_gpu"] < 2 * mtp_params // 4


def test_expert_parallelism_below_tp_splits_each_expert():
    # an audit: qwen3-235b-a22b at tp 8 with ep 2 held 64 whole experts a GPU (229 GB); SGLang's FusedMoE holds
    # E / ep experts, each split over the tp / ep = 4 ranks that share it (num_local_experts = E // moe_ep_size,
    # intermediate_size // moe_tp_size): the same bytes as ep 1 or 8 here, 128 experts of 4,096 · 1,536 · 3 over 8
    per_gpu = {ep: row("qwen3-235b-a22b", "--ctx", "4k", "--tp", "8", "--ep", str(ep))["weights_bytes_per_gpu"]
               for ep in (1, 2, 4, 8)}
    assert set(per_gpu.values()) == {58_959_617_024}
    res = run("compare", "qwen3-235b-a22b", "--tp", "8", "--dp", "3", "--ep", "3", ok=False)
    assert "--ep 3: below --tp 8 it must divide tp" in res.stderr


def test_expert_parallelism_holds_whole_experts():
    # mixtral-8x7b over 8 data-parallel GPUs, ep 8: one whole expert (3 · 4096 · 14336) per GPU instead of all eight
    d, ff = 4096, 14336
    whole = row("mixtral-8x7b", "--ctx", "1k", "--dp", "8")["weights_bytes_per_gpu"]
    split = row("mixtral-8x7b", "--ctx", "1k", "--dp", "8", "--ep", "8")["weights_bytes_per_gpu"]
    assert whole - split == 2 * 32 * 7 * 3 * d * ff


@pytest.mark.slow
@pytest.mark.parametrize(("layout", "ok"), [(("--ep", "8"), False), (("--tp", "4", "--ep", "8"), False),
                                             (("--tp", "4", "--ep", "3"), False), (("--tp", "4", "--dp", "2", "--ep", "8"), True),
                                             (("--tp", "8", "--ep", "4"), True), (("--dp", "8", "--ep", "8"), True)])
def test_expert_parallel_ranks_are_gpus_of_the_layout(layout, ok):
    # found by an audit: --ep 8 alone counted 1 GPU holding one expert of eight, so fit put mixtral-8x7b (87 GiB) on
    # one 24 GiB card. The experts of a stage spread over its tp · dp GPUs (vLLM: ep = tp · dp; SGLang: ep divides
    # tp): ep must divide tp · dp
    res = run("compare", "mixtral-8x7b", "--ctx", "1k", *layout, ok=ok)
    if ok:
        return
    assert res.exit_code == 1 and "--ep" in res.stderr and "ep must divide tp · dp" in res.stderr
    fit = run("fit", "mixtral-8x7b", "--hardware", "rtx-4090", *layout, "--batch", "1", ok=False)
    assert fit.exit_code == 1 and "ep must divide tp · dp" in fit.stderr and "Traceback" not in fit.stderr
    with pytest.raises(KvcalcError, match="ep must divide"):
        Settings(ctx=1, ep=8)


def test_dp_attention_holds_the_whole_attention_weights():
    # found by an audit: SGLang's DP attention runs attention at attention-tp size tp / dp_size = 1, each rank holding
    # every head (DeepseekV2AttentionMLA splits over attn_tp_size), but kvcalc split the weights by tp. DeepSeek-V3
    # (d 7168, q_lora 1536, 128 heads of 128 + 64, kv_lora 512, v 128), one layer's attention:
    d, q_c, n_h, nope, rope, c, v = 7168, 1536, 128, 128, 64, 512, 128
    q_a, q_b, kv_a, kv_b, o = d * q_c, q_c * n_h * (nope + rope), d * (c + rope), c * n_h * (nope + v), n_h * v * d
    whole = q_a + q_c + q_b + kv_a + c + kv_b + o  # + the two latent norms
    rank = q_a + q_c + q_b // 8 + kv_a + c + kv_b // 8 + o // 8  # tp 8: heads split, down-projections replicated
    assert (whole, rank) == (187_107_328, 36_636_672)
    base = ("deepseek-v3", "--ctx", "32k", "--tp", "8", "--weights-dtype", "fp8")
    plain, dp_attn = row(*base)["weights_bytes_per_gpu"], row(*base, "--dp-attention")["weights_bytes_per_gpu"]
    # and the input embedding whole (an audit: SGLang's VocabParallelEmbedding(enable_tp=not
    # is_dp_attention_enabled())), 129,280 × 7,168, where tp 8 held 16,160 rows; the LM head stays split
    embedding = (129_280 - 129_280 // 8) * d
    assert dp_attn - plain == 61 * (whole - rank) + embedding == 9_178_710_016 + 810_844_160  # fp8: a byte a weight
    # fit then: 90% of the H200's 141 GiB, less weights and activations, over one 32k sequence's latent cache
    # (61 · 576 · 2 · 32,768 bytes): 17 sequences a GPU, 8 GPUs (176 before the whole attention, 144 before the
    # whole embedding)
    r = json.loads(run("fit", *base, "--dp-attention", "--hardware", "h200-141gb", "-f", "json").stdout)
    r = r[0] if isinstance(r, list) else r
    assert r["weights_bytes_per_gpu"] == dp_attn == 93_959_067_136 + 810_844_160 and r["max_batch"] == 136


def test_constant_states_split_by_heads():
    # qwen3-next: Gated DeltaNet heads split across 4 ranks: a quarter of each state; its 2 KV heads replicate at tp 4
    s = spec("qwen3-next-80b-a3b")
    g = per_gpu(s, Settings(ctx=128 * K, tp=4))
    c = kv_cache(s, Settings(ctx=128 * K))
    assert g.state_bytes * 4 == c.state_bytes == 36 * (32 * 128 * 128 + 3 * 8192) * 2
    assert g.kv_cache_bytes * 2 == c.bytes  # 2 KV heads over 4 ranks: one each


def test_data_parallel_replicas_share_the_batch():
    # 3 sequences over 2 replicas: the busier one holds 2
    r = row("llama3-8b", "--ctx", "4k", "--batch", "3", "--dp", "2")
    assert (r["gpus"], r["kv_cache_bytes_per_gpu"]) == (2, 2 * 32 * 2 * 8 * 128 * 4 * K * 2)


def test_fits_in_memory_asks_the_busiest_gpu():
    # llama3-70b in bf16 (141 GB of weights) does not fit one 80 GiB H100; over tp 8 it does
    assert row("llama3-70b", "--ctx", "8k", "--hardware", "h100-80gb", "--columns", "time")["fits_in_memory"] is False
    assert row("llama3-70b", "--ctx", "8k", "--hardware", "h100-80gb", "--columns", "time", "--tp", "8")["fits_in_memory"]


def test_show_reports_the_busiest_gpu():
    out = json.loads(run("show", "deepseek-v2", "--ctx", "32k", "--tp", "8", "--pp", "2", "-f", "json").stdout)["summary"]
    assert out["gpus"] == 16 and out["kv_cache_bytes_per_gpu"] == 30 * 576 * 32 * K * 2  # one stage: 30 of 60 layers


def test_tp_allreduce_estimate_counts_two_a_layer_and_the_embedding():
    # llama3-70b, tp 8, batch 16: 80 attention + 80 FFN all-reduces + the embedding's, each 16 · 8192 · 2 bytes
    # (Megatron-LM §3); NVLink 4 at 450 GB/s each way, ring: 2 · 7/8 of the bytes through each link
    r = json.loads(run("cost", "llama3-70b", "--ctx", "8k", "--tp", "8", "--batch", "16", "--hardware", "h100-80gb",
                       "-f", "json").stdout)
    summary = r["summary"]
    total = 161 * 16 * 8192 * 2
    assert summary["tp_allreduce_bytes"] == total
    assert summary["comm_seconds_per_token"] == pytest.approx(2 * 7 * total / (8 * 450e9), rel=1e-12)


def test_tp_allreduce_follows_the_blocks_each_layer_has():
    from kvcalc.costs.comm import decode_allreduce

    assert decode_allreduce(spec("llama3-70b"), Settings(ctx=1)) is None  # tp 1: nothing to reduce
    # Whisper's decoder: self-attention, cross-attention and FFN in each of 32 layers, d_model 1280
    assert decode_allreduce(spec("whisper-large-v3"), Settings(ctx=1, tp=2)).count == 1 + 32 * 3
    # Nemotron-H: 54 Mamba-2 and 10 attention layers (no FFN), 54 FFN-only layers
    assert decode_allreduce(spec("nemotron-h-56b"), Settings(ctx=1, tp=2)).count == 1 + 54 + 10 + 54
    # Falcon-7B (parallel_attn): attention and FFN outputs summed, then one all-reduce a layer, as vLLM's
    # FalconAttention skips its own (reduce_row_parallel_results); 32 layers + the embedding. Was 65 (an audit)
    falcon = spec("falcon-7b")
    assert falcon.parallel_attn and decode_allreduce(falcon, Settings(ctx=1, tp=2)).count == 1 + 32
    assert decode_allreduce(falcon.model_copy(update={"parallel_attn": None}), Settings(ctx=1, tp=2)).count == 1 + 2 * 32
    # data parallel replicas each reduce their own share of the batch: ceil(9 / 2) = 5 sequences
    assert decode_allreduce(spec("llama3-70b"), Settings(ctx=1, tp=2, dp=2, batch=9)).message_bytes == 5 * 8192 * 2
    # DeepSeek-V3 (61 MLA layers, d 7,168): 1 + 61 + 61 reductions; under SGLang's DP attention each rank runs the
    # attention and the embedding whole, so only the 61 FFN/MoE blocks reduce (an audit: 123 were counted)
    ds = spec("deepseek-v3")
    assert decode_allreduce(ds, Settings(ctx=1, tp=8)).count == 1 + 61 + 61
    dp_att = decode_allreduce(ds, Settings(ctx=1, tp=8, batch=8, dp_attention=True))
    assert (dp_att.count, dp_att.bytes) == (61, 61 * 8 * 7168 * 2)


@pytest.mark.slow
def test_roofline_under_tp_is_one_gpus_share_and_mla_latent_is_not_divided():
    from kvcalc.costs.traffic import decode_bytes
    from kvcalc.hardware import load_hardware

    h100 = load_hardware("h100-80gb")
    for name, kv_split in (("llama3-70b", 8), ("deepseek-v2", 1)):  # 8 KV heads split 8 ways; the latent replicated
        one = Settings(ctx=32 * K, batch=16, hardware=h100)
        eight = Settings(ctx=32 * K, batch=16, hardware=h100, tp=8)
        fig1, fig8 = (json.loads(run("cost", name, "--ctx", "32k", "--batch", "16", "--hardware", "h100-80gb",
                                     *(["--tp", "8"] if s.tp > 1 else []), "-f", "json").stdout) for s in (one, eight))
        parts = decode_bytes(spec(name), one)
        kv = kv_cache(spec(name), one).bytes
        flops = sum(fig1["flops"][p]["total"] for p in fig1["flops"] if p.startswith("decode_token")
                    and (p == "decode_token" or p.endswith("absorbed")))
        read = -(-parts["weights"] // 8) + kv // kv_split
        expected = max(-(-flops // 8) / h100.peak_flops_bf16, read / h100.memory_bandwidth)
        assert fig8["summary"]["decode_seconds_per_token"] == pytest.approx(expected, rel=1e-12), name
        assert fig8["summary"]["decode_seconds_per_token"] < fig1["summary"]["decode_seconds_per_token"]
    # data parallelism: each replica runs its share of the batch, all at once
    dp = json.loads(run("cost", "llama3-70b", "--ctx", "32k", "--batch", "16", "--hardware", "h100-80gb", "--dp", "2",
                        "-f", "json").stdout)["summary"]
    half = json.loads(run("cost", "llama3-70b", "--ctx", "32k", "--batch", "8", "--hardware", "h100-80gb",
                          "-f", "json").stdout)["summary"]
    assert dp["decode_seconds_per_token"] == half["decode_seconds_per_token"]
    assert dp["tokens_per_second"] == pytest.approx(2 * half["tokens_per_second"], rel=1e-12)


def explain(*args: str) -> dict:
    return json.loads(run("show", *args, "--explain", "-f", "json").stdout)


def test_explain_derives_the_busiest_gpus_cache_group_by_group():
    # llama3-70b at 32k, tp 8: one of the 8 KV heads a rank, 2·1·128 = 256 elements a token and layer, bf16,
    # 80 layers: 80 × 256 × 32,768 × 2 = 1,342,177,280 bytes, the summary's kv_cache_bytes_per_gpu
    doc = explain("llama3-70b", "--ctx", "32k", "--tp", "8")
    p = doc["derivation"]["per_gpu"]
    assert (p["gpus"], p["tp"], p["pp"], p["dp"], p["stage"], p["layers"]) == (8, 8, 1, 1, 0, list(range(80)))
    [g] = p["groups"]
    assert g["split"] == [{"symbol": "n_kv", "whole": 8, "per_rank": 1}] and g["substituted"] == "2·1·128"
    assert (g["elements_per_token_per_layer"], g["tokens_held"], g["sequences"]) == (256, 32 * K, 1)
    assert g["bytes_per_layer"] == 256 * 32 * K * 2 and g["bytes"] == p["kv_cache_bytes"] == 80 * 256 * 32 * K * 2
    assert p["kv_cache_bytes"] == doc["summary"]["kv_cache_bytes_per_gpu"] == 1_342_177_280
    assert p["weights_bytes"] == doc["summary"]["weights_bytes_per_gpu"]
    text = run("show", "llama3-70b", "--ctx", "32k", "--tp", "8", "--explain").stdout
    assert "one of 8 tp ranks: n_kv 8 → 1" in text and "KV cache per GPU: 1,342,177,280 bytes (1.25 GiB)" in text
    # one GPU: nothing to derive
    assert "per_gpu" not in explain("llama3-70b", "--ctx", "32k")["derivation"]


def test_explain_per_gpu_under_pipeline_data_and_dp_attention():
    # deepseek-v2, tp 8 × pp 2 × dp 2, batch 5: the latent (512 + 64) is whole on every rank; stage 1 holds layers
    # 30-59 (and the LM head: the busiest); a replica serves ceil(5 / 2) = 3 sequences
    p = explain("deepseek-v2", "--ctx", "32k", "--tp", "8", "--pp", "2", "--dp", "2", "--batch", "5")["derivation"]["per_gpu"]
    [g] = p["groups"]
    assert (p["gpus"], p["stage"], p["layers"], g["layers_here"]) == (32, 1, list(range(30, 60)), 30)
    assert g["split"] == [] and g["sequences_rule"] == "ceil(batch / dp)" and g["sequences"] == 3
    assert g["bytes"] == p["kv_cache_bytes"] == 30 * 576 * 32 * K * 3 * 2 == 3_397_386_240
    # SGLang's DP attention: a batch of 20 over tp 8 leaves ceil(20 / 8) = 3 sequences' latents a GPU
    p = explain("deepseek-v2", "--ctx", "32k", "--tp", "8", "--batch", "20", "--dp-attention")["derivation"]["per_gpu"]
    assert p["groups"][0]["sequences_rule"] == "ceil(ceil(batch / dp) / tp)" and p["groups"][0]["sequences"] == 3
    assert p["kv_cache_bytes"] == 60 * 576 * 32 * K * 3 * 2


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("gemma3-27b", "--ctx", "128k", "--tp", "4", "--pp", "3", "--kv-dtype", "int4", "--kv-quant", "g64"),
    ("qwen3-next-80b-a3b", "--ctx", "100000", "--tp", "4", "--engine", "vllm", "--batch", "3"),
    ("whisper-large-v3", "--ctx", "448", "--tp", "2", "--pp", "2"),
    ("llama4-scout", "--ctx", "8193", "--tp", "8", "--ep", "8", "--engine", "vllm"),
    ("llama4-scout", "--ctx", "8193", "--tp", "8", "--ep", "4", "--engine", "sglang"),
])
def test_explain_per_gpu_groups_sum_to_the_gpus_figures(args):
    # whatever the layout: the groups' bytes add up to the busiest GPU's cache and states, as compare reports them
    doc = explain(*args)
    p = doc["derivation"]["per_gpu"]
    assert sum(g["bytes"] for g in p["groups"]) == p["kv_cache_bytes"] == doc["summary"]["kv_cache_bytes_per_gpu"]
    assert sum(g["state_bytes"] for g in p["groups"]) == p["state_bytes"] == doc["summary"]["state_bytes_per_gpu"]
    assert all(g["bytes"] == g["layers_here"] * g["bytes_per_layer"] for g in p["groups"])
    assert sum(g["layers_here"] for g in p["groups"]) >= len(p["layers"])  # every layer of the stage (MTP: more)
    r = json.loads(run("compare", *args, "--explain", "-f", "json").stdout)[0]
    assert r["derivation"]["per_gpu"] == p and r["kv_cache_bytes_per_gpu"] == p["kv_cache_bytes"]


def test_readme_per_gpu_example_is_what_show_prints():
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ kvcalc show llama3-70b --ctx 8k --tp 8 --explain\n...\n")[1].split("```")[0]
    out = run("show", "llama3-70b", "--ctx", "8k", "--tp", "8", "--explain").stdout
    assert block and block in out


def test_vllm_splits_routed_experts_over_dp_and_tp():
    # vLLM's MoE layers span the data-parallel ranks (fused_moe/config.py FusedMoEParallelConfig.make:
    # flatten_tp_across_dp, tp_size = dp · tp when expert parallelism is off): deepseek-v3 at tp 4, dp 2 holds a
    # 2048 / 8 = 256-wide slice of each of the 58 MoE layers' 256 routed experts (3 matrices of 7,168 × d_ff),
    # not the 512-wide slice of tp 4 alone; shared experts, attention and the rest as at tp 4
    model = spec("deepseek-v3")
    plain = per_gpu(model, Settings(ctx=8192, tp=4, dp=2))
    vllm = per_gpu(model, Settings(ctx=8192, tp=4, dp=2, engine="vllm"))
    assert plain.weights_bytes - vllm.weights_bytes == 2 * 58 * 256 * 3 * 7168 * (512 - 256) == 163_477_192_704
    # at dp 1 nothing changes; a dense model neither (under expert parallelism: the next test)
    assert per_gpu(model, Settings(ctx=8192, tp=4, dp=1, engine="vllm")).weights_bytes \
        == per_gpu(model, Settings(ctx=8192, tp=4, dp=1)).weights_bytes
    llama = spec("llama3-70b")
    assert per_gpu(llama, Settings(ctx=8192, tp=4, dp=2, engine="vllm")).weights_bytes \
        == per_gpu(llama, Settings(ctx=8192, tp=4, dp=2)).weights_bytes


def test_vllm_keeps_shared_experts_whole_under_sequence_parallel_moe():
    # an audit: with expert parallelism, tp > 1 and dp > 1 vLLM runs its MoE sequence-parallel
    # (ParallelConfig.use_sequence_parallel_moe, the default all2all backend) and deepseek_v2.py builds the shared
    # experts with disable_tp: each rank holds DeepSeek-V3's shared expert whole, 3 · 7,168 · 2,048, not a quarter,
    # in each of its 58 MoE layers
    model = spec("deepseek-v3")
    at = dict(ctx=8192, tp=4, dp=2, ep=8)
    vllm = per_gpu(model, Settings(**at, engine="vllm")).weights_bytes
    plain = per_gpu(model, Settings(**at)).weights_bytes
    assert vllm - plain == 58 * 3 * 7168 * (2048 - 512) * 2 == 3_831_496_704
    assert vllm == 177_413_893_120
    # Qwen3-Next's shared expert of 512 too (qwen3_next.py), its gate whole anyway: 48 layers · 3 · 2,048 · (512 - 128)
    q = spec("qwen3-next-80b-a3b")
    assert per_gpu(q, Settings(**at, engine="vllm")).weights_bytes - per_gpu(q, Settings(**at)).weights_bytes \
        == 48 * 3 * 2048 * (512 - 128) * 2
    # dp 1 (no sequence parallelism), or a model whose file splits them (GLM-4.7's glm4_moe.py): split over tp; GLM's
    # only difference is its fp32 routers (89 MoE layers of 160 experts, d = 5,120, and their biases)
    one = dict(ctx=8192, tp=8, dp=1, ep=8)
    assert per_gpu(model, Settings(**one, engine="vllm")).weights_bytes == per_gpu(model, Settings(**one)).weights_bytes
    glm = spec("glm-4.7")
    assert per_gpu(glm, Settings(**at, engine="vllm")).weights_bytes - per_gpu(glm, Settings(**at)).weights_bytes \
        == 89 * (5120 * 160 + 160) * 2


def test_sglang_gives_the_extra_layers_to_the_last_stages():
    # sglang/srt/distributed/utils.py get_pp_indices: the last n % pp stages take one layer more (vLLM: the stages
    # before the last). DeepSeek-V3's 61 layers over 2 stages: vLLM [31, 30], SGLang [30, 31], the last with the head
    assert [len(r) for r in pp_stages(61, 2)] == [31, 30]
    assert [len(r) for r in pp_stages(61, 2, "sglang")] == [30, 31]
    assert [len(r) for r in pp_stages(61, 4, "sglang")] == [15, 15, 15, 16]
    assert [len(r) for r in pp_stages(80, 3, "sglang")] == [26, 27, 27]
    g = per_gpu(spec("deepseek-v3"), Settings(ctx=1, tp=8, pp=2, engine="sglang"))
    # with SGLang's absorbed w_kc, w_vc beside kv_b_proj (bf16): 31 layers · 16 heads · (128 + 128) · 512
    assert (g.stage, len(g.layers), g.weights_bytes) == (1, 31, 90_334_885_376 + 31 * 16 * 256 * 512 * 2)


def test_vllm_builds_embedding_and_head_on_every_stage_for_some_models():
    # an audit: vLLM's gpt_oss.py (and gemma3, qwen3_moe, qwen3_next, mixtral, ...) builds the embedding, the final
    # norm and the LM head in __init__ without asking which pipeline stage it is, so every stage holds them; llama.py,
    # qwen2.py and deepseek_v2.py build them on the first and last stage only. gpt-oss-20b at pp 2: the first stage
    # holds the head too and the last the embedding, 201,088 · 2,880 each
    s2 = Settings(ctx=1, pp=2)
    oss = spec("gpt-oss-20b")
    assert per_gpu(oss, Settings(ctx=1, pp=2, engine="vllm")).weights_bytes == 22_073_026_944
    # without an engine the last stage is the larger by its norm (2,880 · 2 bytes); under vLLM both stages hold
    # embedding, head and norm: the first one table and a norm more than before, the last one table more
    first, last = (st.weights_bytes for st in stages(oss, s2))
    assert last - first == 2_880 * 2
    assert [st.weights_bytes for st in stages(oss, Settings(ctx=1, pp=2, engine="vllm"))] == \
        [first + 201_088 * 2_880 * 2 + 2_880 * 2, last + 201_088 * 2_880 * 2]
    # Gemma 3's head is its embedding: each middle stage of 16 layers adds one table and the norm, no second copy
    gemma = per_gpu(spec("gemma3-27b"), Settings(ctx=1, pp=4, engine="vllm"))
    assert (len(gemma.layers), gemma.weights_bytes) == (16, 16_032_025_088)
    # a model whose vLLM file asks (Llama 3): unchanged
    llama = spec("llama3-70b")
    assert per_gpu(llama, Settings(ctx=1, tp=4, pp=2, engine="vllm")).weights_bytes \
        == per_gpu(llama, Settings(ctx=1, tp=4, pp=2)).weights_bytes


def _imported(cfg: dict):
    from kvcalc.hf import spec_from_config

    return spec_from_config(cfg, "config.json", "m")[0]


def _reference(path: str):
    return _imported(json.loads((REFERENCE / path).read_text()))


def _stage_delta(model, **at) -> list[int]:
    """Each stage's weights under vLLM less kvcalc's engine-free figure (with vLLM's vocabulary padding, none where
    the vocabulary is a multiple of 64)."""
    vllm = [st.weights_bytes for st in stages(model, Settings(ctx=1, engine="vllm", **at))]
    return [v - st.weights_bytes for v, st in zip(vllm, stages(model, Settings(ctx=1, **at)))]


def test_vllm_builds_the_embedding_on_every_stage_and_the_head_on_the_last_for_qwen35():
    # an audit: qwen3_5.py and models/qwen3_5/nvidia/model.py (Qwen3_5Model) build embed_tokens with no rank test,
    # the final norm and lm_head on the last stage only: each stage after the first holds an embedding more,
    # 248,320 (a multiple of 64) · 2,048 bf16, and the busiest stage at pp 4 becomes the last
    q = _reference("configs-extra-2/qwen3.5-35b-a3b.json")
    table = 248_320 * 2048 * 2
    assert _stage_delta(q, pp=4) == [0, table, table, table]
    assert _stage_delta(q, pp=2, tp=2) == [0, table // 2]
    g = per_gpu(q, Settings(ctx=1, pp=4, engine="vllm"))
    assert (g.stage, g.weights_bytes) == (3, 18_849_531_520)
    # tied, the last stage's embedding is its head: no second table there (kvcalc's own copy without an engine)
    tied = _imported({**json.loads((REFERENCE / "configs-extra-2/qwen3.5-35b-a3b.json").read_text()),
                      "tie_word_embeddings": True})
    assert _stage_delta(tied, pp=4) == [0, table, table, 0]


@pytest.mark.parametrize("path, d, vocab", [
    ("configs-extra-4/command-r7b-12-2024.json", 4096, 256_000),  # commandr.py: no lm_head, logits from the embedding
    ("configs-extra-6/minicpm3-4b.json", 2560, 73_448),  # minicpm.py: embedding, norm, head (tied) unconditional
])
def test_vllm_builds_embedding_norm_and_head_on_every_stage_for_cohere2_and_minicpm3(path, d, vocab):
    # an audit: each stage before the last holds the final norm (d) and each middle one the embedding (the tied head),
    # its vocabulary padded to a multiple of 64 (73,448 -> 73,472) as every vLLM table is
    model = _reference(path)
    assert model.tie_embeddings and model.vocab_size == vocab
    padded = -(-vocab // 64) * 64
    table, pad, norm = padded * d * 2, (padded - vocab) * d * 2, d * 2
    assert _stage_delta(model, pp=4) == [pad + norm, table + norm, table + norm, pad]


def test_vllm_builds_gemma2s_embedding_and_norm_on_every_stage():
    # gemma2.py: embed_tokens and norm unconditional, logits from the embedding (no lm_head); Gemma-2-9B's sizes
    cfg = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256_000,
           "max_position_embeddings": 8192, "sliding_window": 4096, "query_pre_attn_scalar": 256}
    table, norm = 256_000 * 3584 * 2, 3584 * 2
    model = _imported(cfg)
    assert _stage_delta(model, pp=4) == [norm, table + norm, table + norm, 0]
    assert per_gpu(model, Settings(ctx=1, pp=4, engine="vllm")).weights_bytes == 6_195_309_568


def test_vllm_sequence_parallel_moe_builds_more_blocks_whole():
    # an audit: with --ep, tp 2 and dp 2 (sequence-parallel MoE) these vLLM files build blocks whole that kvcalc
    # splits elsewhere: each rank holds the whole width where it held half
    at = dict(ctx=1, tp=2, dp=2, ep=4)

    def whole_minus_split(model, **over) -> int:
        return per_gpu(model, Settings(**{**at, **over}, engine="vllm")).weights_bytes \
            - per_gpu(model, Settings(**{**at, **over})).weights_bytes

    # Qwen3.5 (Qwen3NextSparseMoeBlock's shared expert, qwen2_moe.Qwen2MoeMLP: disable_tp or is_sequence_parallel),
    # at any pp: 40 layers · 3 · 2,048 · 512 / 2
    q = _reference("configs-extra-2/qwen3.5-35b-a3b.json")
    assert whole_minus_split(q) == 40 * 3 * 2048 * 256 * 2 == 125_829_120
    # GLM-5 (deepseek_v2.py's DeepseekV2MoE: shared experts whole; 75 MoE layers of 2,048) and DeepSeek-V3.2 on CUDA
    # (models/deepseek_v32/nvidia/model.py: the 3 dense layers' MLP too, with one pipeline stage)
    glm = _reference("configs-extra/glm-5.json")
    assert whole_minus_split(glm) == (75 * 3 * 6144 * 1024 + 3 * 3 * 6144 * 6144) * 2
    v32 = spec("deepseek-v3.2")  # shared experts whole (58 MoE layers of 2,048) and the 3 dense layers' 18,432
    assert whole_minus_split(v32) == (58 * 3 * 7168 * 1024 + 3 * 3 * 7168 * 9216) * 2 == 3_743_416_320
    # use_sequence_parallel needs pipeline_parallel_size == 1: at pp 2 the first stage (layers 0-30) holds the dense
    # layers split, its 28 MoE layers' shared experts whole still
    assert _stage_delta(v32, tp=2, dp=2, ep=4, pp=2)[0] == 28 * 3 * 7168 * 1024 * 2
    # Kimi Linear on CUDA (models/kimi_k3/nvidia/model.py): shared experts (26 MoE layers of 1,024) and dense layer 0
    # (9,216) whole, with one pipeline stage only
    kimi = _reference("configs-extra-3/kimi-linear-48b-a3b-instruct.json")
    assert whole_minus_split(kimi) == (26 * 3 * 2304 * 512 + 3 * 2304 * 4608) * 2 == 247_726_080
    assert whole_minus_split(kimi, pp=3) == 0
    # MoE Nemotron-H (NemotronHMoE's shared_experts, NemotronHMLP with disable_tp=is_sequence_parallel): up and down
    nemotron = _imported({"model_type": "nemotron_h", "hidden_size": 256, "intermediate_size": 512,
                          "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 1024,
                          "max_position_embeddings": 65536, "hybrid_override_pattern": "M-M*-E", "mamba_num_heads": 8,
                          "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
                          "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
                          "moe_shared_expert_intermediate_size": 256, "n_shared_experts": 1})
    assert whole_minus_split(nemotron) == 2 * 256 * 128 * 2


def test_vllm_pads_kimi_linears_routed_experts_to_256_a_rank():
    # models/kimi_k3/nvidia/model.py KimiMoE: without expert parallelism, an expert whose tp share would be under
    # min_moe_intermediate_per_partition (256) is padded to 256 · tp: at tp 8 Kimi Linear's 1,024 becomes 2,048, so
    # each rank holds 256 of it, not 128, in each of its 26 MoE layers' 256 experts
    kimi = _reference("configs-extra-3/kimi-linear-48b-a3b-instruct.json")

    def padding(**at) -> int:
        return per_gpu(kimi, Settings(ctx=1, engine="vllm", **at)).weights_bytes - per_gpu(kimi, Settings(ctx=1, **at)).weights_bytes

    assert padding(tp=8) == 26 * 256 * 3 * 2304 * (256 - 128) * 2 == 11_777_605_632
    # none at tp 4 (1,024 / 4 = 256), nor with expert parallelism (whole experts), nor under SGLang
    assert padding(tp=4) == padding(tp=8, ep=8) == 0
    # SGLang pads none (its only difference: the absorbed w_kc, w_vc of the MLA layers, 7 of 27, 32 / 8 heads a rank)
    assert per_gpu(kimi, Settings(ctx=1, tp=8, engine="sglang")).weights_bytes \
        - per_gpu(kimi, Settings(ctx=1, tp=8)).weights_bytes == 7 * 4 * (128 + 128) * 512 * 2


def test_vllm_refuses_pipeline_stages_for_gemma3n():
    # Gemma3nForCausalLM and Gemma3nForConditionalGeneration do not implement SupportsPP (config/model.py refuses)
    path = REFERENCE / "configs-gemma3n" / "gemma-3n-e2b.json"
    r = run("compare", str(path), "--ctx", "4k", "--engine", "vllm", "--pp", "2", ok=False)
    assert r.exit_code == 1 and "--pp 2 --engine vllm: vLLM runs gemma-3n-e2b without pipeline parallelism" in r.stderr
    run("compare", str(path), "--ctx", "4k", "--pp", "2")  # no engine: kvcalc's own stages


def test_vllm_refuses_a_tied_falcon_h1_with_pipeline_stages(tmp_path):
    # falcon_h1.py builds embed_tokens on the first stage only and, tied, ties the last stage's lm_head to it: an
    # AttributeError on the PPMissingLayer there (an audit ran the tie). Untied (the published configs) it loads.
    cfg = json.loads((REFERENCE / "configs-extra-6" / "falcon-h1-0.5b-base.json").read_text())
    assert cfg.get("tie_word_embeddings") is False
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    r = run("compare", str(path), "--ctx", "4k", "--engine", "vllm", "--pp", "2", ok=False)
    assert r.exit_code == 1 and "a tied Falcon-H1 does not load with pipeline stages" in r.stderr
    run("compare", str(path), "--ctx", "4k", "--engine", "vllm")
    run("compare", str(REFERENCE / "configs-extra-6" / "falcon-h1-0.5b-base.json"), "--ctx", "4k", "--engine", "vllm", "--pp", "2")


def _sglang_delta(model, **at) -> list[int]:
    """Each stage's weights under SGLang less kvcalc's engine-free figure."""
    sglang = [st.weights_bytes for st in stages(model, Settings(ctx=1, engine="sglang", **at))]
    return [v - st.weights_bytes for v, st in zip(sglang, stages(model, Settings(ctx=1, **at)))]


def test_sglang_builds_an_untied_head_on_every_stage_for_some_models():
    # an audit of SGLang 0.5.23: llama.py (Llama, Mistral, Phi-3), nemotron_nas.py, glm4_moe.py, mixtral.py,
    # gpt_oss.py, granitemoehybrid.py and qwen3_moe.py build their ParallelLMHead with no is_last_rank test: the
    # first stage holds a head too (Llama 3 70B: 128,256 rows, a multiple of 64, · 8,192 bf16), and becomes the busiest
    llama = spec("llama3-70b")
    assert _sglang_delta(llama, pp=2) == [128_256 * 8192 * 2, 0]
    g = per_gpu(llama, Settings(ctx=1, pp=2, engine="sglang"))
    assert (g.stage, g.weights_bytes) == (0, 72_655_044_608)
    assert _sglang_delta(spec("qwen3-235b-a22b"), pp=2, tp=2) == [151_936 // 2 * 4096 * 2, 0]  # 47 + 47 layers
    # Qwen3's dense file and Qwen3-VL's MoE file (qwen3_vl_moe.py, family qwen3_vl) ask which stage they are:
    # unchanged under SGLang, while vLLM's Qwen3-VL MoE builds embedding, norm and head on every stage
    assert _sglang_delta(spec("qwen3-32b"), pp=2) == [0, 0]
    vl = _reference("configs-extra/qwen3-vl-30b-a3b-instruct.json")
    assert vl.family == "qwen3_vl" and vl.vocab_size % 64 == 0 and not vl.tie_embeddings
    assert _sglang_delta(vl, pp=2) == [0, 0]
    table = vl.vocab_size * vl.d_model * 2
    assert _stage_delta(vl, pp=2) == [table + vl.d_model * 2, table]
    # tied, llama.py's head is the stage's embedding, which the last stage does not build: refused
    r = run("compare", "llama3.2-1b", "--ctx", "4k", "--engine", "sglang", "--pp", "2", ok=False)
    assert r.exit_code == 1 and "SGLang ties llama3.2-1b's head to the embedding, which its last pipeline stage" in r.stderr
    run("compare", "llama3.2-1b", "--ctx", "4k", "--engine", "sglang")


def test_sglang_builds_minimax_m2s_embedding_on_every_stage():
    m2 = _reference("configs-extra/minimax-m2.5.json")
    padded = -(-m2.vocab_size // 64) * 64
    routers = 31 * (m2.d_model * 256 + 256) * 2  # each stage's 31 MoE routers in fp32 (minimax_m2.py), 2 bytes more
    assert _sglang_delta(m2, pp=2) == [(padded - m2.vocab_size) * m2.d_model * 2 + routers,
                                      padded * m2.d_model * 2 + (padded - m2.vocab_size) * m2.d_model * 2 + routers]


@pytest.mark.parametrize("model", ["gemma3-27b", "gpt2", "qwen3-next-80b-a3b", "llama4-scout"])
def test_sglang_refuses_pipeline_stages_where_its_model_file_has_none(model):
    # model_runner.py asserts "Pipeline Parallel is not compatible with this model" when the forward takes no
    # pp_proxy_tensors (gemma3_mm.py, gpt2.py, qwen3_next.py, mllama4.py, and commandr.py, falcon_h1.py, gemma2.py,
    # gemma3n, minicpm3.py, olmo2.py, starcoder2.py)
    r = run("compare", model, "--ctx", "4k", "--engine", "sglang", "--pp", "2", ok=False)
    assert r.exit_code == 1 and f"SGLang runs {model} without pipeline parallelism" in r.stderr
    run("compare", model, "--ctx", "4k", "--engine", "vllm", "--pp", "2")


def test_sglang_holds_gemmas_embedding_whole_and_unpadded():
    # gemma3_causal.py: Gemma3TextScaledWordEmbedding is an nn.Embedding, whole on every tp rank, the tied head too:
    # Gemma 3 27B at tp 8 holds 262,208 rows of 5,376 where kvcalc's split gives ceil(262,208 / 8) = 32,776
    assert _sglang_delta(spec("gemma3-27b"), tp=8) == [(262_208 - 32_776) * 5376 * 2] == [2_466_852_864]
    # Gemma 4 under pipeline stages: the first stage's embedding whole, the last stage's head its own and split (and
    # each global layer's V slot, 2,816 · 512 a rank: layers 5 and 11 on the first stage, 17, 23 and 29 on the last)
    g4 = spec("gemma4-26b-a4b")
    v_slot = 2816 * 512 * 2
    assert _sglang_delta(g4, tp=2, pp=2) == [262_144 // 2 * 2816 * 2 + 2 * v_slot, 3 * v_slot]


def test_sglang_whisper_holds_a_whole_embedding_beside_its_head():
    # whisper.py: the decoder's embed_tokens is an nn.Embedding (51,866 rows, whole), proj_out a ParallelLMHead
    # (51,904 padded rows, split) filled from the same tensor: kvcalc's tied spec counts one table without an engine
    w = spec("whisper-large-v3")
    assert _sglang_delta(w) == [51_904 * 1280 * 2]
    assert _sglang_delta(w, tp=2) == [(51_866 + 51_904 // 2 - 25_933) * 1280 * 2]  # ceil(51,866 / 2) = 25,933


def test_sglang_holds_falcon_h1s_head_in_fp32():
    # falcon_h1.py: self.lm_head = self.lm_head.float(): 4 bytes a parameter whatever the weights' dtype
    f = _reference("configs-extra-6/falcon-h1-34b-base.json")
    assert (f.vocab_size, f.d_model, f.tie_embeddings) == (261_120, 5120, False)
    assert _sglang_delta(f) == [261_120 * 5120 * (4 - 2)]
    assert _sglang_delta(f, tp=4) == [261_120 // 4 * 5120 * (4 - 2)]


def test_engines_keep_the_absorbed_mla_up_projections_beside_kv_b_proj():
    # SGLang (deepseek_weight_loader.py post_load_weights): w_kc and w_vc, contiguous bf16 copies of kv_b_proj's
    # halves, beside it (the MHA prefill runs it): DeepSeek-V3 at tp 8, 61 layers · 16 heads · (128 + 128) · 512
    v3 = spec("deepseek-v3")
    copies = 61 * 16 * 256 * 512 * 2
    assert _sglang_delta(v3, tp=8) == [copies] == [255_852_544]
    assert _sglang_delta(v3, tp=8, dp=1, dp_attention=True) == [8 * copies]  # whole attention: all 128 heads
    # an fp8 checkpoint's kv_b_proj is dequantized to bf16 first: the copies take 2 bytes a value still; and a byte more
    # a parameter for what SGLang keeps in bf16 (the embedding's and LM head's shares, 129,280 / 8 rows of 7,168
    # each, and the 58 routers: not quantized)
    bf16_rest = 2 * (129_280 // 8) * 7168 + 58 * (7168 * 256 + 256)
    assert _sglang_delta(v3, tp=8, weights_dtype="fp8") == [copies + bf16_rest]
    # vLLM (MLAAttention.process_weights_after_loading): W_UK_T and W_UV are views of an unquantized kv_b_proj, a
    # dequantized bf16 copy of a quantized one
    fp8 = Settings(ctx=1, tp=8, weights_dtype="fp8")
    assert per_gpu(v3, Settings(ctx=1, tp=8, engine="vllm")).weights_bytes == per_gpu(v3, Settings(ctx=1, tp=8)).weights_bytes
    # and the same bf16_rest: vLLM quantizes linear layers and experts only (Fp8Config.get_quant_method)
    assert per_gpu(v3, replace(fp8, engine="vllm")).weights_bytes - per_gpu(v3, fp8).weights_bytes == copies + bf16_rest


def test_sglang_pads_the_vocabulary_to_64_tp_where_64_does_not_split():
    # vocab_parallel_embedding.py: padding_size *= tp_size when pad(V, 64) % tp != 0. MiniCPM3's 73,448 rows: 73,472
    # by 64, which 5 does not divide, so 73,600 by 320, 14,720 a rank where ceil(73,472 / 5) = 14,695 (tied: one table)
    m = _reference("configs-extra-6/minicpm3-4b.json")
    sglang, vllm = (stages(m, Settings(ctx=1, tp=5, engine=e))[0].weights_bytes for e in ("sglang", "vllm"))
    assert sglang - vllm == (14_720 - 14_695) * 2560 * 2


def test_vllm_refuses_minicpm3_whose_file_caches_expanded_keys_and_values():
    # vLLM's minicpm3.py runs ordinary attention over kv_b_proj's expanded keys and values (values padded to the keys'
    # 96): not the latent that SGLang (and kvcalc) cache
    path = str(REFERENCE / "configs-extra-6" / "minicpm3-4b.json")
    r = run("compare", path, "--ctx", "4k", "--engine", "vllm", ok=False)
    assert r.exit_code == 1 and "--engine vllm: vLLM caches minicpm3-4b's expanded keys and values" in r.stderr
    run("compare", path, "--ctx", "4k", "--engine", "sglang")


def test_sglang_refuses_dp_attention_for_mla_files_without_it():
    for path in ("configs-extra-6/minicpm3-4b.json", "configs-extra-3/kimi-linear-48b-a3b-instruct.json"):
        for engine in (("--engine", "sglang"), ()):  # --dp-attention is SGLang's scheme, with an engine or not
            r = run("compare", str(REFERENCE / path), "--ctx", "4k", *engine, "--tp", "2", "--dp-attention", ok=False)
            assert r.exit_code == 1 and "--dp-attention: SGLang has no DP attention for" in r.stderr


def test_sglang_fuses_qwen3_next_shared_expert_under_expert_parallelism():
    # qwen2_moe.py on CUDA fuses the shared expert into FusedMoE: each expert-parallel rank holds it at tp / ep
    # width, 512 / (8 / 8) = 512 rather than 512 / 8, in each of 48 layers (3 · 2,048 · (512 − 64) more)
    q = spec("qwen3-next-80b-a3b")
    assert _sglang_delta(q, tp=8, ep=8) == [3 * 2048 * (512 - 64) * 48 * 2] == [264_241_152]
    assert _sglang_delta(q, tp=8) == [0]


def test_engines_build_a_v_projection_where_gemma4s_values_are_its_keys():
    # vLLM (gemma4.py) and SGLang (gemma4_causal.py: should_dup_k_to_v) keep a V slot in the fused qkv_proj of an
    # attention_k_eq_v layer and load the key's weights into it: Gemma 4 26B's 5 global layers, 2 KV heads of 512
    # (one a rank from tp 2, replicated), each d = 2,816 wide
    g4 = spec("gemma4-26b-a4b")
    for engine in ("vllm", "sglang"):
        for tp, heads in ((1, 2), (2, 1), (8, 1)):
            one = per_gpu(g4, Settings(ctx=1, tp=tp, engine=engine)).weights_bytes
            assert one - per_gpu(g4, Settings(ctx=1, tp=tp)).weights_bytes - _embedding_gap(g4, tp, engine) \
                == 5 * 2816 * heads * 512 * 2, (engine, tp)


def _embedding_gap(model, tp: int, engine: str) -> int:
    """What SGLang's whole, unpadded Gemma embedding adds over kvcalc's split one (vLLM: nothing, 262,144 rows a
    multiple of 64)."""
    return (model.vocab_size - -(-model.vocab_size // tp)) * model.d_model * 2 if engine == "sglang" else 0


def test_vllm_refuses_the_tps_its_files_cannot_build():
    # an audit: Falcon-H1's Mamba-2 mixer beside the attention has 2 groups (MambaMixer2 asserts on tp 4); gpt-oss's
    # file divides its 8 KV heads by tp with no floor of one (a ZeroDivisionError above tp 8); a vocabulary padded to
    # 64 must split evenly (VocabParallelEmbedding asserts: MiniCPM3's 73,472 rows over 5 ranks)
    falcon = str(REFERENCE / "configs-extra-6" / "falcon-h1-34b-base.json")
    r = run("compare", falcon, "--ctx", "4k", "--tp", "4", ok=False)
    assert r.exit_code == 1 and "every parallel mixer of falcon-h1-34b-base has 2 groups (n_groups)" in r.stderr
    run("compare", falcon, "--ctx", "4k", "--tp", "2")
    r = run("compare", "gpt-oss-120b", "--ctx", "4k", "--tp", "16", "--engine", "vllm", ok=False)
    assert r.exit_code == 1 and "divides gpt-oss-120b's 8 KV heads by tp with no floor of one" in r.stderr
    run("compare", "gpt-oss-120b", "--ctx", "4k", "--tp", "16", "--engine", "sglang")
    model = _reference("configs-extra-6/minicpm3-4b.json")
    with pytest.raises(KvcalcError, match="padded to 73,472 .* and 5 does not divide it"):
        per_gpu(model, Settings(ctx=1, tp=5, engine="vllm"))
    per_gpu(spec("gpt2"), Settings(ctx=1, tp=3, engine="vllm"))  # 50,304 rows: 3 divides them


def test_sglang_gives_nemotron_nas_layers_without_attention_a_buffer():
    # an audit: nemotron_nas.py builds attention in 49 of Llama-3.3-Nemotron-Super-49B's 80 layers, but SGLang's plain
    # MHATokenToKVPool has a buffer in every layer (layer_num = num_hidden_layers) of 8 KV heads × 128: 80 · 2 · 8 ·
    # 128 · 2 bytes a token, where vLLM holds the 49 layers' only
    path = str(REFERENCE / "configs-extra-3" / "llama-3.3-nemotron-super-49b-v1.json")

    def row(*args: str) -> dict:
        return json.loads(run("compare", path, "--ctx", "4k", *args, "-f", "json").stdout)[0]

    assert row("--engine", "sglang")["engine_kv_bytes"] == 4096 * 80 * 2 * 8 * 128 * 2 == 1_342_177_280
    assert row("--engine", "sglang", "--tp", "8")["kv_cache_bytes_per_gpu"] == 4096 * 80 * 2 * 1 * 128 * 2
    assert row("--engine", "vllm")["engine_kv_bytes"] == row()["kv_cache_bytes"] == 4096 * 49 * 2 * 8 * 128 * 2
    layers = json.loads(run("show", path, "--ctx", "4k", "--engine", "sglang", "--per-layer", "-f", "json").stdout)["layers"]
    assert [(r["layers"], r["n_layers"]) for r in layers if r.get("layer") is None] == [("buffers", 31)]
    assert sum(r["engine_bytes"] for r in layers) == 1_342_177_280


def test_sglang_runs_gpt2_at_tp_1_only():
    # gpt2.py declares RadixAttention(num_kv_heads=total_num_heads) over a pool of 12 / tp heads a rank
    r = run("compare", "gpt2", "--ctx", "1k", "--engine", "sglang", "--tp", "2", ok=False)
    assert r.exit_code == 1 and "SGLang's GPT-2 file declares all gpt2's heads" in r.stderr
    run("compare", "gpt2", "--ctx", "1k", "--engine", "vllm", "--tp", "2")


def test_engines_keep_some_moe_routers_in_fp32():
    # vLLM's mimo_v2.py (moe_router_dtype float32), glm4_moe.py and minimax_m2.py (GateLinear params_dtype float32),
    # SGLang's glm4_moe.py (Glm4MoeGate) and minimax_m2.py build each MoE router, d × E and E biases, in fp32 whatever
    # the weights' dtype, whole on every rank: 2 bytes a parameter more than bf16 (3 more than fp8)
    def extra(model, engine: str, **at) -> int:
        return per_gpu(model, Settings(ctx=1, engine=engine, **at)).weights_bytes \
            - per_gpu(model, Settings(ctx=1, **at)).weights_bytes

    glm = spec("glm-4.7")  # 92 layers, 3 dense, 160 experts of d = 5,120; a vocabulary of 151,552 = 64 · 2,368
    m2 = spec("minimax-m2.5")  # 62 MoE layers, 256 experts of d = 3,072; 200,064 = 64 · 3,126 rows, untied
    for engine in ("vllm", "sglang"):
        assert extra(glm, engine, tp=8) == 89 * (5120 * 160 + 160) * 2 == 145_846_080
        assert extra(m2, engine, tp=4) == 62 * (3072 * 256 + 256) * 2 == 97_549_312
        # in fp8 weights: the routers 3 bytes a parameter more, the embedding and head (a quarter each at tp 4) 1 more
        assert extra(m2, engine, tp=4, weights_dtype="fp8") \
            == 62 * (3072 * 256 + 256) * 3 + 2 * 200_064 * 3072 // 4
    mimo = _reference("configs-extra-2/mimo-v2-flash.json")
    moe = sum(1 for g in mimo.groups for _ in g.layers) - 1  # moe_layer_freq: the first layer dense
    for engine in ("vllm", "sglang"):  # SGLang's mimo_v2.py MoEGate: moe_router_dtype, float32 by default, too
        assert per_gpu(mimo, Settings(ctx=1, tp=8, engine=engine)).weights_bytes \
            - per_gpu(mimo, Settings(ctx=1, tp=8)).weights_bytes == moe * (4096 * 256 + 256) * 2 == 98_590_208


def test_step3p5_router_and_mtp_projection_as_its_engine_files_build_them(tmp_path):
    # a hand-written Step-3.5 spec (no importer): vLLM's step3p5.py builds the router in fp32 (GateLinear
    # params_dtype=torch.float32), SGLang's step3p5.py in the weights' dtype; both MTP files build eh_proj as a plain
    # nn.Linear (bf16 under fp8 weights). GLM-4.7's shapes with Step-3.5's family: under vLLM its per-GPU weights are
    # GLM's (the same two rules), under SGLang the 90 routers (d = 5,120, 160 experts and their biases; 89 MoE layers
    # and the MTP layer's) are 2 bytes a parameter narrower than GLM's fp32 ones (bf16 under fp8 weights too: a router
    # is never quantized); and the MTP eh_proj
    # (2 · 5,120 → 5,120, whole) stays bf16
    from conftest import ROOT
    from kvcalc.registry import load_model

    path = tmp_path / "step.yaml"
    path.write_text((ROOT / "model_specs" / "glm-4.7.yaml").read_text().replace("family: glm4_moe", "family: step3p5")
                    .replace("name: glm-4.7", "name: step-like"))
    step, glm = load_model(str(path)).spec, spec("glm-4.7")
    routers = (89 + 1) * (5120 * 160 + 160)
    for dtype in ("bf16", "fp8"):
        at = {"ctx": 1, "tp": 8, "weights_dtype": dtype, "mtp": True}
        assert per_gpu(step, Settings(**at, engine="vllm")).weights_bytes \
            == per_gpu(glm, Settings(**at, engine="vllm")).weights_bytes
        assert per_gpu(glm, Settings(**at, engine="sglang")).weights_bytes \
            - per_gpu(step, Settings(**at, engine="sglang")).weights_bytes == routers * 2
    fp8 = {"ctx": 1, "tp": 8, "weights_dtype": "fp8", "mtp": True}
    plain = path.read_text().replace("family: step3p5", "family: llama")  # a family with neither rule
    (tmp_path / "plain.yaml").write_text(plain.replace("name: step-like", "name: plain-like"))
    other = load_model(str(tmp_path / "plain.yaml")).spec
    assert per_gpu(step, Settings(**fp8, engine="sglang")).weights_bytes \
        - per_gpu(other, Settings(**fp8, engine="sglang")).weights_bytes == 2 * 5120 * 5120


def test_engines_keep_convolutions_and_vllm_mamba1_unquantized():
    # Both engines build the recurrent mixers' short convolutions with no quant_config (vLLM mamba_mixer2.py conv1d
    # quant_config=None; SGLang mamba.py alike): under fp8 weights Nemotron-H 56B's 54 Mamba-2 layers keep their
    # conv1d, conv_dim = d_inner + 2·n_groups·N = 256 · 64 + 2 · 8 · 256 = 20,480 channels of K = 4, in bf16, split
    # over tp as its 8 groups allow; with the embedding and the untied head (131,072 · 8,192 each) 1 byte more each
    nemotron = spec("nemotron-h-56b")
    for engine in ("vllm", "sglang"):
        for tp in (1, 2):
            assert per_gpu(nemotron, Settings(ctx=1, tp=tp, engine=engine, weights_dtype="fp8")).weights_bytes \
                - per_gpu(nemotron, Settings(ctx=1, tp=tp, weights_dtype="fp8")).weights_bytes \
                == (2 * 131_072 * 8192 + 54 * 20_480 * 4) // tp
    # vLLM's Mamba-1 mixer takes no quant_config at all (mamba_mixer.py): Jamba's 28 Mamba layers keep in_proj
    # (4,096 × 2 · 8,192), x_proj (8,192 × (256 + 2 · 16)), dt_proj (256 × 8,192) and out_proj (8,192 × 4,096) in bf16
    # too, 2,943,352,832 bytes more than SGLang's rules (its mamba1.py quantizes all but conv1d); SGLang's own extra is
    # the embedding and head (65,536 · 4,096 each), the 16 MoE routers (16 experts) and the convolutions
    jamba = _reference("models-2026/jamba-v0.1.json")
    fp8 = {"ctx": 1, "weights_dtype": "fp8"}
    vllm, sglang, plain = (per_gpu(jamba, Settings(**fp8, engine=e)).weights_bytes for e in ("vllm", "sglang", None))
    assert sglang - plain == 2 * 65_536 * 4096 + 16 * 16 * 4096 + 28 * 8192 * 4 == 538_836_992
    assert vllm - sglang == 28 * (4096 * 16_384 + 8192 * 288 + 256 * 8192 + 8192 * 4096) == 2_943_352_832
    assert vllm == 55_052_513_152


def test_whisper_as_the_engines_build_it():
    # whisper-large-v3: d = 1,280, a vocabulary of 51,866, 32 encoder and 32 decoder layers with FFNs of 5,120
    w = spec("whisper-large-v3")

    def weights(tp: int, engine: str | None, dtype: str = "bf16") -> int:
        return per_gpu(w, Settings(ctx=1, tp=tp, engine=engine, weights_dtype=dtype)).weights_bytes

    for tp in (1, 2, 4):
        split = -(-51_866 // tp)
        # vLLM's whisper.py: the decoder's embed_tokens is an nn.Embedding, whole and unpadded on every rank, and the
        # tied proj_out (a ParallelLMHead) takes its weight: one whole table where kvcalc's plain layout splits it
        assert weights(tp, "vllm") - weights(tp, None) == (51_866 - split) * 1280 * 2
        # under fp8 weights it stays bf16, as do the decoder's 448 positions and the encoder's convolutions and
        # position table (nn.Conv1d, nn.Embedding in both engines; the encoder's extra_params, 7,331,840, with the
        # convolutions' biases and the final LayerNorm)
        assert weights(tp, "vllm", "fp8") - weights(tp, None, "fp8") \
            == (51_866 - split) * 1280 + 51_866 * 1280 + 448 * 1280 + 7_331_840
        # SGLang's whisper.py builds fc1 and fc2 with no quant_config: fp8 saves 1 byte a weight fewer on its 64 FFNs'
        # matrices (2 · 1,280 · 5,120 / tp each) than under vLLM, whose FFNs take it
        saved = {e: weights(tp, e) - weights(tp, e, "fp8") for e in ("vllm", "sglang")}
        assert saved["vllm"] - saved["sglang"] == 64 * 2 * 1280 * (5120 // tp)
    assert weights(2, "vllm") == 1_618_401_280 and weights(1, "sglang", "fp8") == 2_589_519_360


def test_engines_pad_the_vocabulary_to_a_multiple_of_64():
    # VocabParallelEmbedding pads the vocabulary to a multiple of 64 before splitting it (vLLM and SGLang
    # DEFAULT_VOCAB_PADDING_SIZE): gpt2's 50,257 rows are 50,304, 47 · 768 more in bf16 (tied: one table)
    gpt2 = spec("gpt2")
    for engine in ("vllm", "sglang"):
        assert per_gpu(gpt2, Settings(ctx=1, engine=engine)).weights_bytes \
            - per_gpu(gpt2, Settings(ctx=1)).weights_bytes == 47 * 768 * 2


def test_vllm_drafter_keeps_its_own_embedding_under_pipeline_stages():
    # v1 spec_decode eagle utils maybe_share_target_embed returns early when pp > 1: DeepSeek-V3's MTP drafter on the
    # last stage builds its own embedding, 129,280 / 8 rows of 7,168 at tp 8
    model = spec("deepseek-v3")
    with_pp = per_gpu(model, Settings(ctx=1, tp=8, pp=2, mtp=True, engine="vllm")).weights_bytes
    assert with_pp == 90_772_119_040
    assert with_pp - per_gpu(model, Settings(ctx=1, tp=8, pp=2, mtp=True)).weights_bytes == 16_160 * 7_168 * 2


def test_engines_refuse_expert_layouts_they_cannot_run():
    # an audit: vLLM's expert parallelism is a switch (--enable-expert-parallel) spanning all tp · dp GPUs of a
    # stage, and SGLang spreads experts over its tp group only (moe_tp_size = tp / ep): other --ep values were
    # computed as if either engine could run them
    for args, message in (
        (("--tp", "4", "--dp", "2", "--ep", "4", "--engine", "vllm"), "give --ep 8"),
        (("--tp", "4", "--dp", "2", "--ep", "8", "--engine", "sglang"), "ep must divide --tp 4"),
    ):
        res = run("compare", "deepseek-v3", "--ctx", "1", *args, ok=False)
        assert res.exit_code == 1 and message in res.stderr and "Traceback" not in res.stderr
    # the layouts they run, and any divisor of tp · dp without an engine
    for args in (("--tp", "4", "--dp", "2", "--ep", "8", "--engine", "vllm"), ("--tp", "4", "--ep", "2", "--engine", "sglang"),
                 ("--tp", "4", "--dp", "2", "--ep", "4")):
        run("compare", "deepseek-v3", "--ctx", "1", *args)


def test_named_columns_are_shown_alone_under_a_layout():
    # an audit: --columns model,ctx,kv_cache_bytes with --tp 2 also showed GPUs and KV cache per GPU; a preset still does
    header = lambda *a: run("compare", "gpt2", "--ctx", "4k", "--tp", "2", "-f", "csv", *a).stdout  # noqa: E731
    def columns_of(*a: str) -> str:
        out = run("compare", "gpt2", "--ctx", "4k", "--tp", "2", "--engine", "vllm", "-f", "markdown", *a).stdout
        return next(line for line in out.splitlines() if line.startswith("| Model"))

    named = columns_of("--columns", "model,ctx,kv_cache_bytes")
    assert [c.strip() for c in named.strip("|").split("|")] == ["Model", "Ctx", "KV cache"]
    preset = columns_of()
    assert "GPUs" in preset and "KV cache per GPU" in preset.replace("<br>", " ") and "Engine" in preset
    assert header() == header("--columns", "model,ctx,kv_cache_bytes")  # csv carries every key either way


def test_dp_attention_is_refused_under_vllm():
    # an audit: --dp-attention (SGLang's) was accepted under --engine vllm, which has no such mode: its data-parallel
    # attention is --dp with expert parallelism
    res = run("fit", "deepseek-v3", "--engine", "vllm", "--dp-attention", "--tp", "8", "-c", "100", "--hardware",
              "h200-141gb", ok=False)
    assert res.exit_code == 1 and "--dp-attention --engine vllm: DP attention is SGLang's" in res.stderr
    assert run("compare", "deepseek-v3", "--engine", "sglang", "--dp-attention", "--tp", "8").exit_code == 0


def test_engines_keep_what_they_do_not_quantize_in_bf16():
    # a serving review: under --weights-dtype fp8 the engines quantize linear layers and experts only (vLLM
    # Fp8Config.get_quant_method: LinearBase, RoutedExperts; else None, so VocabParallelEmbedding and ParallelLMHead
    # keep UnquantizedEmbeddingMethod); kvcalc priced the embedding and head at a byte a value. Llama 3.1 405B at tp 8:
    # 128,256 rows (a multiple of 64) / 8 = 16,032 of 16,384 values, each table a byte a value more
    m = spec("llama3.1-405b")
    for dtype, more in (("fp8", 8), ("int8", 8), ("int4", 12)):  # bits more a value than the weights' own
        plain = Settings(ctx=1, tp=8, weights_dtype=dtype)
        for engine in ("vllm", "sglang"):
            delta = per_gpu(m, replace(plain, engine=engine)).weights_bytes - per_gpu(m, plain).weights_bytes
            assert delta == 2 * 16_032 * 16_384 * more // 8, (dtype, engine)
    assert 2 * 16_032 * 16_384 == 525_336_576
    # GPT-2's learned positions (1,024 × 768) stay bf16 too, beside its tied, padded table (50,304 rows of 768; the
    # 47 padding rows counted at the weights' dtype)
    gpt2 = spec("gpt2")
    fp8 = Settings(ctx=1, weights_dtype="fp8")
    assert per_gpu(gpt2, replace(fp8, engine="vllm")).weights_bytes - per_gpu(gpt2, fp8).weights_bytes \
        == 47 * 768 + 50_304 * 768 + 1024 * 768
    # bf16 weights: nothing changes; fit at 8k on 8 H100s: 61 sequences, not 62 (blocks of 64 tokens of 126 layers
    # of one KV head of 128 a rank, 4,128,768 bytes; 80 GiB less vLLM's 1 GiB margin, the weights and 8,192 tokens'
    # activations, 8,192 · (4 · 16,384 + 2 · 53,248 / 8) · 2 bytes: 7,816 blocks, the null block and 128 a sequence),
    # and at vLLM's earlier 0.92, 50, not 51
    assert per_gpu(m, Settings(ctx=1, tp=8, engine="vllm")).weights_bytes == per_gpu(m, Settings(ctx=1, tp=8)).weights_bytes
    args = ("fit", "llama3.1-405b", "--hardware", "h100-80gb", "--gpus", "8", "--weights-dtype", "fp8", "--engine",
            "vllm", "--ctx", "8192", "-f", "json")
    row = json.loads(run(*args).stdout)[0]
    weights = 50_735_300_608 + 525_336_576
    room = 79 * 2**30 - weights - 8192 * (4 * 16_384 + 2 * 53_248 // 8) * 2
    assert (row["weights_bytes_per_gpu"], row["max_batch"]) == (weights, (room // 4_128_768 - 1) // 128) == (weights, 61)
    assert ((room + 525_336_576) // 4_128_768 - 1) // 128 == 62  # the embedding, head and routers in fp8
    assert json.loads(run(*args, "--reserve", "0.08").stdout)[0]["max_batch"] == 50
    # Falcon-H1's head stays fp32 under SGLang (lm_head.float()), whatever the weights: 32 bits a value, not 16
    # (3 bytes a value more than fp8), the untied embedding bf16 (1 more); padded rows counted as the engine pads; and
    # the 72 layers' Mamba-2 conv1d (5,120 channels of 4, no quant_config) bf16 (1 more)
    f = _reference("configs-extra-6/falcon-h1-34b-base.json")
    assert not f.tie_embeddings and f.vocab_size % 64 == 0
    plain = Settings(ctx=1, weights_dtype="fp8")
    delta = per_gpu(f, replace(plain, engine="sglang")).weights_bytes - per_gpu(f, plain).weights_bytes
    assert delta == f.vocab_size * f.d_model * (3 + 1) + 72 * 5120 * 4


def test_a_gpus_cache_rounds_its_bytes_once_as_the_whole_cache_does(tmp_path):
    # a README review: kv_cache_bytes_per_gpu rounded each layer group's int4 bytes up (⌈2.5⌉ + ...), so at tp 1 it
    # passed kv_cache_bytes, which rounds the elements' total once (README conventions). Two MLA layers of
    # d_c + d_R = 3 + 2 = 5 elements a token, the second windowed at 3 tokens: at ctx 1, 10 elements, 5 bytes
    path = tmp_path / "odd.yaml"
    path.write_text("name: odd\nfamily: test\nd_model: 64\nn_layers: 2\nvocab_size: 100\nmax_context: 4096\n"
                    "ffn: {kind: dense, d_ff: 128}\nlayer_groups:\n"
                    "  - {layers: [0], attention: {kind: mla, n_heads: 2, kv_lora_rank: 3, qk_nope_head_dim: 4, "
                    "qk_rope_head_dim: 2, v_head_dim: 4}}\n"
                    "  - {layers: rest, sliding_window: 3, attention: {kind: mla, n_heads: 2, kv_lora_rank: 3, "
                    "qk_nope_head_dim: 4, qk_rope_head_dim: 2, v_head_dim: 4}}\n")
    rows = json.loads(run("compare", str(path), "--ctx", "1,3,5", "--kv-dtype", "int4", "-f", "json").stdout)
    # elements: 5·(ctx + min(ctx, 3)) at 4 bits: 10 → 5 bytes, 30 → 15, 40 → 20
    assert [(r["kv_cache_bytes"], r["kv_cache_bytes_per_gpu"]) for r in rows] == [(5, 5), (15, 15), (20, 20)]


def test_engines_keep_the_indexer_mtp_projection_and_mxfp4_attention_in_bf16():
    # a review of the bf16 rule: beyond the embedding, head and routers, the engines build more without quantization
    from kvcalc.costs.engine_files import engine_extra_bytes

    # DeepSeek-V3.2's indexer: vLLM fuses wk and weights_proj with quant_config=None (7,168 × (128 + 64) a layer, all 61
    # on every rank); SGLang keeps weights_proj (7,168 × 64) in bf16 and quantizes wk (its RoPE is not interleaved)
    v32 = spec("deepseek-v3.2")
    fp8 = Settings(ctx=1, tp=8, weights_dtype="fp8")
    bf16_rest = 2 * (129_280 // 8) * 7168 + 58 * (7168 * 256 + 256) + 61 * 16 * 256 * 512 * 2  # head, routers, w_kc/w_vc
    assert per_gpu(v32, replace(fp8, engine="vllm")).weights_bytes - per_gpu(v32, fp8).weights_bytes \
        == bf16_rest + 61 * 7168 * (128 + 64)
    assert per_gpu(v32, replace(fp8, engine="sglang")).weights_bytes - per_gpu(v32, fp8).weights_bytes \
        == bf16_rest + 61 * 7168 * 64
    # the MTP layers' eh_proj (2·d × d, an nn.Linear in DeepSeek's, GLM's and MiMo's MTP files): a byte more a value
    # in fp8; Qwen3-Next's fc takes the quantization
    held, ends = [], (False, False, False)
    assert engine_extra_bytes(spec("deepseek-v3"), replace(fp8, engine="vllm"), held, ends, mtp_proj=2 * 7168**2) \
        == 2 * 7168**2 == 102_760_448
    assert engine_extra_bytes(spec("qwen3-next-80b-a3b"), replace(fp8, engine="vllm"), held, ends, mtp_proj=10**6) == 0
    # gpt-oss in int4 is its MXFP4 checkpoint: the experts alone are 4-bit, its attention (36 layers of 2,880 ×
    # (4,096 + 512 + 512) and 4,096 × 2,880), embedding and head (201,088 rows of 2,880 each) and routers (36 ·
    # (2,880 · 128 + 128)) stay bf16: 12 bits more a value
    oss = spec("gpt-oss-120b")
    int4 = Settings(ctx=1, weights_dtype="int4")
    rest = 36 * (2880 * 5120 + 4096 * 2880) + 2 * 201_088 * 2880 + 36 * (2880 * 128 + 128)
    # and its experts carry MXFP4's block scales, a byte for 32 values (vLLM and SGLang mxfp4.py: w13_weight_scale,
    # w2_weight_scale, uint8; a review: they were not counted, 3.34 GiB at tp 1, and fit gave gpt-oss-120b at 128k on
    # one H100 4 sequences, not 3): 36 layers · 128 experts · 3 matrices of 2,880 × 2,880 over 32
    scales = 36 * 128 * 3 * 2880 * 2880 // 32
    for engine in ("vllm", "sglang"):
        assert per_gpu(oss, replace(int4, engine=engine)).weights_bytes - per_gpu(oss, int4).weights_bytes \
            == rest * 12 // 8 + scales == 3_190_586_112 + 3_583_180_800, engine
    # split over tp 2 (each expert's 2,880 columns halved) or ep 2 (64 experts a rank): half the scales a rank, beside
    # half the attention and of the vocabulary's 201,088 rows (a multiple of 64: no padding), the routers whole
    rest = 36 * (2880 * 5120 + 4096 * 2880) // 2 + 2 * 100_544 * 2880 + 36 * (2880 * 128 + 128)
    for layout in ({"tp": 2}, {"tp": 2, "ep": 2}):
        assert per_gpu(oss, replace(int4, engine="vllm", **layout)).weights_bytes \
            - per_gpu(oss, replace(int4, **layout)).weights_bytes == rest * 12 // 8 + scales // 2, layout
    # not without an engine, nor in another dtype, nor for another family
    from kvcalc.costs.params import param_counts

    assert per_gpu(oss, int4).weights_bytes == -(-param_counts(oss).total // 2)
    assert per_gpu(oss, replace(int4, engine="vllm", weights_dtype="int8")).weights_bytes \
        - per_gpu(oss, replace(int4, weights_dtype="int8")).weights_bytes \
        == (2 * 201_088 * 2880 + 36 * (2880 * 128 + 128)) * 8 // 8  # the tables and routers alone: no MXFP4 there
    # GLM-5 interleaves its indexer's RoPE, so SGLang fuses wk with weights_proj in bf16: its wk too (d × 128 a layer)
    glm5 = _reference("configs-extra/glm-5.json")
    held = [(g, len(g.layers)) for g in glm5.groups]
    as_deepseek = glm5.model_copy(update={"family": "deepseek"})
    sglang = replace(fp8, tp=1, engine="sglang")
    assert engine_extra_bytes(glm5, sglang, held, ends) - engine_extra_bytes(as_deepseek, sglang, held, ends) \
        == 78 * 6144 * 128  # GLM-5: 78 layers, each with an indexer, d 6,144


def test_sglang_runs_olmo3_on_olmo2s_file_without_pipeline_stages(tmp_path):
    # a review: SGLang's configs/olmo3.py names OLMo 3 Olmo2ForCausalLM, whose file takes no pp_proxy_tensors
    cfg = json.loads((REFERENCE / "configs-extra" / "olmo-2-1124-7b.json").read_text())
    path = tmp_path / "olmo3.json"
    path.write_text(json.dumps({**cfg, "model_type": "olmo3", "max_position_embeddings": 65536}))
    for family in (path, REFERENCE / "configs-extra" / "olmo-2-1124-7b.json"):
        res = run("compare", str(family), "--engine", "sglang", "--pp", "2", ok=False)
        assert res.exit_code == 1 and "SGLang runs" in res.stderr and "without pipeline parallelism" in res.stderr
    assert run("compare", str(path), "--engine", "vllm", "--pp", "2").exit_code == 0


def test_roofline_experts_spread_over_the_ranks_holding_them():
    # A rank reads the routed experts it holds, not its replica's all: expert parallelism moves tokens, not weights.
    # qwen3-235b-a22b: 94 MoE layers of 128 experts, top-8, each expert 3 matrices of 4,096 x 1,536 in bf16.
    # H100: 3.35 TB/s; ctx 256, memory-bound throughout (a replica's 256 tokens: about 11 ms of compute).
    from fractions import Fraction

    expert = 3 * 4096 * 1536 * 2
    top_k, every = 94 * 8 * expert, 94 * 128 * expert
    assert (top_k, every) == (28_387_049_472, 454_192_791_552)
    bw = 3_350_000_000_000

    def row(*extra):
        return json.loads(run("compare", "qwen3-235b-a22b", "--ctx", "256", "--hardware", "h100-80gb", "--columns",
                              "all", "-f", "json", *extra).stdout)[0]

    one = row("--batch", "1")  # one GPU: its step reads decode_bytes_read, its prefill the weights and the KV written
    assert one["decode_seconds_per_token"] == float(Fraction(one["decode_bytes_read"], bw))
    # --dp 8 --ep 8: each of 8 replicas (tp 1) serves 1 sequence, and holds 16 experts a layer: a step's top-8 are
    # spread over the 8 ranks (the lower bound's one expert set), a prefill's every expert (2,048 tokens x 8 >= 128) too
    ep = row("--batch", "8", "--dp", "8", "--ep", "8")
    assert ep["decode_seconds_per_token"] == float(Fraction(one["decode_bytes_read"] - top_k + top_k // 8, bw))
    assert ep["prefill_seconds"] == pytest.approx(float(Fraction(one["prefill_seconds"]) - Fraction(every - every // 8, bw)),
                                                  rel=1e-12)
    # vLLM without --ep splits each expert over all dp · tp = 8 ranks: at tp 4 x dp 2, experts over 8, not 4
    plain, vllm = row("--batch", "8", "--tp", "4", "--dp", "2"), row("--batch", "8", "--tp", "4", "--dp", "2", "--engine", "vllm")
    assert Fraction(plain["decode_seconds_per_token"]) - Fraction(vllm["decode_seconds_per_token"]) == \
        pytest.approx(Fraction(top_k // 4 - top_k // 8, bw), rel=1e-12)
    assert Fraction(plain["prefill_seconds"]) - Fraction(vllm["prefill_seconds"]) == \
        pytest.approx(Fraction(every // 4 - every // 8, bw), rel=1e-12)
    # ep = tp: top-8 as whole experts over 8 ranks, one a layer, as 8/8 of the replica's: the same figure
    tp8 = row("--batch", "8", "--tp", "8")
    assert row("--batch", "8", "--tp", "8", "--ep", "8")["decode_seconds_per_token"] == tp8["decode_seconds_per_token"]


@pytest.mark.parametrize("engine", [(), ("--engine", "vllm"), ("--engine", "sglang")])
def test_replicated_extra_weights_are_whole_on_every_rank(tmp_path, engine):
    # a spec review: without an engine the `replicated` weights were split by tp, though the plain layout keeps
    # norms whole. 100,000 extra weights, 30,000 of them replicated, at tp 2 in bf16: (70,000 / 2 + 30,000) · 2 B
    base = {"name": "tiny", "family": "llama", "d_model": 256, "n_layers": 4, "vocab_size": 1024, "max_context": 4096,
            "ffn": {"kind": "dense", "d_ff": 512}, "layer_groups": [{"attention": {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}}]}
    import yaml

    per_gpu = []
    for extra in ({}, {"extra_weights": {"x": {"params": 100_000, "replicated": 30_000}}}):
        path = tmp_path / f"s{len(per_gpu)}.yaml"
        path.write_text(yaml.safe_dump({**base, **extra}))
        row = json.loads(run("compare", str(path), "--ctx", "1k", "--tp", "2", *engine, "-f", "json").stdout)[0]
        per_gpu.append(row["weights_bytes_per_gpu"])
    assert per_gpu[1] - per_gpu[0] == (70_000 // 2 + 30_000) * 2 == 130_000


def test_expert_ranks_read_whole_experts():
    # a review of the expert-parallel roofline: past tp, experts are whole on a rank (ceil(E / ep) each), so each MoE
    # layer's busiest rank reads ceil(reached / ep) whole experts; qwen3-235b-a22b at tp 8, dp 8, ep 64, decode:
    # top-8 of a layer over 64 ranks is one whole expert of 3 · 4,096 · 1,536 · 2 B on 94 layers
    from fractions import Fraction

    from kvcalc.costs.traffic import decode_bytes, routed_read_bytes
    from kvcalc.figures import _parallel_roofline
    from kvcalc.hardware import load_hardware

    h100, qwen = load_hardware("h100-80gb"), spec("qwen3-235b-a22b")
    s = Settings(ctx=4096, batch=64, tp=8, dp=8, ep=64, hardware=h100)
    replica = Settings(ctx=4096, batch=8)
    expert = 3 * 4096 * 1536 * 2
    assert routed_read_bytes(qwen, replica, 1, ranks=64) == 94 * expert == 3_548_381_184
    # one whole expert a layer is what the top-8 over the 8 ranks of a replica reads (8 / 8): the step equals the
    # layout's without --ep, where a replica's tp ranks share its experts; spread as 8/64 of an expert it was 1.8x less
    _, step = _parallel_roofline(qwen, s, h100)
    _, plain = _parallel_roofline(qwen, Settings(ctx=4096, batch=64, tp=8, dp=8, hardware=h100), h100)
    assert step.memory_seconds == plain.memory_seconds
    assert decode_bytes(qwen, replica)["weights"] > 94 * 8 * expert  # the replica's weights hold those experts
    assert Fraction(routed_read_bytes(qwen, replica, 1), 64) == Fraction(94 * expert, 8)
    # a group spanning 1.5 replicas (--tp 4 --dp 3 --ep 6): 1.5 · 16 tokens reach 24 · 8 = 192 of deepseek-v3's 256
    # experts, 32 whole a rank; the ceiling of whole replicas (2, 32 tokens: all 256) read 54,492,397,568 B more
    dsv3 = spec("deepseek-v3")
    whole = Settings(ctx=16, batch=3, tp=4, dp=3, ep=6, hardware=h100)
    from kvcalc.costs.engine_files import expert_tokens

    assert expert_tokens(whole, 1) == 24
    assert routed_read_bytes(dsv3, Settings(ctx=16, batch=1), 24, ranks=6) == 58 * 32 * 3 * 7168 * 2048 * 2


def test_whole_experts_at_ep_equal_to_or_below_tp():
    # a second review: at --tp 8 --ep 8 each rank holds one whole expert of Mixtral's 8 a layer, so a step's top-2
    # land on two ranks that each read a whole expert (3 · 4,096 · 14,336 · 2 = 352,321,536 B) on 32 layers; the rest
    # of the replica's weights over 8. Below tp (SGLang --tp 8 --ep 4) an expert is split over tp / ep = 2 ranks
    from fractions import Fraction

    from kvcalc.costs.traffic import decode_bytes, routed_read_bytes
    from kvcalc.figures import _parallel_roofline
    from kvcalc.hardware import load_hardware

    h100, mixtral = load_hardware("h100-80gb"), spec("mixtral-8x7b")
    expert = 3 * 4096 * 14336 * 2
    replica = Settings(ctx=1024)
    weights = decode_bytes(mixtral, replica)["weights"]
    top2 = routed_read_bytes(mixtral, replica, 1)
    assert top2 == 32 * 2 * expert
    for layout, routed in (({"tp": 8, "ep": 8}, 32 * expert), ({"tp": 8, "ep": 4, "engine": "sglang"}, 32 * expert // 2)):
        s = Settings(ctx=1024, hardware=h100, **layout)
        _, step = _parallel_roofline(mixtral, s, h100)
        _, plain = _parallel_roofline(mixtral, Settings(ctx=1024, hardware=h100, tp=8), h100)
        # the plain tp 8 step reads the replica's weights over 8; this one its non-expert share and `routed`
        rank = step.memory_seconds * h100.memory_bandwidth
        assert rank - plain.memory_seconds * h100.memory_bandwidth == (
            math.ceil(Fraction(weights - top2, 8) + routed) - math.ceil(Fraction(weights, 8))), layout

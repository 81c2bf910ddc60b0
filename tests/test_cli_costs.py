"""The cost features through the command line: compare's cost columns, cost, sweep, hardware, in every format."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import run

FORMATS = ["table", "markdown", "latex", "csv", "json"]
# Stable JSON keys the costs issue names.
COST_KEYS = ["params_total", "params_active", "weights_bytes", "flops_prefill", "flops_decode_token",
             "flops_generate_cached", "flops_generate_uncached", "decode_bytes_read"]
HARDWARE_KEYS = ["prefill_seconds", "decode_seconds_per_token"]


def compare_json(*args: str) -> list[dict]:
    return json.loads(run("compare", *args, "--format", "json").stdout)


def llama3_8b_decode(t: int) -> int:
    """One decode step of Llama 3 8B at context t, written out: 32 layers, d 4096, 32 heads, 8 KV heads of 128."""
    d, layers, ff, vocab = 4096, 32, 14336, 128_256
    per_layer = (2 * d * 4096 + 2 * 2 * d * 1024 + 2 * 4096 * d  # q, k and v (8·128 = 1024), o
                 + 2 * 2 * t * 32 * 128  # scores and mix: t keys, 32 query heads of 128
                 + 2 * 3 * d * ff)  # SwiGLU FFN
    return layers * per_layer + 2 * d * vocab


def test_compare_json_carries_every_cost_key():
    row = compare_json("llama3-8b", "--ctx", "4k", "--gen", "1k")[0]
    for key in COST_KEYS:
        assert isinstance(row[key], int), key
    assert row["params_total"] == row["params_active"] == 8_030_261_248  # FACTS.md §4
    assert row["weights_bytes"] == 2 * 8_030_261_248
    assert row["flops_decode_token"] == llama3_8b_decode(4096)
    # generation with a cache: the decode steps at contexts 4097 … 5120
    assert row["flops_generate_cached"] == sum(llama3_8b_decode(t) for t in range(4097, 5121))
    assert row["flops_generate_uncached"] > 1000 * row["flops_generate_cached"]
    assert "prefill_seconds" not in row


def test_hardware_roofline_closed_form():
    row = compare_json("llama3-8b", "--ctx", "4k", "--hardware", "h100-80gb")[0]
    flops = llama3_8b_decode(4096)
    # bytes read: weights but the input embedding table (one row), bf16; plus 4096 tokens of 128 KiB of cache
    read = 2 * (8_030_261_248 - 128_256 * 4096 + 4096) + 4096 * 131_072
    assert row["decode_bytes_read"] == read
    # H100 SXM: 989.4 TFLOP/s dense bf16, 3.35 TB/s (NVIDIA Hopper whitepaper / datasheet)
    expected = max(flops / 989.4e12, read / 3.35e12)
    assert row["decode_seconds_per_token"] == pytest.approx(expected, rel=1e-12)
    assert row["decode_bound"] == "memory"
    assert row["tokens_per_second"] == pytest.approx(1 / expected, rel=1e-12)
    assert row["prefill_seconds"] > 0 and row["fits_in_memory"] is True


def test_mla_schedule_keys_and_conflict():
    row = compare_json("deepseek-v2", "--ctx", "128k")[0]
    assert row["mla_schedule"] == "absorbed" and row["mla_crossover"] == 2
    assert row["flops_decode_token"] == row["flops_decode_token_absorbed"] < row["flops_decode_token_naive"]
    naive = compare_json("deepseek-v2", "--ctx", "128k", "--mla-schedule", "naive")[0]
    assert naive["flops_decode_token"] == row["flops_decode_token_naive"]
    expanded = compare_json("deepseek-v2", "--ctx", "128k", "--mla-cache", "expanded")[0]
    assert expanded["mla_schedule"] == "naive"  # the default schedule for an expanded cache
    res = run("compare", "deepseek-v2", "--mla-cache", "expanded", "--mla-schedule", "absorbed", ok=False)
    assert res.exit_code == 1 and "needs --mla-cache latent" in res.stderr


def test_dense_attn_counts_n_squared():
    causal = compare_json("gpt2", "--ctx", "1k")[0]["flops_prefill"]
    dense = compare_json("gpt2", "--ctx", "1k", "--dense-attn")[0]["flops_prefill"]
    # scores and mix: 12 layers · 2 · 2 · (N² − N(N+1)/2) pairs · 768
    assert dense - causal == 12 * 2 * 2 * (1024 * 1024 - 1024 * 1025 // 2) * 768


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_new_figure_in_every_format(fmt):
    out = run("compare", "llama3-70b", "deepseek-v2", "--ctx", "8k", "--columns", "all", "--hardware", "h100-80gb",
              "--format", fmt).stdout
    if fmt == "json":
        rows = json.loads(out)
        for key in COST_KEYS + HARDWARE_KEYS:
            assert all(key in r for r in rows), key
    elif fmt == "csv":
        header = next(csv.reader(io.StringIO(out)))
        assert set(COST_KEYS + HARDWARE_KEYS) <= set(header)
        rows = list(csv.DictReader(io.StringIO(out)))
        assert rows[0]["params_total"] == "70553706496"
    else:
        for header in ("Params", "Active", "Weights", "Prefill", "Decode", "bytes read", "Generate", "(no cache)",
                       "Tokens/s", "time/step"):
            assert header in out, header
        assert "70.6B" in out and "236B" in out


def test_columns_choice_and_errors():
    out = run("compare", "gpt2", "--ctx", "1k", "--columns", "model,params_total,flops_decode_token", "--format", "markdown").stdout
    # ctx is an identifying column: --columns always keeps it, after the model (README, "Identifying columns stay")
    assert out.splitlines()[2] == "| Model | Ctx | Params | Decode FLOPs/step |"  # a step: a token for each sequence
    res = run("compare", "gpt2", "--columns", "model,flops", ok=False)
    assert res.exit_code == 1 and "unknown column 'flops'" in res.stderr and "flops_prefill" in res.stderr
    # a near miss is named (a review: a list of 60 keys alone), and an empty key is said as one
    res = run("compare", "gpt2", "--columns", "kv_cache_byte", ok=False)
    assert "unknown column 'kv_cache_byte'; did you mean kv_cache_bytes? (use a preset" in res.stderr
    assert "column keys separated by commas, none empty" in run("compare", "gpt2", "--columns", "model,,ctx", ok=False).stderr
    res = run("compare", "gpt2", "--columns", "time", ok=False)
    assert "need --hardware NAME" in res.stderr


def test_default_compare_fits_100_columns():
    from typer.testing import CliRunner

    from kvcalc.cli import app

    res = CliRunner().invoke(app, ["compare", "llama3-70b", "deepseek-v2", "gemma3-27b", "--ctx", "128k"], env={"COLUMNS": "100"})
    assert res.exit_code == 0
    assert max(len(line.rstrip()) for line in res.stdout.splitlines()) <= 100


# ---------------------------------------------------------------- cost


def test_cost_json_breakdown():
    data = json.loads(run("cost", "llama3-8b", "--ctx", "4k", "--gen", "1k", "--format", "json").stdout)
    assert set(data["flops"]) == {"prefill", "decode_token", "generate_cached", "generate_uncached"}
    decode = data["flops"]["decode_token"]
    assert decode["total"] == llama3_8b_decode(4096)
    assert decode["attn/scores"] == 32 * 2 * 4096 * 32 * 128
    assert data["summary"]["params_total"] == 8_030_261_248
    assert data["flops"]["prefill"]["lm_head"] == 2 * 4096 * 128_256  # last position's logits only


def test_cost_mla_both_schedules():
    data = json.loads(run("cost", "deepseek-v2", "--ctx", "1k", "--format", "json").stdout)
    flops = data["flops"]
    assert {"decode_token_naive", "decode_token_absorbed", "generate_cached_naive", "generate_cached_absorbed"} <= set(flops)
    assert flops["decode_token_absorbed"]["total"] < flops["decode_token_naive"]["total"]
    assert "attn/q_absorb" in flops["decode_token_absorbed"] and "attn/kv_up" in flops["decode_token_naive"]
    assert data["summary"]["mla_crossover"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_cost_every_format(fmt):
    out = run("cost", "mixtral-8x7b", "--ctx", "2k", "--gen", "512", "--hardware", "a100-80gb", "--format", fmt).stdout
    assert "ffn/routed" in out.replace(r"\_", "_")
    if fmt in ("table", "markdown", "latex"):
        assert "decode_seconds_per_token" in out.replace(r"\_", "_")


def test_cost_rejects_a_ctx_list():
    res = run("cost", "gpt2", "--ctx", "1k,2k", ok=False)
    assert res.exit_code == 2 and "cost takes one prompt length" in res.stderr


def test_gen_accepts_token_syntax_and_rejects_junk():
    assert compare_json("gpt2", "--ctx", "512", "--gen", "1k")[0]["gen"] == 1024
    res = run("compare", "gpt2", "--gen", "lots", ok=False)
    assert res.exit_code == 2 and "'lots' is not a token count" in res.stderr


# ---------------------------------------------------------------- sweep and hardware


def test_sweep_log_spaced_rows():
    rows = json.loads(run("sweep", "llama3-8b", "mistral-7b", "--ctx", "1k..32k", "--format", "json").stdout)
    assert [r["ctx"] for r in rows if r["model"] == "llama3-8b"] == [1024, 2048, 4096, 8192, 16384, 32768]
    mistral = [r for r in rows if r["model"] == "mistral-7b"]
    # the cache stops growing at the window, and so does the decode step
    assert mistral[-1]["kv_cache_bytes"] == mistral[2]["kv_cache_bytes"] == 512 * 1024**2
    assert mistral[-1]["flops_decode_token"] == mistral[2]["flops_decode_token"]
    llama = [r for r in rows if r["model"] == "llama3-8b"]
    assert [r["kv_cache_bytes"] for r in llama] == [131_072 * c for c in (1024, 2048, 4096, 8192, 16384, 32768)]


def test_sweep_points_and_errors():
    rows = json.loads(run("sweep", "gpt2", "--ctx", "1k..1M", "--points", "3", "--format", "json").stdout)
    assert [r["ctx"] for r in rows] == [1024, 32_768, 1_048_576]
    res = run("sweep", "gpt2", "--ctx", "4k..1k", ok=False)
    assert res.exit_code == 2 and "runs backwards" in res.stderr


@pytest.mark.slow
def test_sweep_rows_are_bounded_by_format(tmp_path):
    # csv and json are written as rows are computed: 100,000 rows; the human formats lay a table out whole: 2,000
    res = run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..1M", "--points", "1001", ok=False)
    assert res.exit_code == 2 and "2 model(s) × 1,001 contexts = 2,002 rows: a sweep makes at most 2,000 in table" in res.stderr
    assert run("sweep", "gpt2", "--ctx", "1k..1M", "--points", "1001", "-f", "markdown", ok=False).exit_code == 0
    many = ["gpt2"] * 50
    res = run("sweep", *many, "--ctx", "1k..1048576k", "--points", "2001", "-f", "csv", ok=False)
    assert res.exit_code == 2 and "50 model(s) × 2,001 contexts = 100,050 rows: a sweep makes at most 100,000" in res.stderr
    out = run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..1048576k", "--points", "1500", "-f", "json").stdout
    assert len(json.loads(out)) == 3000
    res = run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..1048576k", "--points", "1500", "-o", str(tmp_path / "s.md"), ok=False)
    assert res.exit_code == 2 and "at most 2,000 in markdown" in res.stderr  # the file's extension is its format
    run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..1048576k", "--points", "1500", "-o", str(tmp_path / "s.json"))
    assert (tmp_path / "s.json").read_text() == out  # written as computed, the same text


@pytest.mark.slow
def test_sweep_takes_lists_of_settings_one_row_per_combination():
    # #11 item 3: --batch, --gen, --kv-dtype and --tp take comma lists; the rows are the sweeps of each combination in
    # turn (batch slowest, then gen, kv dtype, tp), each as it is alone (the ratio is against the first model there)
    models, ctx = ("llama3-8b", "deepseek-v2"), ("--ctx", "1k,32k")
    rows = json.loads(run("sweep", *models, *ctx, "--batch", "1,8", "--kv-dtype", "bf16,fp8", "--gen", "1k,100",
                          "-f", "json").stdout)
    alone = [r for b in ("1", "8") for g in ("1k", "100") for d in ("bf16", "fp8")
             for r in json.loads(run("sweep", *models, *ctx, "--batch", b, "--kv-dtype", d, "--gen", g, "-f", "json").stdout)]
    assert rows == alone and len(rows) == 2 * 2 * 2 * 2 * 2
    table = run("sweep", *models, *ctx, "--batch", "1,8", "--tp", "1,8", "--columns", "kv_cache_bytes").stdout
    assert "Batch" in table and "GPUs" in table and "batch {1, 8}," in table.splitlines()[0]
    # a value given twice is refused, as --ctx's is (it was dropped; test_hardening_cli has every list option)
    assert "'8,8': 8 given twice" in run("sweep", *models, *ctx, "--batch", "8,8", ok=False).stderr
    for option, value, message in (("--batch", "1,0", "'0': a positive whole number"),
                                   ("--kv-dtype", "bf16,fp9", "'fp9' is not one of"), ("--tp", "2,", "none empty")):
        res = run("sweep", "gpt2", option, value, ok=False)
        assert res.exit_code == 2 and message in res.stderr, res
    res = run("sweep", "gpt2", "--ctx", "1k..1M", "--points", "500", "--batch", "1,2,4,8,16", ok=False)
    assert res.exit_code == 2 and "1 model(s) × 500 contexts × 5 settings = 2,500 rows" in res.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_sweep_every_format(fmt):
    out = run("sweep", "deepseek-v2", "--ctx", "1k..4k", "--hardware", "h200-141gb", "--format", fmt).stdout
    if fmt in ("csv", "json"):
        assert "flops_decode_token_absorbed" in out and "decode_seconds_per_token" in out
    else:
        assert "absorbed" in out and "Tokens/s" in out


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_hardware_listing(fmt):
    out = run("hardware", "--format", fmt).stdout
    for name in ("h100-80gb", "h200-141gb", "a100-80gb", "mi300x", "l40s", "rtx-4090", "m2-ultra"):
        assert name in out
    if fmt == "json":
        rows = {r["name"]: r for r in json.loads(out)}
        assert rows["h100-80gb"]["memory_bandwidth"] == 3_350_000_000_000


def test_unknown_hardware_is_a_clear_error():
    res = run("compare", "gpt2", "--hardware", "h100", ok=False)
    assert res.exit_code == 1 and "h100-80gb" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_cost_summary_writes_tokens_per_second_with_three_significant_digits():
    # an audit: the summary wrote tokens/s with one decimal ('{:,.1f}'): a 26.3 s decode step showed 0.0 tokens/s,
    # 215 showed 215.5; compare's column and the README's rule give three significant digits, whole from 1,000
    out = run("cost", "llama3-70b", "--ctx", "256M", "--gen", "1", "--hardware", "h100-80gb").stdout
    line = next(x for x in out.splitlines() if x.startswith("tokens_per_second"))
    assert line.split()[1] == "0.0380"
    out = run("cost", "llama3-8b", "--ctx", "4k", "--batch", "8", "--hardware", "h100-80gb").stdout
    assert next(x for x in out.splitlines() if x.startswith("tokens_per_second")).split()[1] == "1,388"


def test_cost_lists_the_busiest_gpus_share_under_a_layout():
    # an audit: under --tp, cost's fits_in_memory judged the busiest GPU but printed none of the figures behind it.
    # llama3-70b at 32k, tp 8 on h100-80gb: each rank holds 1 of the 8 KV heads (d_h 128) of 80 layers, bf16
    out = json.loads(run("cost", "llama3-70b", "--ctx", "32k", "--tp", "8", "--hardware", "h100-80gb", "-f", "json").stdout)
    summary = out["summary"]
    assert summary["gpus"] == 8 and summary["state_bytes_per_gpu"] == 0
    assert summary["kv_cache_bytes_per_gpu"] == 80 * 2 * 1 * 128 * 2 * 32768 == 1_342_177_280
    (row,) = json.loads(run("compare", "llama3-70b", "--ctx", "32k", "--tp", "8", "-f", "json").stdout)
    assert summary["weights_bytes_per_gpu"] == row["weights_bytes_per_gpu"]
    assert summary["fits_in_memory"] == (summary["weights_bytes_per_gpu"] + summary["kv_cache_bytes_per_gpu"] <= 80 << 30)
    text = run("cost", "llama3-70b", "--ctx", "32k", "--tp", "8", "--hardware", "h100-80gb").stdout
    assert "the busiest GPU: its weights + KV cache vs h100-80gb memory" in text
    # a model of constant states at tp 4: each rank holds a quarter of Qwen3-Next's 36 DeltaNet states
    out = json.loads(run("cost", "qwen3-next-80b-a3b", "--ctx", "4k", "--tp", "4", "-f", "json").stdout)["summary"]
    assert out["state_bytes_per_gpu"] * 4 == out["state_bytes"] and out["gpus"] == 4
    # on one GPU there is nothing to split: no per-GPU keys, as before
    one = json.loads(run("cost", "llama3-70b", "--ctx", "32k", "--hardware", "h100-80gb", "-f", "json").stdout)["summary"]
    assert not {"gpus", "kv_cache_bytes_per_gpu", "weights_bytes_per_gpu"} & one.keys()


def test_cost_says_where_8_bit_weights_can_beat_the_bf16_peak():
    # a review: FLOPs are costed at the dense bf16 peak, but engines run fp8 and int8 weights as W8A8 on 8-bit tensor
    # cores (H100: twice the bf16 peak), so a compute-bound time is no lower bound there; a memory-bound one still is
    peak = "FLOPs at the bf16 peak, which 8-bit tensor cores (where the GPU has them) can beat"
    fp8 = run("cost", "llama3.1-70b", "--ctx", "16k", "--weights-dtype", "fp8", "--hardware", "h100-80gb").stdout
    line = {ln.split()[0]: ln for ln in fp8.splitlines() if ln.strip()}
    assert f"lower bound where memory-bound; where compute-bound, {peak}" in line["prefill_seconds"]
    assert "memory-bound, lower bound" in line["decode_seconds_per_token"]
    assert line["tokens_per_second"].rstrip().endswith("batch / decode time, upper bound")
    busy = run("cost", "deepseek-v3", "--ctx", "32k", "--batch", "64", "--weights-dtype", "fp8", "--kv-dtype", "fp8",
               "--hardware", "h100-80gb").stdout
    assert f"compute-bound, {peak}" in busy and "batch / decode time, upper bound but for 8-bit tensor cores" in busy
    bf16 = run("cost", "llama3.1-70b", "--ctx", "16k", "--hardware", "h100-80gb").stdout
    assert peak not in bf16 and "h100-80gb, lower bound" in bf16
    # compare's and sweep's titles say it too
    title = run("compare", "llama3.1-70b", "--ctx", "16k", "--weights-dtype", "fp8", "--hardware", "h100-80gb",
                "--columns", "model,prefill_seconds").stdout.splitlines()[0]
    assert title.endswith("h100-80gb (lower bounds; compute at the bf16 peak)")


def test_cost_on_one_gpu_under_an_engine_lists_the_weights_it_fits():
    # a review: llama3.1-70b in fp8 under vLLM keeps its embedding and untied head in bf16 (2 · 128,256 · 8,192 bytes
    # more), which fits_in_memory counts: cost lists the GPU's weights beside it, as compare does
    out = json.loads(run("cost", "llama3.1-70b", "--ctx", "8k", "--batch", "5", "--weights-dtype", "fp8", "--engine",
                         "vllm", "--hardware", "h100-80gb", "-f", "json").stdout)["summary"]
    assert out["weights_bytes_per_gpu"] == out["weights_bytes"] + 2 * 128_256 * 8192 == 72_655_052_800
    assert out["fits_in_memory"] is False  # 72,655,052,800 + 13,421,772,800 > 80 GiB
    assert out["weights_bytes"] + out["kv_cache_bytes"] <= 80 * 2**30 < out["weights_bytes_per_gpu"] + out["kv_cache_bytes"]
    plain = json.loads(run("cost", "llama3.1-70b", "--ctx", "8k", "-f", "json").stdout)["summary"]
    assert "weights_bytes_per_gpu" not in plain  # one GPU, no engine: nothing differs


def test_a_short_moe_prefill_is_called_an_estimate():
    # a review: a prefill of T tokens reads min(E, T · k) experts a layer, the most it can reach; the router may pick
    # fewer, so where T · k < E (deepseek-v3: 16 tokens of 8 experts each, of 256) its time is no lower bound
    short = run("cost", "deepseek-v3", "--ctx", "1", "--batch", "16", "--hardware", "h100-80gb").stdout
    assert "an estimate: MoE layers read every expert its tokens can reach, more than the router may pick" in short
    assert "an estimate" not in run("cost", "deepseek-v3", "--ctx", "32", "--hardware", "h100-80gb").stdout  # 256 = E


def test_cost_names_the_settings_its_figures_assume():
    # a review: cost's output named neither the KV dtype and scheme, nor the states' dtype, nor MLA's decode schedule,
    # which changes deepseek-v2's decode time at batch 64 about 30-fold (its json carried none of them either)
    import json

    from conftest import run

    out = run("cost", "deepseek-v2", "--ctx", "4k", "--batch", "64", "--hardware", "h100-80gb", "--mla-schedule",
              "naive").stdout
    assert "Memory, traffic and time: kv bf16, weights bf16, h100-80gb (lower bounds), MLA latent cache, naive decode" in out
    doc = json.loads(run("cost", "deepseek-v2", "--ctx", "4k", "--batch", "64", "--hardware", "h100-80gb",
                         "--mla-schedule", "naive", "-f", "json").stdout)
    assert {k: doc[k] for k in ("kv_dtype", "kv_quant", "mla_cache", "mla_schedule", "hardware")} == {
        "kv_dtype": "bf16", "kv_quant": "none", "mla_cache": "latent", "mla_schedule": "naive", "hardware": "h100-80gb"}
    doc = json.loads(run("cost", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4", "--kv-quant", "g64", "-f", "json").stdout)
    assert (doc["kv_dtype"], doc["kv_quant"]) == ("int4", "g64")
    assert not {"mla_cache", "mla_schedule", "engine", "block_size", "state_dtype", "enc_ctx", "hardware"} & set(doc)
    assert "kv int4, weights bf16, g64 scales" in run("cost", "llama3-8b", "--ctx", "4k", "--kv-dtype", "int4",
                                                        "--kv-quant", "g64").stdout
    out = run("cost", "deepseek-v3", "--ctx", "4k", "--mtp", "--dense-attn").stdout  # the FLOPs table's own settings
    assert "deepseek-v3: FLOPs, prompt 4,096 tokens, 1,024 generated, batch 1, MLA latent cache, attention as dense " \
        "N×N matrices, its 1 MTP layer run" in out
    doc = json.loads(run("cost", "qwen3-next-80b-a3b", "--ctx", "4k", "--state-dtype", "fp32", "--engine", "sglang",
                         "-f", "json").stdout)
    assert (doc["state_dtype"], doc["engine"], doc["block_size"]) == ("fp32", "sglang", 1)


def test_compare_and_sweep_rows_say_their_states_dtype():
    # a review: compare's and sweep's csv and json gave state_bytes with no word of its dtype, which cost and fit
    # carry: vLLM keeps Qwen3-Next's states at the model's bf16 beside an fp8 cache (mamba_cache_dtype auto);
    # Nemotron-H's Mamba-2 keeps an fp32 SSM state beside a bf16 convolution state; a model without states has no key
    rows = json.loads(run("compare", "qwen3-next-80b-a3b", "nemotron-h-56b", "llama3-8b", "--ctx", "8k", "--engine",
                          "vllm", "--kv-dtype", "fp8", "-f", "json").stdout)
    assert [r.get("state_dtype") for r in rows] == ["bf16", "fp32+bf16", None]
    assert rows[0]["kv_dtype"] == "fp8" and rows[0]["state_bytes"] > 0
    sweep = list(csv.DictReader(io.StringIO(run("sweep", "nemotron-h-56b", "llama3-8b", "--ctx", "4k,8k",
                                                "--columns", "model,ctx,state_bytes,state_dtype", "-f", "csv").stdout)))
    assert [(r["model"], r["state_dtype"]) for r in sweep] == [("nemotron-h-56b", "fp32+bf16")] * 2 + [("llama3-8b", "")] * 2

"""Every setting that changes a table's figures is named where a reader looks: in the title (a help-text review found
--mtp, --dp-attention, --dense-attn, --enc-ctx and show's --no-windows changing figures under unchanged titles), and an
option that changes nothing says so. The figures beside each title are written out by hand."""

from __future__ import annotations

import json

from conftest import run

K = 1024


def _title(*args: str) -> str:
    return run(*args).stdout.splitlines()[0]


def test_mtp_named_where_its_layer_is_counted():
    # deepseek-v3: 61 layers + 1 MTP layer, each a 512 + 64 latent in bf16
    title = _title("compare", "deepseek-v3", "--ctx", "32k", "--mtp")
    assert title.endswith(", MTP layers counted, decode steps speculative"), title
    row = json.loads(run("compare", "deepseek-v3", "--ctx", "32k", "--mtp", "--format", "json").stdout)[0]
    assert row["kv_bytes_per_token"] == 62 * 576 * 2 == 71_424
    assert "MTP" not in _title("compare", "deepseek-v3", "--ctx", "32k")
    # of two models, the one with MTP layers is named
    assert _title("compare", "deepseek-v3", "llama3.1-8b", "--mtp").endswith(
        ", deepseek-v3's MTP layers counted, its decode steps speculative")
    # cost's decode columns are a speculative step's: the last token and its one draft a sequence
    assert _title("cost", "deepseek-v3", "--ctx", "4k", "--mtp").endswith(
        ", its 1 MTP layer run: a decode step verifies 2 tokens a sequence")


def test_layout_and_dp_attention_named_beside_the_per_gpu_figures():
    # deepseek-v2 at 128k, batch 8 over tp 8: its latent (60 layers · 576 · 2 B a token) whole on every rank, or under
    # SGLang's DP attention one sequence a rank
    args = ("compare", "deepseek-v2", "--ctx", "128k", "--tp", "8", "--batch", "8")
    one_sequence = 60 * 576 * 2 * 128 * K
    plain, dp = (json.loads(run(*args, *extra, "--format", "json").stdout)[0] for extra in ((), ("--dp-attention",)))
    assert plain["kv_cache_bytes_per_gpu"] == 8 * one_sequence == 72_477_573_120
    assert dp["kv_cache_bytes_per_gpu"] == one_sequence == 9_059_696_640
    assert _title(*args).endswith(", tp 8 × pp 1 × dp 1")
    assert _title(*args, "--dp-attention").endswith(", tp 8 × pp 1 × dp 1, DP attention")
    assert _title("compare", "llama3.1-8b", "--pp", "2", "--dp", "2").endswith(", tp 1 × pp 2 × dp 2")
    assert "tp " not in _title("compare", "llama3.1-8b")  # one GPU: nothing to say


def test_a_sweep_names_every_value_it_takes():
    title = _title("sweep", "llama3.1-8b", "--ctx", "32k", "--tp", "1,2", "--columns", "model,ctx,gpus,flops_prefill")
    assert "tp {1, 2} × pp 1 × dp 1" in title, title


def test_dense_attention_named_where_flops_are_shown():
    # llama3.1-8b at 32k: dense scores add 4 · n_h · d_h · L · (N² − N(N+1)/2) FLOPs over the causal count
    n = 32 * K
    args = ("compare", "llama3.1-8b", "--ctx", "32k", "--format", "json")
    causal, dense = (json.loads(run(*args, *extra).stdout)[0]["flops_prefill"] for extra in ((), ("--dense-attn",)))
    assert dense - causal == 4 * 32 * 128 * 32 * (n * n - n * (n + 1) // 2) == 281_466_386_776_064
    assert _title("compare", "llama3.1-8b", "--ctx", "32k", "--columns", "cost", "--dense-attn").endswith(
        ", attention as dense N×N matrices")
    assert "dense" not in _title("compare", "llama3.1-8b", "--ctx", "32k", "--dense-attn")  # the cache columns alone
    assert _title("sweep", "llama3.1-8b", "--ctx", "32k", "--dense-attn").endswith(", attention as dense N×N matrices")


def test_encoder_positions_named():
    # whisper-large-v3's 32 decoder layers, 20 heads of 64: 5,120 B a token a layer, for the 448 tokens and for the
    # 100 encoder positions asked of cross-attention
    row = json.loads(run("compare", "whisper-large-v3", "--ctx", "448", "--enc-ctx", "100", "--format", "json").stdout)[0]
    assert row["kv_cache_bytes"] == 448 * 32 * 5120 + 100 * 32 * 5120 == 89_784_320
    assert _title("compare", "whisper-large-v3", "--ctx", "448", "--enc-ctx", "100").endswith(", encoder ctx 100")
    assert "encoder" not in _title("compare", "whisper-large-v3", "--ctx", "448")


def test_show_says_when_windows_are_ignored():
    # gemma3-27b with every layer global: 62 layers · 2 · 16 · 128 · 2 B · 131,072 tokens
    res = run("show", "gemma3-27b", "--ctx", "128k", "--no-windows")
    assert "66,571,993,088 B (62.0 GiB)" in res.stdout and 62 * 2 * 16 * 128 * 2 * 128 * K == 66_571_993_088
    assert "windows ignored (--no-windows)" in res.stdout and "windows applied" not in res.stdout
    assert "KV cache by layer group at ctx 131,072, batch 1, bf16, windows ignored" in res.stdout
    payload = json.loads(run("show", "gemma3-27b", "--no-windows", "--format", "json").stdout)
    assert payload["no_windows"] is True
    assert "no_windows" not in json.loads(run("show", "gemma3-27b", "--format", "json").stdout)
    assert "windows applied" in run("show", "gemma3-27b").stdout


def test_options_that_change_nothing_say_so():
    res = run("compare", "llama3.1-8b", "--no-windows")
    assert ("warning: llama3.1-8b: --no-windows: it has no sliding windows or attention chunks, so the option changes "
            "nothing") in res.stderr
    assert "windows ignored" not in res.stdout  # nothing was
    res = run("compare", "deepseek-v2-lite", "--dp-attention")
    assert "warning: --dp-attention: at tp 1 a replica's attention has one rank" in res.stderr
    assert "warning" not in run("compare", "gemma3-27b", "--no-windows").stderr


def test_the_plot_caption_names_what_moves_its_curves():
    from kvcalc.hardware import load_hardware
    from kvcalc.present.plot import settings_caption
    from kvcalc.registry import load_model
    from kvcalc.settings import Settings

    llama, qwen = load_model("llama3.1-8b").spec, load_model("qwen3-next-80b-a3b").spec
    assert settings_caption([llama], Settings(ctx=1, dense_attn=True), ["flops-prefill"]) == \
        "attention as dense N×N matrices"
    assert settings_caption([llama], Settings(ctx=1, dense_attn=True), ["cache"]) == ""  # the cache: no change
    assert settings_caption([qwen], Settings(ctx=1, state_dtype="fp32"), ["state"]) == "states fp32"
    h100 = load_hardware("h100-80gb")  # the weights move the cache panel's 'exceed memory' marker
    assert settings_caption([llama], Settings(ctx=1, tp=2, weights_dtype="fp8", hardware=h100), ["cache"]) == \
        "weights fp8, tp 2 × pp 1 × dp 1"


def test_show_words_for_a_scheme_and_a_page():
    # llama3.1-8b in fp8 with per-token scales: 32 layers · 2 · (8 · 128 B + a 4 B scale) = 65,792 B a token
    res = run("show", "llama3.1-8b", "--kv-dtype", "fp8", "--kv-quant", "per-token")
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("kv_bytes_per_token"))
    assert "65,792 B" in line and "fp8, per-token scales" in line and 32 * 2 * (8 * 128 + 4) == 65_792
    # Qwen3-Next under vLLM with an fp8 cache: the page that holds a state, grouped as every other count is
    assert "whole pages of 1,088 tokens" in run("show", "qwen3-next-80b-a3b", "--engine", "vllm", "--kv-dtype", "fp8").stdout


def test_rows_carry_the_settings_their_figures_assume():
    # json and csv rows end with the layout and flags (the per-GPU figures differ 8x between --tp 8 and --dp 8 with
    # the same gpus 8: llama3.1-8b at 128k, batch 8: 32 · 2 · 8 · 128 · 2 B · 131,072 tokens a sequence, split by the
    # 8 KV heads over tp 8, or one sequence a replica under dp 8: 16 GiB either way, the weights 1/8 or whole)
    a, b = (json.loads(run("compare", "llama3.1-8b", "--ctx", "128k", "--batch", "8", flag, "8", "-f", "json").stdout)[0]
            for flag in ("--tp", "--dp"))
    assert a["kv_cache_bytes_per_gpu"] == b["kv_cache_bytes_per_gpu"] == 32 * 2 * 8 * 128 * 2 * 128 * K == 16 * K**3
    assert (a["tp"], a["pp"], a["dp"], a["ep"]) == (8, 1, 1, 1) and (b["tp"], b["dp"]) == (1, 8)
    assert a["gpus"] == b["gpus"] == 8 and a["weights_bytes_per_gpu"] < b["weights_bytes_per_gpu"]
    row = json.loads(run("compare", "deepseek-v3", "--tp", "8", "--batch", "8", "--dp-attention", "--mtp",
                         "--dense-attn", "-f", "json").stdout)[0]
    assert [row[k] for k in ("dp_attention", "dense_attn", "mtp", "no_windows")] == [True, True, True, False]
    gemma, llama = json.loads(run("compare", "gemma3-27b", "llama3.1-8b", "--no-windows", "-f", "json").stdout)
    assert gemma["no_windows"] is True and llama["no_windows"] is False  # llama has none to take out (warned)
    assert gemma["n_window_layers"] == 0
    header, first = run("sweep", "llama3.1-8b", "--ctx", "4k", "--tp", "1,2", "-f", "csv").stdout.splitlines()[:2]
    assert header.split(",")[-8:] == ["tp", "pp", "dp", "ep", "dp_attention", "dense_attn", "mtp", "no_windows"]
    assert first.split(",")[-8:] == ["1", "1", "1", "1", "false", "false", "false", "false"]


def test_plot_options_no_panel_uses_are_warned_of():
    from kvcalc.present.outputs import plot_warnings
    from kvcalc.registry import load_model
    from kvcalc.settings import Settings

    lm = [load_model("deepseek-v2")]
    warned = " ".join(plot_warnings(lm, [1024], Settings(ctx=1024, dense_attn=True, mla_schedule="naive",
                                                         weights_dtype="fp8"), ["cache"]))
    assert "--dense-attn: it counts a prefill's attention as dense" in warned
    assert "--mla-schedule: it moves the decode panels" in warned
    assert "--weights-dtype fp8: without --hardware no panel depends on the weights" in warned
    quiet = plot_warnings(lm, [1024], Settings(ctx=1024, dense_attn=True, mla_schedule="naive"),
                          ["flops-prefill", "flops-decode"])
    assert not [w for w in quiet if "changes nothing" in w]


def test_words_name_only_what_the_shown_figures_depend_on():
    # a diff review: dense attention named over decode or memory columns it does not change; a sweep's --dp-attention
    # warned of as 'changes nothing' at its tp 1 rows though its tp 8 rows change; two styles for varied values
    assert "dense" not in _title("compare", "llama3-8b", "--ctx", "4k", "--columns",
                                 "flops_decode_token,decode_seconds_per_token", "--hardware", "h100-80gb", "--dense-attn")
    assert "dense" not in _title("compare", "llama3-8b", "--ctx", "1k", "--dense-attn", "--tp", "2")
    assert _title("compare", "llama3-8b", "--ctx", "1k", "--dense-attn", "--columns", "flops_generate_uncached").endswith(
        ", attention as dense N×N matrices")
    res = run("sweep", "deepseek-v3", "--ctx", "4k", "--tp", "1,8", "--dp-attention", "--batch", "8", "--columns",
              "kv_cache_bytes_per_gpu")
    assert "changes nothing" not in res.stderr
    rows = json.loads(run("sweep", "deepseek-v3", "--ctx", "4k", "--tp", "1,8", "--dp-attention", "--batch", "8",
                          "-f", "json").stdout)
    assert [r["kv_cache_bytes_per_gpu"] for r in rows] == [8 * 61 * 576 * 2 * 4096, 61 * 576 * 2 * 4096]  # 1 a rank
    title = _title("sweep", "deepseek-v3", "--ctx", "1k,2k", "--batch", "1,8", "--tp", "1,2", "--kv-dtype", "bf16,fp8",
                   "--columns", "model,ctx")
    assert title.startswith("Growth with context, batch {1, 8}, kv {bf16, fp8}, weights bf16") and \
        "tp {1, 2} × pp 1 × dp 1" in title


def test_the_plot_caption_leaves_the_layout_off_flop_panels():
    from kvcalc.present.plot import settings_caption
    from kvcalc.registry import load_model
    from kvcalc.settings import Settings

    v3 = load_model("deepseek-v3").spec
    s = Settings(ctx=1024, tp=8, dp_attention=True, dense_attn=True)
    assert settings_caption([v3], s, ["flops-decode"]) == "MLA latent cache, absorbed decode"  # whole-model FLOPs
    assert settings_caption([v3], s, ["cache"]) == "MLA latent cache, tp 8 × pp 1 × dp 1, DP attention"


def test_show_says_weights_dtype_changes_nothing_on_one_gpu():
    # show lists weights only per GPU under a layout: on one GPU, --weights-dtype int4 leaves every figure as it was
    # (engines' pages too), so it is said; under --tp 2 the per-GPU weights halve from bf16's 2 bytes to int4's 1/2
    for extra in ((), ("--engine", "vllm")):
        base = json.loads(run("show", "llama3-8b", "--ctx", "4k", *extra, "-f", "json").stdout)
        int4 = run("show", "llama3-8b", "--ctx", "4k", "--weights-dtype", "int4", *extra, "-f", "json")
        assert json.loads(int4.stdout) == base
        res = run("show", "llama3-8b", "--ctx", "4k", "--weights-dtype", "int4", *extra)
        assert "warning: --weights-dtype int4: show lists the weights only per GPU under --tp, --pp or --dp" in res.stderr
    assert "--weights-dtype" not in run("show", "llama3-8b", "--ctx", "4k", "--weights-dtype", "bf16").stderr
    tp2 = run("show", "llama3-8b", "--ctx", "4k", "--tp", "2", "--weights-dtype", "int4")
    assert "--weights-dtype" not in tp2.stderr
    bf16, int4 = (json.loads(run("show", "llama3-8b", "--ctx", "4k", "--tp", "2", "--weights-dtype", w, "-f", "json")
                             .stdout)["summary"]["weights_bytes_per_gpu"] for w in ("bf16", "int4"))
    assert bf16 == 4 * int4


def _summary_words(*args):
    """cost's summary rows as {key: the words beside its value} (the table, on a wide terminal)."""
    out = run("cost", *args, "-f", "markdown").stdout
    return {cells[1].strip(): cells[3].strip() for line in out.splitlines()
            if len(cells := line.split("|")) > 4 and cells[1].strip() and not set(cells[1].strip()) <= {"-", ":"}}


def test_bounds_words_name_what_can_beat_the_roofline():
    # A time review: tokens/s = batch / step counts a token a sequence a step, which a speculative step under --mtp
    # (up to 1 + k tokens) and pp micro-batches in flight (vLLM's max_concurrent_batches = pp) exceed; an fp8 cache's
    # attention runs on fp8 tensor cores (vLLM's Attention.query_quant), past the bf16 peak FLOPs are costed at
    plain = _summary_words("llama3-70b", "--ctx", "32k", "--batch", "16", "--hardware", "h100-80gb")
    assert plain["tokens_per_second"] == "batch / decode time, upper bound"
    pp = _summary_words("llama3-70b", "--ctx", "32k", "--batch", "16", "--pp", "4", "--hardware", "h100-80gb")
    assert pp["tokens_per_second"] == ("batch / decode time, a token a sequence a step, not an upper bound: the 4 stages "
                                       "keep micro-batches in flight")
    mtp = _summary_words("deepseek-v3", "--ctx", "4k", "--mtp", "--tp", "8", "--hardware", "h200-141gb")
    assert "not an upper bound: a speculative step emits up to 1 + the MTP layers' tokens" in mtp["tokens_per_second"]
    fp8 = _summary_words("llama3-70b", "--ctx", "128k", "--kv-dtype", "fp8", "--hardware", "h100-80gb")
    assert "where compute-bound, FLOPs at the bf16 peak" in fp8["prefill_seconds"]
    assert "where compute-bound" not in plain["prefill_seconds"]
    assert "(lower bounds; compute at the bf16 peak)" in run("compare", "llama3-70b", "--kv-dtype", "fp8", "--hardware",
                                                             "h100-80gb", "--columns", "time").stdout


def test_titles_say_an_moe_prefill_of_few_tokens_is_an_estimate():
    # gpt-oss-120b: 128 experts, top-4: a prefill of T tokens reaches min(128, 4T) of them, all from T = 32; below,
    # its traffic is an upper estimate (cost says so beside it), and compare's and sweep's titles now say so too
    def title(*args):
        return run(*args, "--hardware", "l40s", "--columns", "time").stdout.splitlines()[0]

    estimate = "l40s (lower bounds; MoE prefills of few tokens estimates)"
    assert title("compare", "gpt-oss-120b", "--ctx", "31").endswith(estimate)
    assert title("compare", "gpt-oss-120b", "--ctx", "32").endswith("l40s (lower bounds)")
    assert title("compare", "llama3-8b", "gpt-oss-120b", "--ctx", "31,4k").endswith(estimate)
    assert title("compare", "llama3-8b", "--ctx", "1").endswith("l40s (lower bounds)")  # no experts
    # a sweep's fewest tokens: its smallest batch at its smallest context (2 · 16 = 32 tokens: all experts)
    assert title("sweep", "gpt-oss-120b", "--ctx", "16,64", "--batch", "1,4").endswith(estimate)
    assert title("sweep", "gpt-oss-120b", "--ctx", "16,64", "--batch", "2,4").endswith("l40s (lower bounds)")


def test_show_summary_names_group_ffns_chunks_and_shared_caches(tmp_path):
    # a spec review: show's summary described the model's FFN alone (Llama 4 Maverick: "MoE 1 of 128", though 24 of
    # its 48 layers are dense, d_ff 16,384: intermediate_size_mlp) and its group rows no chunk nor KV sharing
    summary = json.loads(run("show", "llama4-maverick", "--ctx", "4k", "-f", "json").stdout)["summary"]
    assert summary["ffn"] == ("MoE 1 of 128 routed + 1 shared, expert d_ff 8,192 (but 24 layer(s) of groups with their "
                              "own: see their rows)")
    assert ", chunk 8,192: " in summary["chunked-dense"]
    assert summary["chunked-dense"].endswith("; its own FFN: dense gated, d_ff 16,384")
    assert ", chunk" not in summary["global"] and "its own FFN" not in summary["global"]
    import yaml

    path = tmp_path / "shared.yaml"
    gqa = {"kind": "gqa", "n_heads": 8, "n_kv_heads": 2}
    path.write_text(yaml.safe_dump({"name": "shared", "family": "gemma3n", "d_model": 256, "n_layers": 4,
                                    "vocab_size": 1000, "max_context": 4096, "ffn": {"kind": "dense", "d_ff": 512},
                                    "layer_groups": [{"name": "own", "layers": "0-1", "attention": gqa},
                                                     {"name": "reads", "layers": "2-3", "attention": gqa, "kv_shared": True}]}))
    summary = json.loads(run("show", str(path), "--ctx", "1k", "-f", "json").stdout)["summary"]
    assert summary["ffn"] == "dense gated, d_ff 512"
    assert "[2-3], reading an earlier layer's cache (KV-shared): " in summary["reads"]
    assert "KV-shared" not in summary["own"]


def test_bounds_words_follow_what_is_shown_and_run():
    # a review of this session's diff: tokens/s is an upper bound at pp > 1 with one sequence a replica (one micro-batch
    # in flight) and under --mtp of a model without MTP layers (no speculative step); a sweep's caveat for fp8 follows
    # any of its kv dtypes, not the first; the MoE estimate words only beside a prefill time; and a rank's prefill
    # is an estimate by the tokens its experts serve (deepseek-v3, --tp 2 --dp 4 --ep 4, batch 4 at ctx 8: a group of
    # 2 replicas, 2 sequences, 16 tokens · 8 < 256 experts), whatever the batch's 32 tokens reach
    one = _summary_words("llama3-70b", "--ctx", "4k", "--pp", "2", "--hardware", "h100-80gb")
    assert one["tokens_per_second"] == "batch / decode time, upper bound"
    two = _summary_words("llama3-70b", "--ctx", "4k", "--pp", "2", "--batch", "2", "--hardware", "h100-80gb")
    assert "not an upper bound: the 2 stages keep micro-batches in flight" in two["tokens_per_second"]
    none = _summary_words("qwen3-235b-a22b", "--ctx", "8", "--mtp", "--hardware", "h100-80gb")
    assert none["tokens_per_second"] == "batch / decode time, upper bound"
    for kv in ("bf16,fp8", "fp8,bf16"):
        out = run("sweep", "llama3-8b", "--ctx", "4k", "--kv-dtype", kv, "--hardware", "h100-80gb", "--columns",
                  "model,ctx,kv_dtype,prefill_seconds").stdout
        assert out.splitlines()[0].endswith("h100-80gb (lower bounds; compute at the bf16 peak)"), kv
    title = run("compare", "qwen3-235b-a22b", "--ctx", "4", "--hardware", "h100-80gb", "--columns",
                "model,ctx,decode_seconds_per_token").stdout.splitlines()[0]
    assert title.endswith("h100-80gb (lower bounds)")
    rank = _summary_words("deepseek-v3", "--ctx", "8", "--batch", "4", "--tp", "2", "--dp", "4", "--ep", "4",
                          "--hardware", "h100-80gb")
    assert rank["prefill_seconds"].startswith("h100-80gb, an estimate: MoE layers read every expert")


def test_show_ffn_words_where_groups_set_their_own():
    # OpenELM-270M: layer 0's group keeps the model's FFN (d_ff 768, said once, not as 'its own'); the 15 others set
    # their own widths (ffn_multipliers), which the summary points to
    from conftest import ROOT

    path = ROOT / "tests" / "data" / "reference" / "configs-extra-4" / "openelm-270m.json"
    summary = json.loads(run("show", str(path), "--ctx", "1k", "-f", "json").stdout)["summary"]
    assert summary["ffn"] == "dense gated, d_ff 768 (but 15 layer(s) of groups with their own: see their rows)"
    rows = [v for v in summary.values() if isinstance(v, str) and "its own FFN" in v]
    assert rows and not any(v.endswith("its own FFN: dense gated, d_ff 768") for v in rows)


def test_a_sweeps_moe_estimate_words_follow_every_layout_it_runs():
    # a second review: deepseek-v3 --dp 2 --ep 8 at tp 8 serves a rank 1 sequence of 16 tokens (16 · 8 < 256 experts:
    # an estimate) and at tp 4 two (32 · 8 = 256: all); the words were there for one order of --tp and not the other
    for tp in ("4,8", "8,4"):
        title = run("sweep", "deepseek-v3", "--tp", tp, "--dp", "2", "--ep", "8", "--batch", "2", "--ctx", "16,32",
                    "--hardware", "h100-80gb", "--columns", "prefill_seconds").stdout.splitlines()[0]
        assert title.endswith("(lower bounds; MoE prefills of few tokens estimates)"), tp

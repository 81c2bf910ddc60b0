"""#8 items 1–2: the papers' reference tables, `table dims` and `table models`, checked against the bundled specs'
own fields and hand-derived figures."""

from __future__ import annotations

import importlib.util
import json

import pytest
from test_latex import check_pasteable

from conftest import run, spec

K = 1024


def rows(*args: str) -> list[dict]:
    return json.loads(run("table", *args, "-f", "json").stdout)


def test_symbolic_dims_of_every_kind():
    by = {(r["kind"], r["item"]): r["symbolic"] for r in rows("dims")}
    assert [by[(k, "cache per token and layer")] for k in ("MHA", "GQA", "MQA", "MLA")] == \
        ["2·n_h·d_h", "2·n_kv·d_h", "2·d_h", "d_c + d_R"]
    assert by[("GQA", "W_K")] == "d × n_kv·d_h" and by[("MQA", "W_V")] == "d × d_h"
    assert by[("MLA", "W_UQ·W_UKᵀ")] == "d_c' × n_h·d_c" and by[("MLA", "W_UV·W_O")] == "n_h·d_c × d"
    assert by[("MLA", "decode FLOPs per token")] == "2·n_h·(d_c + d_R)·t + 2·n_h·d_c·t"
    assert {r["kind"] for r in rows("dims", "--kinds", "mla")} == {"MLA"}


def test_deepseek_v2_mla_weights_match_its_spec():
    att = spec("deepseek-v2").groups[0].attention
    d, n_h, c, r, q = 5120, att.n_heads, att.kv_lora_rank, att.qk_rope_head_dim, att.q_lora_rank
    nope, d_v = att.qk_nope_head_dim, att.v_head_dim
    assert (n_h, c, r, q, nope, d_v) == (128, 512, 64, 1536, 128, 128)
    got = {r_["item"]: r_["deepseek-v2"] for r_ in rows("dims", "deepseek-v2")}
    shape = lambda *dims: " × ".join(f"{x:,}" for x in dims)  # noqa: E731
    assert got["W_DKV"] == shape(d, c) and got["W_KR"] == shape(d, r)  # W_DKV 5120 × (512 + 64), split
    assert got["W_UK"] == shape(c, n_h * nope) == "512 × 16,384" and got["W_UV"] == shape(c, n_h * d_v)
    assert got["W_DQ"] == shape(d, q) and got["W_UQ"] == shape(q, n_h * nope) and got["W_QR"] == shape(q, n_h * r)
    assert got["W_O"] == shape(n_h * d_v, d)
    assert got["W_UQ·W_UKᵀ"] == shape(q, n_h * c) and got["W_UV·W_O"] == shape(n_h * c, d)
    assert got["cache per token and layer"] == f"{c + r:,}"
    assert got["decode FLOPs per token"] == f"{2 * n_h * (c + r) + 2 * n_h * c:,}·t"
    assert "W_Q" not in got  # V2 compresses its queries; V2-Lite has the single W_Q
    assert rows("dims", "deepseek-v2-lite")[0]["item"] == "W_Q"


def test_deepseek_v32_dims_count_its_indexer():
    # an audit: beside DeepSeek-V3.2 the cache row read d_c + d_R over 704 (= 512 + 64 + 128, its indexer key d_I
    # included) and decode FLOPs 278,528·t, though attention reads only its top k = 2,048 keys. Now the formula names
    # d_I, the FLOPs take t_k = min(t, k) for attention and t for the indexer's scores, 2·n_I·(d_I + 1) = 2·64·129 =
    # 16,512 a key (MLA.flops' attn/index_scores), and the indexer's weights have rows
    got = rows("dims", "deepseek-v3.2", "deepseek-v2-lite")
    by = {r["item"]: r for r in got}
    n_h, c, r = 128, 512, 64
    assert by["cache per token and layer"]["symbolic"] == "d_c + d_R + d_I"
    assert (by["cache per token and layer"]["deepseek-v3.2"], by["cache per token and layer"]["deepseek-v2-lite"]) == \
        (f"{c + r + 128}", f"{c + r}")
    assert by["decode FLOPs per token"]["deepseek-v3.2"] == \
        f"{2 * n_h * (c + r) + 2 * n_h * c:,}·min(t, 2,048) + {2 * 64 * 129:,}·t" == "278,528·min(t, 2,048) + 16,512·t"
    assert by["decode FLOPs per token"]["deepseek-v2-lite"] == f"{2 * 16 * (c + r) + 2 * 16 * c:,}·t"
    assert (by["W_IQ"]["deepseek-v3.2"], by["W_IK"]["deepseek-v3.2"], by["W_IW"]["deepseek-v3.2"]) == \
        ("1,536 × 8,192", "7,168 × 128", "7,168 × 64")
    # the papers' symbolic table, and a model without an indexer, keep the plain forms and no indexer rows
    for table in (rows("dims"), rows("dims", "deepseek-v2")):
        assert not {"W_IQ", "W_IK", "W_IW"} & {r["item"] for r in table}
        assert {r["item"]: r["symbolic"] for r in table if r["kind"] == "MLA"}["cache per token and layer"] == "d_c + d_R"
    # what `cost` counts for one decoded token at context 128k (t = 131,072 keys): 61 layers of 278,528 FLOPs for
    # each of the 2,048 kept keys (absorbed scores and mix), and 16,512 for each key the indexer scores
    step = json.loads(run("cost", "deepseek-v3.2", "--ctx", "128k", "-f", "json").stdout)["flops"]["decode_token_absorbed"]
    assert step["attn/scores"] + step["attn/mix"] == 61 * 278_528 * 2_048
    assert step["attn/index_scores"] == 61 * 16_512 * 131_072


def test_gqa_model_numbers():
    got = {r["item"]: r["llama3-70b"] for r in rows("dims", "llama3-70b")}
    assert got["W_K"] == "8,192 × 1,024" and got["W_Q"] == "8,192 × 8,192"
    assert got["cache per token and layer"] == f"{2 * 8 * 128:,}" and got["decode FLOPs per token"] == f"{4 * 64 * 128:,}·t"


def test_an_output_gate_has_its_row():
    # an audit: Qwen3-Next's q_proj is d × 2·n_h·d_h (16 heads of 256 at d 2,048: 2,048 × 8,192), its second half a
    # sigmoid gate on the attention output; `table dims` showed only the query half. The gate has its own row, which
    # a model without one leaves empty, and which a table of kinds alone does not show
    got = rows("dims", "qwen3-next-80b-a3b", "llama3-70b")
    gate = next(r for r in got if r["item"] == "W_G")
    assert (gate["qwen3-next-80b-a3b"], gate.get("llama3-70b")) == ("2,048 × 4,096", None)
    assert next(r for r in got if r["item"] == "W_Q")["qwen3-next-80b-a3b"] == "2,048 × 4,096"
    assert [r["item"] for r in got][:3] == ["W_Q", "W_G", "W_K"]
    assert not any(r["item"] == "W_G" for r in rows("dims")) and not any(r["item"] == "W_G" for r in rows("dims", "llama3-70b"))


def test_decode_flops_of_keys_and_values_of_different_dims(tmp_path):
    # K ≠ V heads (MiMo-V2-Flash style: d_h 192, d_v 128): a decoded token's q·k costs 2·n_h·d_h per key and its
    # weighted sum of v 2·n_h·d_v per key (FLOPs = 2 × MACs), so 2·8·192 + 2·8·128 = 5,120 per key, not
    # 4·n_h·d_h = 6,144; the same as `cost`'s attn/scores + attn/mix per pair (README, Formulas)
    path = tmp_path / "kv.yaml"
    path.write_text("name: kvtest\nfamily: test\nsource: test\nd_model: 1024\nn_layers: 2\nvocab_size: 1000\n"
                    "tie_embeddings: false\nmax_context: 4096\nffn: {kind: dense, d_ff: 2048}\nlayer_groups:\n"
                    "  - layers: all\n    attention: {kind: gqa, n_heads: 8, n_kv_heads: 2, head_dim: 192, v_head_dim: 128}\n")
    got = {r["item"]: r["kvtest"] for r in rows("dims", str(path))}
    assert got["decode FLOPs per token"] == f"{2 * 8 * 192 + 2 * 8 * 128:,}·t" == "5,120·t"
    assert got["cache per token and layer"] == f"{2 * (192 + 128):,}"  # n_kv·(d_h + d_v), n_kv = 2
    assert got["W_V"] == "1,024 × 256" and got["W_O"] == "1,024 × 1,024"  # n_kv·d_v and n_h·d_v
    # the symbolic column gives the forms these numbers follow, with d_v, and says why; W_Q and W_K keep d_h
    symbolic = {r["item"]: (r["symbolic"], r["note"]) for r in rows("dims", str(path))}
    assert symbolic["W_V"] == ("d × n_kv·d_v", "d_v ≠ d_h in a model shown")
    assert symbolic["W_O"][0] == "n_h·d_v × d" and symbolic["W_K"] == ("d × n_kv·d_h", "")
    assert symbolic["cache per token and layer"][0] == "n_kv·(d_h + d_v)"
    assert symbolic["decode FLOPs per token"][0] == "2·n_h·(d_h + d_v)·t"
    # beside a model whose K and V heads are of one size, the papers' forms stay (d_v = d_h)
    papers = {r["item"]: r["symbolic"] for r in rows("dims", "llama3-70b")}
    assert papers["W_V"] == "d × n_kv·d_h" and papers["decode FLOPs per token"] == "4·n_h·d_h·t"


def test_mla_values_of_another_size_show_d_v(tmp_path):
    # MLA whose v_head_dim (64) differs from qk_nope_head_dim (128): W_UV is d_c × n_h·d_v and W_O n_h·d_v × d in
    # symbols as in numbers (they kept n_h·d_h beside numbers of n_h·d_v); the cache and the absorbed decode, which
    # read the latent, keep the papers' forms
    path = tmp_path / "mla.yaml"
    path.write_text("name: mlatest\nfamily: test\nsource: test\nd_model: 1024\nn_layers: 2\nvocab_size: 1000\n"
                    "tie_embeddings: false\nmax_context: 4096\nffn: {kind: dense, d_ff: 2048}\nlayer_groups:\n"
                    "  - layers: all\n    attention: {kind: mla, n_heads: 8, kv_lora_rank: 256, qk_nope_head_dim: 128,"
                    " qk_rope_head_dim: 32, v_head_dim: 64}\n")
    table = rows("dims", str(path))
    got = {r["item"]: (r["symbolic"], r["note"], r["mlatest"]) for r in table}
    assert got["W_UV"] == ("d_c × n_h·d_v", "value up-projection (eq. 11); d_v ≠ d_h in a model shown", "256 × 512")  # 8·64
    assert got["W_O"] == ("n_h·d_v × d", "output; d_v ≠ d_h in a model shown", "512 × 1,024")
    assert got["W_UK"][0] == "d_c × n_h·d_h" and got["W_UK"][2] == "256 × 1,024"  # 8·128
    assert got["cache per token and layer"][0::2] == ("d_c + d_R", "288")  # 256 + 32
    assert got["decode FLOPs per token"][0] == "2·n_h·(d_c + d_R)·t + 2·n_h·d_c·t"
    assert got["decode FLOPs per token"][2] == f"{2 * 8 * 288 + 2 * 8 * 256:,}·t"
    assert got["decode FLOPs per token"][1] == ("one layer's attention at context t, absorbed: scores over the latent "
                                                "and RoPE key, values mixed in the latent")  # the schedule named
    assert got["W_UV·W_O"][1].startswith("absorbed into the output: per head, W_UV's d_c × d_v block times W_O's "
                                         "d_v × d block") and got["W_UV·W_O"][2] == "2,048 × 1,024"  # 8·256
    papers = {r["item"]: r["symbolic"] for r in rows("dims", "deepseek-v2")}
    assert papers["W_UV"] == "d_c × n_h·d_h" and papers["W_O"] == "n_h·d_h × d"


def test_models_table_defaults_to_the_papers_three():
    out = rows("models")
    assert [r["model"] for r in out] == ["llama3-70b", "gemma3-27b", "deepseek-v2"]
    llama, gemma, ds = out
    assert (llama["d_model"], llama["heads_label"], llama["kv_label"], llama["head_dim_label"], llama["n_layers"]) == \
        (8192, "64", "8", "128", 80)
    assert llama["kv_bytes_per_token"] == 80 * 2 * 8 * 128 * 2 and llama["mha_ratio"] == 8 / 64
    assert llama["kv_cache_bytes"] == 80 * 2 * 8 * 128 * 2 * 128 * K
    # Gemma 3 27B: 10 global layers hold 128k tokens, 52 sliding layers 1024
    assert gemma["kv_cache_bytes"] == 2 * 16 * 128 * 2 * (10 * 128 * K + 52 * 1024) and gemma["mha_ratio"] == 0.5
    # DeepSeek-V2: d_c + d_R = 576 against MHA's 2·n_h·d_h = 2·128·128 (DeepSeek-V2 Table 1)
    assert ds["kv_label"] == "512+64" and ds["kv_bytes_per_token"] == 60 * 576 * 2
    assert ds["mha_ratio"] == 576 / (2 * 128 * 128)
    assert ds["params_active"] < ds["params_total"]


@pytest.mark.slow
def test_tables_paste_into_latex():
    for args in (("dims",), ("dims", "deepseek-v2", "llama3-70b", "gemma3-27b"), ("models",)):
        out = run("table", *args, "-f", "latex", "--caption", "Dims", "--label", "tab:dims").stdout
        check_pasteable(out)
        assert r"\caption{Dims}" in out


def test_bad_kinds_are_one_message():
    res = run("table", "dims", "--kinds", "mha,xyz", ok=False)
    assert res.exit_code == 2 and "xyz" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow  # writes the whole bundle twice
def test_models_table_and_paper_warn_past_a_trained_maximum(tmp_path):
    # as compare does: llama3-70b was trained to 8,192 tokens, the tables' default context is 128k
    line = "warning: llama3-70b: ctx 131,072 exceeds its trained maximum of 8,192 tokens (max_context); computed anyway"
    assert line in run("table", "models", "llama3-70b", "deepseek-v2").stderr
    assert line in run("paper", "llama3-70b", "deepseek-v2", "-o", str(tmp_path / "b")).stderr
    assert "warning" not in run("table", "models", "llama3-70b", "--ctx", "8k").stderr
    res = run("paper", "llama3-70b", "-o", str(tmp_path / "c"), "--ctx", "8k")
    assert "warning" not in res.stderr
    # its figures run to 1M whatever --ctx: one note names the models they pass the maximum of (with matplotlib)
    if importlib.util.find_spec("matplotlib") is not None:
        assert ("note: the figures run to 1,048,576 tokens, past the trained maximum of llama3-70b (8,192): computed "
                "anyway") in res.stderr
        readme = (tmp_path / "c" / "README.md").read_text(encoding="utf-8")
        assert "| `cache.pdf` | figure: KV cache (bf16) against context, 1k to 1M tokens, one sequence (pdf) |" in readme
        assert "| `flops-decode.png` | figure: decode FLOPs per step against context, 1k to 1M tokens" in readme


@pytest.mark.slow
def test_paper_bundle_regenerates_identically(tmp_path):
    import shlex

    out = tmp_path / "bundle"
    run("paper", "llama3-70b", "deepseek-v2", "-o", str(out), "--ctx", "32k")
    tables = ["dims.tex", "dims.md", "dims.csv", "models.tex", "models.md", "models.csv"]
    assert all((out / name).stat().st_size > 0 for name in tables)
    readme = (out / "README.md").read_text(encoding="utf-8")
    command = readme.split("```sh\n")[1].split("\n```")[0]
    assert command == f"kvcalc paper llama3-70b deepseek-v2 -o {shlex.quote(str(out))} --ctx 32k --kv-dtype bf16"
    assert all(f"`{name}`" in readme for name in tables) and "Made by kvcalc " in readme
    # the packages a document needs: the tables' (their first line) and, where the bundle has figures, graphicx
    assert "`\\usepackage{booktabs,array,graphicx}`" in readme
    assert ("`\\includegraphics{cache.pdf}`" in readme) == (out / "cache.pdf").exists()
    before = {name: (out / name).read_bytes() for name in tables}
    run(*shlex.split(command)[1:])  # the recorded command, run again
    assert {name: (out / name).read_bytes() for name in tables} == before
    check_pasteable((out / "models.tex").read_text(encoding="utf-8"))
    rows = (out / "models.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith("model,d_model") and rows[1].startswith("llama3-70b,8192")


TWO_GROUPS = ("name: twogroups\nfamily: test\nsource: test\nd_model: 1024\nn_layers: 6\nvocab_size: 1000\n"
              "tie_embeddings: false\nmax_context: 4096\nffn: {kind: dense, d_ff: 2048}\nlayer_groups:\n"
              "  - name: global\n    layers: [5]\n    attention: {kind: gqa, n_heads: 8, n_kv_heads: 2, head_dim: 128}\n"
              "  - name: local\n    layers: rest\n    sliding_window: 128\n"
              "    attention: {kind: gqa, n_heads: 8, n_kv_heads: 4, head_dim: 64}\n")


def test_dims_shows_every_layer_group_of_other_dimensions(tmp_path):
    # an audit: dims showed only a model's first group of each kind, so Gemma 4's 25 local layers (8 KV heads of
    # 256) were missing beside its 5 global ones (2 of 512). The first group keeps the model's key; each later one
    # of other dimensions is a column of its own, keyed by the model and the group's label
    path = tmp_path / "two.yaml"
    path.write_text(TWO_GROUPS)
    got = {r["item"]: r for r in rows("dims", str(path))}
    first, later = "twogroups", "twogroups (local)"
    assert (got["W_Q"][first], got["W_Q"][later]) == ("1,024 × 1,024", "1,024 × 512")  # d × n_h·d_h
    assert (got["W_K"][first], got["W_K"][later]) == ("1,024 × 256", "1,024 × 256")  # d × n_kv·d_h
    assert (got["cache per token and layer"][first], got["cache per token and layer"][later]) == ("512", "512")
    # 4·n_h·d_h per key: 4·8·128 over t keys, 4·8·64 over the window's min(t, 128)
    assert (got["decode FLOPs per token"][first], got["decode FLOPs per token"][later]) == ("4,096·t", "2,048·min(t, 128)")
    res = run("table", "dims", str(path))
    assert "twogroups (global)" in res.stdout and "twogroups (local)" in res.stdout
    # groups that differ only in their window (Gemma 3's local and global layers) stay one column
    (gemma3,) = [k for k in rows("dims", "gemma3-27b")[0] if k.startswith("gemma3")]
    assert gemma3 == "gemma3-27b"


@pytest.mark.parametrize("model, expected", [
    # an audit: a column showed 4·n_h·d_h·t for every layer, windows and chunks aside. Gemma 3 27B: 32 heads of 128,
    # 10 global layers and 52 with a window of 1,024; Mistral 7B: 32 of 128, a window of 4,096 on every layer
    ("gemma3-27b", "16,384·t (global); 16,384·min(t, 1,024) (local)"), ("mistral-7b", "16,384·min(t, 4,096)"),
    # gpt-oss: 64 heads of 64, every other layer a window of 128 (its first layer local)
    ("gpt-oss-20b", "16,384·min(t, 128) (local); 16,384·t (global)"),
    # Llama 4: 40 heads of 128; three layers in four chunked at 8,192 (a query sees its own chunk's keys)
    ("llama4-scout", "20,480·((t − 1) mod 8,192 + 1) (chunked); 20,480·t (global)"),
    ("llama4-maverick", "20,480·((t − 1) mod 8,192 + 1) (chunked-dense, chunked); 20,480·t (global)"),
])
def test_dims_decode_flops_attend_what_the_window_or_chunk_shows(model, expected):
    (row,) = [r for r in rows("dims", model) if r["item"] == "decode FLOPs per token"]
    assert row[model] == expected


def test_dims_decode_forms_sum_to_the_decode_figures():
    # the forms, summed over Gemma 3 27B's layers at t = 5,000, are the attention part of its decode step
    from kvcalc.costs.flops import attention_part, decode_flops
    from kvcalc.settings import Settings

    got = attention_part(decode_flops(spec("gemma3-27b"), Settings(ctx=5000)))
    assert got == 10 * 16_384 * 5000 + 52 * 16_384 * 1024
    # the bundled Gemma 4: its global layers have no W_V (k_eq_v), its local ones do
    w_v = next(r for r in rows("dims", "gemma4-26b-a4b") if r["item"] == "W_V")
    assert "gemma4-26b-a4b" not in w_v and w_v["gemma4-26b-a4b (local)"] == "2,816 × 2,048"


def test_kinds_no_model_has_are_said_not_silently_dropped():
    # an audit: `table dims llama3-70b --kinds mha` printed an empty table with exit 0, and `--kinds mha,gqa` dropped
    # MHA without a word. A kind no model given has is refused when it is all that was asked, else noted on stderr
    res = run("table", "dims", "llama3-70b", "--kinds", "mha", ok=False)
    assert res.exit_code == 1 and "llama3-70b has no MHA layers (kinds there: gqa)" in res.stderr and not res.stdout
    res = run("table", "dims", "llama3-70b", "--kinds", "mha,gqa")
    assert "note: --kinds: llama3-70b has no MHA layers; left out" in res.stderr
    assert {r["kind"] for r in rows("dims", "llama3-70b", "--kinds", "mha,gqa")} == {"GQA"}
    # without --kinds, the kinds the models have are the table: nothing to note (a review: the note quoted an option
    # not given); a model with none of the four is refused, naming what the table lists
    res = run("table", "dims", "llama3-70b")
    assert "note" not in res.stderr and {r["kind"] for r in rows("dims", "llama3-70b")} == {"GQA"}
    # and --units is no option of a table of shapes and counts
    assert run("table", "dims", "--units", "si", ok=False).exit_code == 2
    # without models every kind asked is the papers' symbolic table
    assert {r["kind"] for r in rows("dims", "--kinds", "mha")} == {"MHA"}


def test_dims_show_an_encoder_decoder_models_cross_attention():
    # a review: Whisper's column gave its self-attention's 5,120·t alone, where a decoded token's query also attends
    # the 1,500 encoder positions in every decoder layer. Whisper large-v3: 20 heads of 64 (d_model 1,280), a
    # cross-attention of the same heads in each of its 32 decoder layers (config.json decoder_attention_heads)
    got = {r["item"]: (r["symbolic"], r["whisper-large-v3"]) for r in rows("dims", "whisper-large-v3")}
    assert got["cross-attention cache per encoder position and layer"] == ("2·n_h·d_h", f"{2 * 20 * 64:,}")
    assert got["cross-attention decode FLOPs per token"] == ("4·n_h·d_h·s", f"{4 * 20 * 64:,}·s")
    # the form, summed over the 32 decoder layers at s = 1,500, is cost's cross-attention part of a decode step
    flops = json.loads(run("cost", "whisper-large-v3", "--ctx", "100", "-f", "json").stdout)["flops"]["decode_token"]
    assert flops["cross/scores"] + flops["cross/mix"] == 32 * 5120 * 1500
    # and the cache form, over the layers and positions, is the cross part of its cache (bf16: 2 bytes)
    (row,) = json.loads(run("compare", "whisper-large-v3", "--ctx", "1", "-f", "json").stdout)
    assert row["kv_cache_bytes"] == 32 * 2560 * 1500 * 2 + 32 * 2560 * 1 * 2  # and the one token's self-attention K/V
    # models without one, and the kinds alone, have no such rows
    for args in (("dims", "llama3-70b"), ("dims",)):
        assert not [r for r in rows(*args) if r["item"].startswith("cross-attention")]


def test_two_models_of_one_name_are_refused_where_names_key_the_output(tmp_path):
    # a review: paper wrote its tables with the model twice (its figures skipped), and table dims keys its columns by
    # name, so two different specs of one name would have been one column
    res = run("table", "dims", "gpt2", "gpt2", ok=False)
    assert res.exit_code == 1 and "table dims: two models are named 'gpt2', whose columns would be one" in res.stderr
    res = run("paper", "gpt2", "gpt2", "-o", str(tmp_path / "bundle"), ok=False)
    assert res.exit_code == 1 and "paper: two models are named 'gpt2'" in res.stderr
    assert not (tmp_path / "bundle").exists()


def test_ratios_and_bounds_say_what_they_compare():
    # a usability review: 'vs MHA' beside 'KV cache at ctx' read as a ratio of caches at ctx (mistral-7b at 1M:
    # 512 MiB against MHA's 512 GiB is 0.001, the column said 0.250: its per-token ratio); compare's Fits said yes at
    # a batch fit refused (it has no reserve and no activations)
    out = run("table", "models", "mistral-7b", "--ctx", "1M").stdout
    assert "Per token" in out and "vs MHA" in out and "0.250×" in out
    from kvcalc.fields import figures_of
    from kvcalc.figures import CostFigures

    fits = next(f for f in figures_of(CostFigures) if f.key == "fits_in_memory")
    assert "no reserve, no activations" in fits.meaning


def test_mla_rows_cite_deepseek_v2s_equations():
    # a tables review: W_QR and W_KR cited eq. 13 and 11, which are q_C = W_UQ c_Q and v_C = W_UV c_KV; DeepSeek-V2
    # §2.1.2-2.1.3 number c_KV (9), k_C (10), v_C (11), c_Q (12), q_C (13), q_R (14), k_R (15)
    from kvcalc.tables import dims_rows

    rows, _ = dims_rows([], ("mla",))
    notes = {r["item"]: r["note"] for r in rows}
    assert [notes[w].split("(eq. ")[1][:2].rstrip(")") for w in ("W_DKV", "W_UK", "W_UV", "W_DQ", "W_UQ", "W_QR", "W_KR")] \
        == ["9", "10", "11", "12", "13", "14", "15"]
    assert "per head" in notes["W_UQ·W_UKᵀ"] and "d_c' × d_c" in notes["W_UQ·W_UKᵀ"] and "per head" in notes["W_UV·W_O"]


def test_models_table_marks_a_context_past_a_models_maximum():
    # a review: the default paper table put Llama 3 70B (8,192 tokens) at 128k with the warning on stderr alone, which a
    # pasted table leaves behind; a column says it when a row passes its maximum, and is left out when none does
    out = run("table", "models", "-f", "latex").stdout
    assert "Over" in out and "max ctx" in out
    rows = [line.removesuffix(r" \\").split(" & ") for line in out.splitlines() if line.startswith(("llama3-70b", "gemma3"))]
    assert [cells[-1] for cells in rows] == ["yes", "no"]
    assert "max ctx" not in run("table", "models", "--ctx", "8k", "-f", "latex").stdout


def test_table_dims_refuses_a_model_named_as_one_of_its_own_columns(tmp_path):
    # a review: the model columns are keyed by name beside the table's own (kind, item, symbolic, note), so a model
    # named 'kind' overwrote the Kind column with its shapes (GQA's row read '8,192 × 8,192' where 'GQA' belongs) and
    # one named 'note' the notes; every format. Such a name is refused, as two models of one name are
    from conftest import ROOT

    for name in ("kind", "item", "symbolic", "note"):
        path = tmp_path / f"{name}.yaml"
        path.write_text((ROOT / "model_specs" / "llama3-8b.yaml").read_text().replace("name: llama3-8b", f"name: {name}"))
        for fmt in ("table", "csv", "json"):
            res = run("table", "dims", str(path), "-f", fmt, ok=False)
            assert res.exit_code == 1 and res.stdout == "", res
            assert f"table dims: a model is named {name!r}, as the table's own column {name!r} is" in res.stderr

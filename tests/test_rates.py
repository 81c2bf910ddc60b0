"""Closed forms per layer group (#11): a layer's FLOPs as rates of its work, a pass as a sum over groups of (layers) ×
(one layer), totals without breakdowns, MLA's crossover solved instead of searched, and no loop over layers."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import pytest

from conftest import ALL_BUNDLED, run, spec
from kvcalc.attention import Work
from kvcalc.attention.base import MAX_LAYERS, MAX_TOKENS
from kvcalc.costs import flops
from kvcalc.costs.cache import kv_cache
from kvcalc.costs.params import ffn_of_layer
from kvcalc.costs.rates import Direct, Rates, rates
from kvcalc.errors import KvcalcError
from kvcalc.figures import figures
from kvcalc.settings import Settings
from kvcalc.spec import ModelSpec

WORKS = [Work(1, 1, 1), Work(5, 9, 5, 11), Work(4096, 8_390_656, 4096), Work(7, 0, 0), Work(2**40, 2**79, 2**40, 2**79)]


# ---------------------------------------------------------------- rates


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_every_bundled_layer_is_affine_in_its_work(name):
    s = spec(name)
    for g in s.groups:
        mixers = [(g.attention, g.layer)] + ([(g.parallel, g.parallel_layer)] if g.parallel else [])
        mixers += [(g.cross, g.cross_layer)] if g.cross else []
        for kind, layer in mixers:
            for schedule in ("naive", "absorbed"):
                r = rates(lambda w, kind=kind, layer=layer, schedule=schedule: kind.flops(layer, w, schedule))
                assert isinstance(r, Rates), f"{name} {kind.kind}: not affine in its work"
                for w in WORKS:
                    exact = kind.flops(layer, w, schedule)
                    assert list(r.at(w).items()) == list(exact.items())
                    assert r.total(w) == sum(exact.values())


def test_a_layer_that_is_not_affine_is_asked_at_every_work():
    chunked = lambda w: {"attn/scan": 2 * -(-w.tokens // 64), "attn/o": 3 * w.tokens}  # noqa: E731  ceil(tokens / 64)
    r = rates(chunked)
    assert isinstance(r, Direct)
    assert r.at(Work(65, 0, 0)) == {"attn/scan": 4, "attn/o": 195} and r.total(Work(65, 0, 0)) == 199
    assert isinstance(rates(lambda w: {"a": w.tokens} if w.tokens else {}), Direct)  # components depend on the work


# ---------------------------------------------------------------- a pass: groups × one layer, in layer order


def layer_by_layer(s: ModelSpec, work, tokens: int, logits: int, schedule: str, enc: int, cross_kv: int, mtp: bool,
                   drafts: int = 0) -> dict:
    """The pass as kvcalc counted it before #11: every layer added one by one (the reference for values and order);
    `drafts`: each MTP layer's draft logits (a speculative step's: one), else at the pass's logits."""
    total: Counter = Counter()
    for group in s.groups:
        layer = Counter(group.attention.flops(group.layer, work(group), schedule))
        layer.update(flops._cross(group, tokens, enc, cross_kv, schedule))
        if group.parallel is not None:
            layer.update(group.parallel.flops(group.parallel_layer, Work(work(group).tokens, 0, 0), schedule))
        for _ in group.layers:
            total.update(layer)
    for i in range(s.n_layers):
        total.update(flops.ffn_flops(ffn_of_layer(s, i), s.d_model, tokens))
    g = s.mtp_group() if mtp else None
    if g is not None:
        block = Counter(g.attention.flops(g.layer, work(g), schedule))
        block.update(flops.ffn_flops(ffn_of_layer(s, s.n_layers - 1), s.d_model, tokens))
        for k, v in block.items():  # the block's components summed under their prefix (DeepSeek-V3 §2.2)
            total[f"mtp/{k.split('/')[0]}"] += s.mtp_layers * v
        total["mtp/proj"] += s.mtp_layers * 2 * tokens * 2 * s.d_model * s.d_model
        total["mtp/head"] += s.mtp_layers * 2 * (drafts or logits) * s.d_model * s.vocab_size  # each draft's logits (§2.2, eq. 23)
    total["lm_head"] = 2 * logits * s.d_model * s.vocab_size
    return {k: v for k, v in total.items() if v}


SETTINGS = [Settings(ctx=1), Settings(ctx=4096, batch=3, gen=100, mtp=True), Settings(ctx=33_000, mla_cache="expanded"),
            Settings(ctx=2**20, dense_attn=True, mla_schedule="naive", enc_ctx=77)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_a_pass_is_its_layers_one_by_one_and_its_total_their_sum(name):
    s = spec(name)
    for at in SETTINGS:
        passes = [flops._prefill(s, at), flops._prefill(s, at, "all"), flops._decode(s, at),
                  flops._generate(s, at, True), flops._generate(s, at, False)]
        for p in passes:
            exact = layer_by_layer(s, p.work, p.tokens, p.logits, p.schedule, p.enc, p.cross_kv, p.mtp, p.drafts)
            assert list(p.breakdown(s).items()) == list(exact.items())  # the same values in the same order
        assert flops.prefill_total(s, at) == sum(flops.prefill_flops(s, at).values())
        assert flops.decode_total(s, at) == sum(flops.decode_flops(s, at).values())
        for cached in (True, False):
            assert flops.generate_total(s, at, cached) == sum(flops.generate_flops(s, at, cached).values())


# ---------------------------------------------------------------- MLA's crossover: solved, as the search found it


def affine_between(caps: list[tuple[int, int]], const: int):
    """const + Σ slope·min(t, cap): affine between the caps, as the decode gap is."""
    return lambda t: const + sum(slope * min(t, cap) for slope, cap in caps)


@pytest.mark.parametrize("caps, const", [
    ([(3, 1 << 40)], -10), ([(3, 1 << 40)], 5), ([(3, 1 << 40)], -3), ([(0, 1 << 40)], -1),
    ([(5, 100), (2, 1 << 40)], -1000), ([(5, 100), (2, 1 << 40)], -499), ([(5, 100), (1, 4096)], -10**6),
    ([(1, 7), (1, 9), (1, 1 << 40)], -20), ([(7, 1 << 40)], -7 * (1 << 30)), ([(7, 1 << 40)], -7 * (1 << 30) + 1),
    ([(2, 50), (-1, 1 << 40)], -10),  # falls after 50: the search's answer
])
def test_the_crossover_solved_is_the_searched_one(caps, const):
    gap, limit = affine_between(caps, const), 1 << 30
    assert flops.first_positive(gap, {c for _, c in caps}, limit) == flops._search(gap, limit)


def mla(window: int | None = None, chunk: int | None = None, topk: int | None = None) -> ModelSpec:
    att = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 64, "qk_nope_head_dim": 2, "qk_rope_head_dim": 2,
           "v_head_dim": 2}
    if topk:
        att.update(index_n_heads=2, index_head_dim=8, index_topk=topk)
    local = {"layers": "0-1", "attention": att, "sliding_window": window, "attention_chunk_size": chunk}
    return ModelSpec.model_validate({
        "name": "tiny-mla", "family": "test", "d_model": 64, "n_layers": 4, "vocab_size": 100, "max_context": 1 << 20,
        "ffn": {"kind": "dense", "d_ff": 128}, "layer_groups": [{k: v for k, v in local.items() if v is not None},
                                                                {"layers": "rest", "attention": att}]})


@pytest.mark.parametrize("model", [mla(), mla(window=3), mla(topk=2), mla(window=5, topk=3)],
                         ids=["plain", "window", "topk", "window-topk"])
def test_mla_crossover_is_the_binary_searchs(model):
    one = Settings(ctx=1)

    def gap(t: int) -> int:
        at = one.at(t)
        return (sum(flops.decode_flops(model, at.with_schedule("naive")).values())
                - sum(flops.decode_flops(model, at.with_schedule("absorbed")).values()))

    for limit in (1, 2, 3, 1 << 30):
        assert flops._crossover(model, "latent", limit) == flops._search(gap, limit)


def chunked_mla(*local: dict[str, int]) -> ModelSpec:
    """One MLA layer per entry of `local` (its chunk or window, or {} for full attention), each of n_h 4, d_c 16,
    d_nope 1, d_R 64, d_v 1 (an audit's spec): the naive step costs 8·(16·2 + 1 + 64 + 1) = 784 FLOPs a key, the
    absorbed one 8·(16 + 64 + 16) = 768 and 8·(16 + 16) = 256 more a token (q_absorb, v_up), so a layer attending k
    keys adds 16·k − 256 to the gap naive − absorbed."""
    att = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 1, "qk_rope_head_dim": 64,
           "v_head_dim": 1}
    names = {"chunk": "attention_chunk_size", "window": "sliding_window"}
    groups = [{"layers": [i], "attention": att, **{names[k]: v for k, v in g.items()}} for i, g in enumerate(local)]
    return ModelSpec.model_validate({
        "name": "chunked-mla", "family": "test", "d_model": 64, "n_layers": len(local), "vocab_size": 100,
        "max_context": 1 << 20, "ffn": {"kind": "dense", "d_ff": 32}, "layer_groups": groups})


def by_hand(local: list[dict[str, int]], t: int) -> int:
    """The gap naive − absorbed at t of chunked_mla(*local), summed by hand: Σ 16·k − 256 over its layers."""
    def keys(g: dict[str, int]) -> int:
        return (t - 1) % g["chunk"] + 1 if "chunk" in g else min(t, g.get("window", t))
    return sum(16 * keys(g) - 256 for g in local)


@pytest.mark.slow
@pytest.mark.parametrize("local, expected", [
    # one chunked layer: k = (t − 1) mod C + 1 must pass 16 (an audit found None at C 30 and 541,590,017 at C 100:
    # a binary search over 1 … 2^30 lands where 2^30 mod C puts it)
    ([{"chunk": 30}], 17), ([{"chunk": 100}], 17), ([{"chunk": 17}], 17), ([{"chunk": 24}], 17),
    ([{"chunk": 16}], None), ([{"chunk": 64}], 17),
    # with a full layer: t + k > 32; at C 10, t 11 … 20 reach 30, t 21 … 30 pass at 27
    ([{"chunk": 10}, {}], 27), ([{"chunk": 40}, {}], 17),
    # two chunks: k1 + k2 > 32 is never reached by 6 + 10
    ([{"chunk": 6}, {"chunk": 10}], None),
    # three: k1 + k2 + k3 > 48. C 12, 20, 20: to t 40 at most 48 (t 20: 8 + 20 + 20), then t 59: 11 + 19 + 19 = 49
    ([{"chunk": 12}, {"chunk": 20}, {"chunk": 20}], 59),
    # C 14, 21, 20: to t 20 at most 46 (6 + 20 + 20), t 21 … 39 at most 48 (t 39: 11 + 18 + 19), t 40: 12 + 19 + 20
    ([{"chunk": 14}, {"chunk": 21}, {"chunk": 20}], 40),
    # C 9 and 7 with a window of 30 and a full layer: k1 + k2 + 2·t > 64 from t ≤ 30; t 25: 7 + 4 + 50 = 61, t 26: 65
    ([{"chunk": 9}, {"chunk": 7}, {"window": 30}, {}], 26),
])
def test_mla_crossover_under_chunks_is_the_first_t_by_hand(local, expected):
    model = chunked_mla(*local)
    scan = next((t for t in range(1, 4001) if by_hand(local, t) > 0), None)
    assert scan == expected
    one = Settings(ctx=1)
    for t in range(1, 200):  # kvcalc's decode figures give the same gap as the hand sum
        at = one.at(t)
        assert (flops.decode_total(model, at.with_schedule("naive"))
                - flops.decode_total(model, at.with_schedule("absorbed"))) == by_hand(local, t)
    assert flops._crossover(model, "latent", 1 << 30) == expected
    assert flops._crossover(model, "latent", 16) == (None if expected is None or expected > 16 else expected)
    assert flops._crossover(model, "latent", 59) == (None if expected is None or expected > 59 else expected)


def test_mla_crossover_under_chunks_far_apart_is_refused_not_scanned():
    """MLA chunked at 3 and 2^20 + 1 with d_c 2^19 (each layer's gap 16·k − 16·d_c): the first t, past 2^20, would
    need a million chunk ends checked; the command says so instead of running for minutes."""
    att = {"kind": "mla", "n_heads": 4, "kv_lora_rank": 1 << 19, "qk_nope_head_dim": 1, "qk_rope_head_dim": 4,
           "v_head_dim": 1}
    model = ModelSpec.model_validate({
        "name": "far", "family": "test", "d_model": 64, "n_layers": 2, "vocab_size": 100, "max_context": 1 << 30,
        "ffn": {"kind": "dense", "d_ff": 32}, "layer_groups": [
            {"layers": [i], "attention": att, "attention_chunk_size": c} for i, c in enumerate((3, (1 << 20) + 1))]})
    with pytest.raises(KvcalcError, match=r"chunked at 3, 1,048,577 tokens repeat only every 3,145,731"):
        flops._crossover(model, "latent", 1 << 30)
    # with a chunk of 1 (one key always, no reset): 16·(1 + k2) > 32·d_c, k2 = 2^20 at t = 2^20; alone, k > d_c
    assert flops._crossover(chunked(att, (1, 1 << 20)), "latent", 1 << 30) == 1 << 20
    assert flops._crossover(chunked(att, (1 << 20,)), "latent", 1 << 30) == (1 << 19) + 1


def chunked(att: dict, chunks: tuple[int, ...]) -> ModelSpec:
    return ModelSpec.model_validate({
        "name": "chunks", "family": "test", "d_model": 64, "n_layers": len(chunks), "vocab_size": 100,
        "max_context": 1 << 30, "ffn": {"kind": "dense", "d_ff": 32}, "layer_groups": [
            {"layers": [i], "attention": att, "attention_chunk_size": c} for i, c in enumerate(chunks)]})


# ---------------------------------------------------------------- no loop over layers or positions


def deep(n_layers: int, groups: int = 2) -> ModelSpec:
    """A model of n_layers, MoE with leading dense layers, and MTP: in two groups (a window on five layers of every six)
    or in one group of full attention."""
    gqa = {"kind": "gqa", "n_heads": 64, "n_kv_heads": 8, "head_dim": 128}
    two = [{"name": "global", "layers": {"every": 6, "start": 5}, "attention": gqa},
           {"name": "local", "layers": "rest", "attention": gqa, "sliding_window": 4096}]
    return ModelSpec.model_validate({
        "name": "deep", "family": "test", "d_model": 8192, "n_layers": n_layers, "vocab_size": 128_256,
        "max_context": MAX_TOKENS, "mtp_layers": 1,
        "ffn": {"kind": "moe", "n_routed_experts": 64, "n_experts_per_tok": 8, "moe_d_ff": 2048, "n_shared_experts": 1,
                "first_k_dense": 3, "dense_d_ff": 28_672},
        "layer_groups": two if groups == 2 else [{"name": "all", "layers": "all", "attention": gqa}]})


def calls(fn) -> int:
    """Python function calls made by fn() (a loop over layers or positions would make more for a deeper model)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def test_the_deepest_spec_is_a_million_layers():
    assert MAX_LAYERS == 10**6  # what the test asks for; kvcalc.attention.base


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 2])
def test_figures_make_no_more_calls_for_the_deepest_model_than_for_a_shallow_one(groups):
    at = Settings(ctx=MAX_TOKENS, batch=8, mtp=True, tp=8, pp=2)
    shallow_spec, deepest_spec = deep(12, groups), deep(MAX_LAYERS, groups)
    figures(deep(12, groups), at)  # imports and caches warmed
    shallow, deepest = calls(lambda: figures(shallow_spec, at)), calls(lambda: figures(deepest_spec, at))
    assert abs(deepest - shallow) < 50, (shallow, deepest)  # windows cap other branches: a few calls more or less


@pytest.mark.slow
def test_fit_makes_no_more_calls_for_the_deepest_model_than_for_a_shallow_one():
    from fractions import Fraction

    from kvcalc.fit import fit
    from kvcalc.hardware import load_hardware

    hw, at = load_hardware("h100-80gb"), Settings(ctx=4096, batch=1, tp=8, pp=4)
    shallow_spec, deepest_spec = deep(12), deep(MAX_LAYERS)
    fit(deep(12), at, hw, Fraction(1, 10), 2048, "ctx")  # imports and caches warmed
    for solve in ("ctx", "batch"):
        shallow = calls(lambda: fit(shallow_spec, at, hw, Fraction(1, 10), 2048, solve))  # noqa: B023
        deepest = calls(lambda: fit(deepest_spec, at, hw, Fraction(1, 10), 2048, solve))  # noqa: B023
        # a loop over layers would make at least 10^6; the two solve different searches (the deepest fits no token)
        assert max(shallow, deepest) < 5_000, (solve, shallow, deepest)


@pytest.mark.slow
@pytest.mark.parametrize("groups", [1, 2])
def test_compare_of_a_million_layers_at_the_longest_context_takes_under_a_second(tmp_path, groups):
    path = tmp_path / "deep.yaml"
    path.write_text(deep(MAX_LAYERS, groups).model_dump_json(exclude_none=True))
    start = time.process_time()
    out = run("compare", str(path), "--ctx", str(MAX_TOKENS), "--columns", "all", "--hardware", "h100-80gb",
              "--mtp", "--tp", "8", "-f", "json")
    assert time.process_time() - start < 1.0
    row = json.loads(out.stdout)[0]
    assert (row["n_layers"], row["ctx"]) == (10**6, 2**40)
    if groups == 1:  # 2·n_kv·d_h elements of 2 bytes a token, on 10^6 layers and the MTP layer, for 2^40 tokens
        assert row["kv_bytes_per_token"] == 2 * 8 * 128 * 2 * (10**6 + 1)
        assert row["kv_cache_bytes"] == 2 * 8 * 128 * 2 * (10**6 + 1) * 2**40


@pytest.mark.slow
def test_show_of_a_million_layers_lists_them_in_short(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(deep(MAX_LAYERS).model_dump_json(exclude_none=True))
    start = time.process_time()
    out = run("show", str(path), "--ctx", str(MAX_TOKENS), "-f", "json")
    assert time.process_time() - start < 2.0
    groups = {g["group"]: g for g in json.loads(out.stdout)["groups"]}
    # every sixth layer from 5: 166,666 runs of one; the rest: a run of five before each, and 999,996-999,999
    assert groups["global"]["layers"] == "5, 11, 17, 23, 29, 35, 41, 47, …, 999989, 999995 (166666 runs)"
    assert groups["local"]["layers"] == "0-4, 6-10, 12-16, 18-22, 24-28, 30-34, 36-40, 42-46, …, 999990-999994, 999996-999999 (166667 runs)"
    assert (groups["global"]["n_layers"], groups["local"]["n_layers"]) == (166_666, 833_334)


@pytest.mark.slow
def test_show_per_layer_is_bounded_by_its_format(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text(deep(2_001).model_dump_json(exclude_none=True))
    err = run("show", str(path), "--per-layer", ok=False)
    assert err.exit_code == 2
    assert "deep has 2,001 layers: --per-layer prints one row a layer, at most 2,000 in table (csv and json: 10,000)" in err.stderr
    assert run("show", str(path), "--per-layer", "-f", "csv").exit_code == 0
    rows = json.loads(run("show", str(path), "--per-layer", "-f", "json").stdout)["layers"]
    assert [r["layer"] for r in rows] == list(range(2_001))
    path.write_text(deep(10_001).model_dump_json(exclude_none=True))
    assert "at most 10,000; without it" in run("show", str(path), "--per-layer", "-f", "json", ok=False).stderr
    assert run("show", str(path), "-f", "json").exit_code == 0


@pytest.mark.slow
def test_a_spec_missing_most_of_a_million_layers_says_so_in_one_short_line(tmp_path):
    text = deep(MAX_LAYERS).model_dump_json(exclude_none=True).replace('{"name":"local","layers":"rest"', '{"name":"local","layers":"0-4"')
    path = tmp_path / "holes.yaml"
    path.write_text(text)
    start = time.process_time()
    err = run("show", str(path), ok=False)
    assert time.process_time() - start < 2.0
    # layer 5 and every sixth after it are global, 0-4 local: the five between two global layers and the last four
    assert ("layers 6-10,12-16,18-22,24-28,30-34,36-40,42-46,48-52,…,999990-999994,999996-999999 (166666 runs) "
            "belong to no group") in err.stderr
    assert len(err.stderr) < 400


# ---------------------------------------------------------------- rows: only what is shown, the same as the typed results


@pytest.mark.parametrize("name", ["deepseek-v3", "gemma3-27b", "whisper-large-v3", "qwen3-next-80b-a3b"])
def test_a_row_is_its_typed_results(name):
    from kvcalc.fields import as_row
    from kvcalc.figures import figures_row
    from kvcalc.rows import _cache_values, cache_figures

    s = spec(name)
    for at in (Settings(ctx=5000, batch=3, tp=2, engine="vllm", mtp=True), Settings(ctx=1 << 20, kv_dtype="int4",
                                                                                   kv_quant="g64", mla_cache="expanded")):
        report = kv_cache(s, at)
        assert figures_row(s, at, report) == as_row(figures(s, at))
        assert _cache_values(s, report, 7) == as_row(cache_figures(s, report, 7))


def test_compare_computes_costs_only_where_they_are_shown(monkeypatch):
    import kvcalc.figures

    def refuse(*args):
        raise AssertionError("cost figures computed for a table that shows none")

    import kvcalc.rows

    for module in (kvcalc.figures, kvcalc.rows):
        monkeypatch.setattr(module, "context_figures", refuse)
        monkeypatch.setattr(module, "fixed_figures", refuse)
    monkeypatch.setattr(kvcalc.figures, "figure_values", refuse)
    assert "KV cache" in run("compare", "llama3-70b", "deepseek-v2", "--ctx", "128k").stdout
    assert run("compare", "llama3-70b", "--ctx", "128k", "-f", "json", ok=False).exit_code == 1
    assert run("compare", "llama3-70b", "--columns", "cost", ok=False).exit_code == 1
    assert run("sweep", "llama3-70b", "--columns", "kv_cache_bytes", "-f", "markdown").exit_code == 0
    res = run("compare", "llama3-8b", "--dp-attention", ok=False)  # a layout that does not apply still fails
    assert res.exit_code == 1 and "--dp-attention: llama3-8b has no MLA layer" in res.stderr


# ---------------------------------------------------------------- a pass's total from its coefficients (the fast path)


FAST = SETTINGS + [Settings(ctx=1, gen=1), Settings(ctx=7, gen=3, batch=5, mla_cache="expanded", mtp=True, enc_ctx=3),
                   Settings(ctx=1, gen=4097, mla_schedule="naive", dense_attn=True)]


def every_pass(s: ModelSpec, at: Settings) -> list:
    schedules = [at.with_schedule(name) for name in ("naive", "absorbed") if at.mla_cache == "latent" or name == "naive"]
    return [flops._prefill(s, at), flops._prefill(s, at, "all"), flops._generate(s, at, True),
            flops._generate(s, at, False)] + [flops._decode(s, x) for x in schedules]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_a_pass_total_from_its_coefficients_is_forward_totals(name):
    s = spec(name)
    for base in FAST:
        for ctx in (1, 2, 127, 1000, 4097, 65_537, 1_000_003, 2**40):
            for p in every_pass(s, base.at(ctx)):
                exact = flops.forward_total(s, p.work, p.tokens, p.logits, p.schedule, p.enc, p.cross_kv, p.mtp,
                                            p.drafts)
                assert p.total(s) == exact, (name, base, ctx, p.schedule)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_a_row_of_passes_is_each_pass_on_its_own(name):
    s = spec(name)
    for base in FAST:
        for ctx in (1, 2, 127, 4097, 1_000_003, 2**40):
            at = base.at(ctx)
            row = flops.row_flops(s, at)
            assert row == flops._row_apart(s, at), (name, base, ctx)
            assert row[:4] == (flops.prefill_total(s, at), flops.decode_total(s, at), flops.generate_total(s, at, True),
                               flops.generate_total(s, at, False))
            for schedule, total in row.decode_by_schedule.items():
                assert total == sum(flops.decode_flops(s, at.with_schedule(schedule)).values())


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_BUNDLED)
def test_a_groups_keys_are_its_kinds_answers(name):
    s = spec(name)
    for g in s.groups + ((s.mtp_group(),) if s.mtp_layers else ()):
        att, layer = g.attention, g.layer
        for n in (1, 2, 127, 4097, 65_537, 2**40):
            asked = (att.keys_at(layer, n), att.scan_at(layer, n), att.keys_prefill(layer, n), att.scan_prefill(layer, n),
                     att.keys_prefills(layer, n), att.scan_prefills(layer, n))
            assert flops.keys_up_to(g, n) == asked, (name, g.label, n)


def test_a_row_with_a_layer_that_is_not_affine_is_each_pass_on_its_own():
    s = spec("gemma3-27b").model_copy()
    plan = flops._pass_plan(s, "naive")
    groups = tuple(g.__class__(g.group, g.n, Direct(g.attention.at), g.cross, g.cross_kv, g.parallel) for g in plan.groups)
    s.__pydantic_private__["_memo"][("pass_plan", "naive")] = plan._replace(groups=groups)  # its attention called directly
    at = Settings(ctx=5000)
    assert flops.row_passes(s, at) is None
    expected = flops.row_flops(spec("gemma3-27b"), at)
    assert flops.row_flops(s, at) == expected


def test_a_pass_with_a_layer_that_is_not_affine_is_forward_total(monkeypatch):
    s = spec("gemma3-27b").model_copy()
    plan = flops._pass_plan(s, "naive")
    groups = tuple(g.__class__(g.group, g.n, Direct(g.attention.at), g.cross, g.cross_kv, g.parallel) for g in plan.groups)
    s.__pydantic_private__["_memo"][("pass_plan", "naive")] = plan._replace(groups=groups)  # its attention called directly
    at = Settings(ctx=5000)
    p = flops._prefill(s, at)
    assert flops._coefficients(s, p) is None
    assert p.total(s) == flops.forward_total(spec("gemma3-27b"), p.work, p.tokens, p.logits, p.schedule, p.enc, 1)


@pytest.mark.slow
@pytest.mark.parametrize("at", [Settings(ctx=1), Settings(ctx=3, batch=3, gen=7, tp=2, pp=3, mtp=True, kv_dtype="int4"),
                                Settings(ctx=1, mla_cache="expanded", kv_dtype="fp8", kv_quant="g64", engine="vllm", dp=2,
                                         enc_ctx=5)])
def test_a_sweep_row_is_its_typed_results(at):
    from kvcalc.fields import as_row
    from kvcalc.rows import cache_figures, iter_compare_rows, model_facts

    # falcon-7b's 71 heads do not split over tp 2: refused (tests/test_parallel.py); engines pad Whisper to its 1,500
    # encoder positions, so another --enc-ctx is refused under one (tests/test_encdec.py)
    specs = [spec(name) for name in ALL_BUNDLED
             if at.pp <= spec(name).n_layers and (at.tp == 1 or spec(name).name != "falcon-7b")
             and not (at.engine and at.enc_ctx and spec(name).family == "whisper")]
    ctxs = [1, 1000, 65_537, 2**30]
    first: dict[int, int] = {}
    for row, report in iter_compare_rows(specs, ctxs, at):
        model = next(sp for sp in specs if sp.name == row["model"])
        x = at.at(report.ctx)
        first.setdefault(report.ctx, report.bytes)
        expected = {**as_row(model_facts(model, report.mla_cache)), **as_row(cache_figures(model, report, first[report.ctx])),
                    **as_row(figures(model, x, kv_cache(model, x)))}
        assert list(row.items()) == list(expected.items()), (row["model"], report.ctx)


def test_cost_says_first_cheaper_where_chunks_make_naive_cheaper_again(tmp_path):
    """A review: with a chunked MLA layer beside a full one (chunked_mla's dims, a chunk of 10) the gap naive −
    absorbed by hand is 16·((t − 1) mod 10 + 1) + 16·t − 512: first positive at t 27 (7 + 27 = 34 > 32), zero again
    at t 31 (1 + 31 = 32: absorbed not cheaper there), so cost says 'first cheaper at', not 'from ... on'; a model
    without chunks (each layer 16·t − 256) keeps 'from ... on', from t 17."""
    local = [{"chunk": 10}, {}]
    assert [t for t in range(25, 34) if by_hand(local, t) > 0] == [27, 28, 29, 30, 32, 33] and by_hand(local, 31) == 0
    assert not flops.crossover_holds(chunked_mla(*local)) and flops.crossover_holds(chunked_mla({}, {}))
    path = tmp_path / "chunked.yaml"
    path.write_text(json.dumps(chunked_mla(*local).model_dump(exclude_defaults=True)))
    out = run("cost", str(path), "--ctx", "5").stdout
    assert "absorbed is first cheaper at context 27 (chunked layers: not at every context after)" in out
    whole = tmp_path / "whole.yaml"
    whole.write_text(json.dumps(chunked_mla({}, {}).model_dump(exclude_defaults=True)))
    assert "absorbed is cheaper from context 17 on" in run("cost", str(whole), "--ctx", "5").stdout


def test_a_parallel_prefill_moves_the_cache_and_states_once_not_the_engines_pages():
    # a review: under a parallel layout the prefill's bytes counted the busiest rank's cache in the engine's whole
    # pages and its states as stored (vLLM's two padded pages, SGLang's three slots a sequence; under pp 1 for a
    # replica, where SGLang keeps 2 under pp 2), where one GPU's roofline (kvcalc.costs.traffic.prefill_bytes) counts
    # the cache written and each state once. Nemotron-H at tp 2, ctx 16 (bf16 cache, its fp32 SSM state fixed by the
    # spec): the same prefill time under no engine, SGLang and vLLM
    def prefill(*engine):
        out = run("compare", "nemotron-h-56b", "--tp", "2", "--hardware", "h100-80gb", "--ctx", "16", *engine,
                  "--columns", "prefill_seconds", "-f", "json")
        return json.loads(out.stdout)[0]["prefill_seconds"]

    assert prefill() == prefill("--engine", "sglang") == prefill("--engine", "vllm")

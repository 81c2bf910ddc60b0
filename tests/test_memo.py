"""The memo of figures a spec keeps (ModelSpec.memo, keyed by hand with the settings each figure reads) never changes
an answer: every figure of a spec asked after many other settings equals the figure of a fresh copy asked once.

A key that left out a setting its figure reads would hand one setting's figure to another (a sweep over that
setting, or the API asked twice in one process); the single-setting tests and the goldens, which ask each spec
once per process or per setting, would not see it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kvcalc import Settings, kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.figures import cost_breakdowns, figures
from kvcalc.fit import fit
from kvcalc.hardware import bundled_hardware, load_hardware
from kvcalc.registry import bundled_names, load_model

DTYPES = ["fp32", "bf16", "fp16", "fp8", "int8", "int4"]


def random_settings(rng: random.Random) -> Settings:
    """Valid settings drawn over every field a figure may read (drawn again until Settings accepts them)."""
    while True:
        tp, dp = rng.choice([1, 1, 2, 4, 8]), rng.choice([1, 1, 2])
        engine = rng.choice([None, None, "ideal", "vllm", "sglang"])
        fields = dict(
            ctx=rng.choice([1, 2, 7, 4096, 4097, 8191, 32768, 131072, rng.randint(1, 2_000_000)]),
            batch=rng.choice([1, 1, 3, 8, 64]), gen=rng.choice([1, 1024, 5000]), kv_dtype=rng.choice(DTYPES),
            weights_dtype=rng.choice(DTYPES), mla_cache=rng.choice(["latent", "expanded"]),
            mla_schedule=rng.choice([None, None, "naive", "absorbed"]), dense_attn=rng.random() < 0.2,
            hardware=load_hardware(rng.choice(bundled_hardware())) if rng.random() < 0.5 else None,
            state_dtype=rng.choice([None, None, "fp32", "bf16", "fp16"]), enc_ctx=rng.choice([None, None, 100, 1500]),
            mtp=rng.random() < 0.3, tp=tp, pp=rng.choice([1, 1, 2, 4]), dp=dp, ep=rng.choice([1, 1, tp * dp, tp]),
            dp_attention=rng.random() < 0.15,
            kv_quant=rng.choice(["none"] * 4 + ["per-token", "per-head", "g64", "fp8-ds-mla"]),
            engine=engine, block_size=rng.choice([None, None, 16, 64, 1]) if engine else None)
        try:
            return Settings(**fields)
        except KvcalcError:
            continue


def answers(spec, s: Settings, solve_ctx: bool) -> dict[str, str]:
    """Every figure the API gives at `s`, as text (a refusal's message where the settings do not apply)."""
    asks = {"cache": lambda: kv_cache(spec, s), "figures": lambda: dataclasses.asdict(figures(spec, s)),
            "breakdowns": lambda: cost_breakdowns(spec, s)}
    if s.hardware is not None:
        asks["fit"] = lambda: fit(spec, s, s.hardware, None, None, "ctx" if solve_ctx else "batch")
    out = {}
    for what, ask in asks.items():
        try:
            out[what] = repr(ask())
        except KvcalcError as exc:
            out[what] = f"refused: {exc}"
    return out


def twin(rng: random.Random, s: Settings) -> Settings:
    """`s` with one field taken from other random settings (the first such that Settings accepts): asked right after
    `s`, it finds the memo entries of `s` under keys that may leave out just that field."""
    other = random_settings(rng)
    names = [f.name for f in dataclasses.fields(Settings)]
    rng.shuffle(names)
    for name in names:
        if getattr(other, name) != getattr(s, name):
            try:
                return dataclasses.replace(s, **{name: getattr(other, name)})
            except KvcalcError:
                continue
    return other


def check(name: str, seed: int, count: int) -> int:
    """Ask one copy of the spec `count` random settings in turn, each followed by its twin (one field changed); each
    answer equals a fresh copy's. Returns how many settings were compared."""
    rng = random.Random(f"{name}/{seed}")
    base = load_model(name).spec
    warm = base.model_copy()  # its own memo, filled as the settings go by
    for _ in range(count):
        s = random_settings(rng)
        solve_ctx = rng.random() < 0.1
        for at in (s, twin(rng, s)):
            assert answers(warm, at, solve_ctx) == answers(base.model_copy(), at, solve_ctx), (name, at)
    return count


def check_rows(name: str, seed: int, count: int) -> int:
    """A sweep's rows (iter_compare_rows: the figures no context changes and the row plan computed once per model and
    settings, then each context's) equal the figures of a fresh copy of the spec at each context, for `count` random
    settings that apply to it and three random contexts each. Returns how many rows were compared."""
    from kvcalc.fields import as_row
    from kvcalc.rows import iter_compare_rows

    rng = random.Random(f"rows/{name}/{seed}")
    base = load_model(name).spec
    compared = applied = 0
    for _ in range(20 * count):  # settings the model refuses (a tp its heads do not split over) drawn again
        if applied == count:
            break
        s = random_settings(rng)
        ctxs = sorted({rng.choice([1, 7, 4095, 4096, 4097, 65_537, rng.randint(1, 2**30)]) for _ in range(3)})
        try:
            rows = list(iter_compare_rows([base.model_copy()], ctxs, s))
        except KvcalcError:
            continue
        applied += 1
        for row, report in rows:
            fresh = base.model_copy()
            at = s.at(report.ctx)
            expected = as_row(figures(fresh, at, kv_cache(fresh, at)))
            assert {k: row[k] for k in expected} == expected, (name, s, report.ctx)
            compared += 1
    return compared


@pytest.mark.parametrize("name", bundled_names())
def test_a_sweeps_rows_are_a_fresh_specs_figures_at_each_context(name):
    assert check_rows(name, 0, 2) > 0


@pytest.mark.parametrize("name", bundled_names())
def test_a_warm_memo_gives_a_fresh_specs_figures(name):
    assert check(name, 0, 3) == 3


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", bundled_names())
def test_a_warm_memo_gives_a_fresh_specs_figures_over_many_settings(name, seed):
    assert check(name, seed, 25) == 25


@pytest.mark.slow
@pytest.mark.parametrize("name", bundled_names())
def test_a_sweeps_rows_are_a_fresh_specs_figures_over_many_settings(name):
    assert check_rows(name, 1, 40) > 0


def test_the_check_sees_a_memo_keyed_without_a_setting_it_reads(monkeypatch):
    # The check itself can fail: a memo whose key leaves out the settings (every key one entry) returns the first
    # figure asked for every later one, and the warm copy's answers then differ from a fresh copy's.
    from kvcalc.spec import ModelSpec

    def careless(self, key, compute, *args):
        memo = self.__pydantic_private__["_memo"]
        if key[0] not in memo:
            memo[key[0]] = compute(*args)
        return memo[key[0]]

    monkeypatch.setattr(ModelSpec, "memo", careless)
    with pytest.raises(AssertionError):
        check("deepseek-v3", 0, 8)

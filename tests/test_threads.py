"""Prefill threads: the same outputs, caches and FLOPs with one thread or several, and a plan that covers them."""

from __future__ import annotations

import threading
import time
import tracemalloc

import numpy as np
import pytest

import kvcalc.backend.causal as causal
import kvcalc.backend.threads as threads
from conftest import run as cli
from conftest import spec
from kvcalc.backend.attention import GroupedQueryAttention, LatentAttention
from kvcalc.backend.memory import plan
from kvcalc.backend.ops import FlopCounter
from kvcalc.backend.runner import RunSettings, layer_order, run

CAN_SET_BLAS = threads._blas_controller() is not None


@pytest.fixture
def small_bands(monkeypatch):
    """Bands of at most 4096 scores, so that tiny layers split into several chunks of heads (several tasks)."""
    monkeypatch.setattr(causal, "SCORE_CHUNK", 4096)


def prefill_with(layer, x, workers: int, seen: set | None = None):
    layer.workers = workers
    if seen is not None:
        layer.on_block = lambda: seen.add(threading.current_thread().name)
    fc = FlopCounter()
    y, cache = layer.prefill(fc, x)
    return y, cache, dict(fc.by_component)


def gqa_layer(window=None):
    return GroupedQueryAttention(48, 6, 3, 16, window, np.random.default_rng(1), np.float64, block=16)


def mla_layer(mla_cache, window=None):
    return LatentAttention(48, 6, 24, 16, 8, 4, 12, window, np.random.default_rng(2), np.float64, mla_cache, block=16)


@pytest.mark.slow
@pytest.mark.parametrize("make", [gqa_layer, lambda: gqa_layer(window=20), lambda: mla_layer("latent"),
                                  lambda: mla_layer("expanded"), lambda: mla_layer("latent", window=20)],
                         ids=["gqa", "gqa-window", "mla-latent", "mla-expanded", "mla-window"])
def test_threads_change_nothing_measured(make, small_bands):
    x = np.random.default_rng(3).standard_normal((2, 70, 48))
    layer = make()
    kv_heads, g = (layer.h, 1) if isinstance(layer, LatentAttention) else (layer.k, layer.g)
    tiling = causal.prefill_tiling(2, kv_heads, g, 70, layer.window, 16)
    assert len(causal.head_chunks(kv_heads, tiling.chunk)) >= 2  # several tasks for the threads
    y1, cache1, flops1 = prefill_with(layer, x, 1)
    seen: set = set()
    y2, cache2, flops2 = prefill_with(layer, x, 2, seen)
    assert flops2 == flops1  # every product counted once, whichever thread ran it
    assert np.allclose(y2, y1, rtol=1e-12, atol=1e-12)
    assert cache2.tensors.keys() == cache1.tensors.keys()
    for name, t in cache1.tensors.items():
        assert cache2.tensors[name].shape == t.shape and np.array_equal(cache2.tensors[name], t)
    if CAN_SET_BLAS:  # the chunks ran in the pool's threads (which of the two took each is up to the scheduler)
        assert seen and all(name.startswith("kvcalc-prefill") for name in seen)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gqa", "mla"])
def test_threaded_run_matches_the_analytic_model(kind, small_bands):
    # The whole run with several chunks on 2 threads: every cache figure and FLOP component equals kvcalc's own.
    from test_backend import ATTENTION, assert_all_match, tiny

    report = run(tiny(ATTENTION[kind], window=24), RunSettings(ctx=70, decode=3, batch=2, dtype="float64", threads=2))
    assert_all_match(report)


def threads_row(report) -> int:
    return next(r.measured for r in report.rows if r.quantity == "prefill attention threads")


@pytest.mark.parametrize("ctx, ran", [(8, 1), (70, 2)])
def test_the_report_says_how_many_threads_ran(ctx, ran, small_bands):
    # an audit: the row said the threads asked for (2) when the prefill had one task, so one thread ran
    from test_backend import ATTENTION, tiny

    report = run(tiny(ATTENTION["gqa"]), RunSettings(ctx=ctx, decode=1, dtype="float64", threads=2))
    assert threads_row(report) == (ran if CAN_SET_BLAS else 1)


def test_threads_used_records_what_run_tasks_ran_on(monkeypatch):
    with threads.threads_used() as seen:
        threads.run_tasks(lambda task, buffer: None, [0], 4, lambda: None)  # one task: one thread
    assert seen == [1]
    with threads.threads_used() as seen:
        threads.run_tasks(lambda task, buffer: None, list(range(5)), 3, lambda: None)
    assert seen == [3 if CAN_SET_BLAS else 1]
    monkeypatch.setattr(threads, "_blas_controller", lambda: None)  # a BLAS it cannot limit: in turn, on one
    with threads.threads_used() as seen:
        threads.run_tasks(lambda task, buffer: None, list(range(5)), 3, lambda: None)
    assert seen == [1]


def test_without_blas_control_the_tasks_run_in_turn(monkeypatch, small_bands):
    monkeypatch.setattr(threads, "_blas_controller", lambda: None)
    assert threads.usable_workers(4) == 1
    layer, seen = gqa_layer(), set()
    x = np.random.default_rng(3).standard_normal((1, 40, 48))
    prefill_with(layer, x, 4, seen)
    assert seen == {threading.current_thread().name}


@pytest.mark.skipif(not CAN_SET_BLAS, reason="optional: threadpoolctl cannot set this BLAS's thread count")
def test_a_failing_task_stops_the_others_and_is_raised():
    done = []

    def work(task, buffer):
        if task == 1:
            raise ValueError("task 1 failed")
        time.sleep(0.002)
        done.append(task)

    with pytest.raises(ValueError, match="task 1 failed"):
        threads.run_tasks(work, list(range(200)), 2, lambda: None)
    assert len(done) < 100  # the queue was dropped once the failure was seen (199 x 2 ms of work were left)


def test_run_tasks_gives_each_thread_one_buffer():
    made, lock = [], threading.Lock()

    def scratch():
        with lock:
            made.append(threading.current_thread().name)
        return []

    used = []
    threads.run_tasks(lambda task, buffer: (buffer.append(task), used.append(id(buffer))), list(range(40)), 2, scratch)
    assert len(made) == len(set(made)) == len(set(used)) <= 2


def test_plan_counts_one_band_per_thread():
    # llama3-70b at 4097 tokens: 8 KV heads of 8 queries; blocks of 255 queries (8 · 256 · 4097 scores would pass
    # SCORE_CHUNK = 8 Mi), one KV head per chunk, so 2 threads hold exactly twice one thread's buffers.
    model = spec("llama3-70b")
    layers = layer_order(model)[:1]
    one, two = (plan(model, layers, 4096, 1, 1, 4, "latent", w) for w in (1, 2))
    tiling = causal.prefill_tiling(1, 8, 8, 4097, None, 256)
    assert (tiling.block, tiling.chunk, tiling.span) == (255, 1, 4097)
    per_thread = 4 * (255 * 8 * 4097 + 255 * 8 * 128)  # float32: the band of scores, and a tile's p @ v
    assert two.activations - one.activations == per_thread
    assert two.weights == one.weights and two.cache == one.cache


@pytest.mark.slow  # real model dimensions at 1024 tokens
@pytest.mark.parametrize("name, mla_cache", [("llama3-8b", "latent"), ("deepseek-v2-lite", "latent"),
                                             ("deepseek-v2-lite", "expanded")])
def test_plan_covers_the_memory_a_run_holds(name, mla_cache):
    # tracemalloc sees NumPy's allocations (and the interpreter's, which the plan leaves out: a few MB here): the
    # plan must cover the run's peak and not overstate it by much. It sums the caches a decode step holds with the
    # checks' activations; since the run drops its final caches before the checks (a backend review: past the plan
    # with many layers), those phases no longer overlap, and deepseek-v2-lite's expanded cache is 1.45x its peak.
    model = spec(name)
    tracemalloc.start()
    try:
        report = run(model, RunSettings(ctx=1024, decode=2, layers=1, mla_cache=mla_cache, threads=2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok
    assert 0.97 * peak <= report.predicted_peak_bytes <= 1.5 * peak, (peak, report.predicted_peak_bytes)


def test_cli_threads_option():
    res = cli("run", "gpt2", "--ctx", "16", "--decode", "1", "--threads", "1", "--format", "json")
    assert '"prefill attention threads"' in res.stdout
    bad = cli("run", "gpt2", "--threads", "0", ok=False)
    assert bad.exit_code != 0 and "--threads" in bad.stderr and "Traceback" not in bad.stderr


def test_ctrl_c_in_a_run_exits_130_without_a_traceback(monkeypatch):
    import kvcalc.backend.runner as runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)
    res = cli("run", "gpt2", "--ctx", "16", ok=False)
    assert res.exit_code == 130
    assert res.stderr.strip() == "interrupted" and "Traceback" not in res.stderr

"""Prefill speed and peak memory of `kvcalc run` at real dims, against a plain NumPy matmul and the memory plan.

Run by hand, not by CI:

    python benchmarks/run_prefill.py [--models deepseek-v2 llama3-70b] [--ctx 4096] [--reps 3] [--runs 1]

Each model runs in a fresh process of this interpreter, so that its peak resident memory is its own: --reps runs
of one layer, a prompt of --ctx tokens, one decode step, float32 (`kvcalc.backend.runner.run`, which also runs its
numerical checks, among them a full recomputation at ctx + 1 tokens), each run followed by one reference product.
That process reports:

- the best prefill GFLOP/s of its runs (the report row "prefill GFLOP/s": the FLOPs counted, which equal the
  analytic ones, over the prefill's wall time);
- the best GFLOP/s of its plain `np.matmul`s of the query projection's shape,
  [ctx, d_model] @ [d_model, n_heads · d_qk] in float32. Best against best, interleaved, so that on a shared
  machine whose speed drifts neither side is compared at a worse moment than the other;
- the peak resident memory of the first run (ru_maxrss, read before any reference product allocates anything)
  and the memory plan's prediction (`RunReport.predicted_peak_bytes`).

Targets (the project's issue): prefill at least 70% of the matmul's GFLOP/s; peak memory at most 1.3x the plan.
The exit status is 1 if a target is missed. OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which some
machines set to dodge old OpenBLAS bugs and which can slow a current NumPy: their values are printed, and
`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run_prefill.py` measures without them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

MODELS = ["deepseek-v2", "llama3-70b"]
MIN_SPEED = 0.85  # prefill GFLOP/s over the matmul's (issue #11's target; it was 0.70 before that issue)
MAX_MEMORY = 1.30  # peak resident memory over the predicted peak
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def reference_shape(spec, ctx: int) -> tuple[int, int, int]:
    """(m, k, n) of the query projection of the first attention layer: [ctx, d_model] @ [d_model, n_heads · d_qk]."""
    from kvcalc.attention import MLA

    group = next(g for g in spec.groups if g.attention.query_heads)
    att = group.attention
    d_qk = att.qk_head_dim if isinstance(att, MLA) else group.head_dim
    return ctx, spec.d_model, att.query_heads * d_qk


def matmul_gflops(m: int, k: int, n: int) -> float:
    """GFLOP/s of one float32 product [m, k] @ [k, n] (2·m·n·k FLOPs).

    A plain `np.matmul(a, b)`: the product gets a fresh output array, as the backend's own products do.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    start = time.perf_counter()
    np.matmul(a, b)
    return 2 * m * n * k / (time.perf_counter() - start) / 1e9


def child(model: str, ctx: int, reps: int) -> dict:
    """`reps` runs of `model` in this process, each followed by the reference product (called in a fresh process).

    Returns what the table shows: the best prefill and the best product, so that both sides get the same chance
    of a quiet moment on a shared machine; the peak resident memory is read after the first run, before any
    reference product allocates anything.
    """
    from kvcalc import load_model
    from kvcalc.backend.runner import RunSettings, run

    spec = load_model(model).spec
    m, k, n = reference_shape(spec, ctx)
    prefill, seconds, matmul, ok, peak_rss = [], [], [], True, 0
    for rep in range(reps):
        report = run(spec, RunSettings(ctx=ctx, decode=1, layers=1, dtype="float32"))
        if rep == 0:
            peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        ok = ok and report.ok
        time_rows = {r.quantity: r.measured for r in report.rows if r.section == "time"}
        prefill.append(time_rows["prefill GFLOP/s"])
        seconds.append(time_rows["prefill wall time"])
        matmul.append(matmul_gflops(m, k, n))
    return {
        "model": model,
        "ok": ok,
        "threads": time_rows["prefill attention threads"],
        "prefill_seconds": seconds,
        "prefill_gflops": max(prefill),
        "matmul_shape": [m, k, n],
        "matmul_gflops": max(matmul),
        "predicted_peak": report.predicted_peak_bytes,
        "peak_rss": peak_rss,
    }


def measure(model: str, ctx: int, reps: int) -> dict:
    """`child` in a fresh interpreter; a failing child stops the benchmark."""
    cmd = [sys.executable, __file__, "--child", model, "--ctx", str(ctx), "--reps", str(reps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def blas_line() -> str:
    """The BLAS NumPy runs: threadpoolctl's view when it is installed, else NumPy's build configuration."""
    import numpy as np

    try:
        from threadpoolctl import threadpool_info

        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        return "; ".join(f"{p['internal_api']} {p['version']}, {p['num_threads']} threads, kernel "
                         f"{p.get('architecture')}" for p in pools)
    except ImportError:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas['name']} {blas['version']} (np.show_config; install threadpoolctl to see the kernel)"


def gib(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB"


def print_table(results: list[dict]) -> bool:
    """The results as a plain-text table; returns True when every target is met."""
    head = (f"{'model':<12} {'prefill':>9} {'matmul':>9} {'ratio':>6} {'>=0.85':>6}   "
            f"{'predicted':>10} {'peak RSS':>10} {'ratio':>6} {'<=1.30':>6}   run")
    print(head)
    print(f"{'':<12} {'GFLOP/s':>9} {'GFLOP/s':>9}")
    good = True
    for r in results:
        speed = r["prefill_gflops"] / r["matmul_gflops"]
        memory = r["peak_rss"] / r["predicted_peak"]
        fast, small = speed >= MIN_SPEED, memory <= MAX_MEMORY
        good = good and fast and small and r["ok"]
        print(f"{r['model']:<12} {r['prefill_gflops']:9.1f} {r['matmul_gflops']:9.1f} {speed:6.2f} "
              f"{'PASS' if fast else 'FAIL':>6}   {gib(r['predicted_peak']):>10} {gib(r['peak_rss']):>10} "
              f"{memory:6.2f} {'PASS' if small else 'FAIL':>6}   {'ok' if r['ok'] else 'MISMATCH'}")
    print()
    for r in results:
        m, k, n = r["matmul_shape"]
        times = ", ".join(f"{t:.2f}" for t in r["prefill_seconds"])
        print(f"{r['model']}: prefill {times} s ({r['threads']} attention threads); matmul [{m}, {k}] @ [{k}, {n}]")
    return good


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, help="bundled model names (default: %(default)s)")
    parser.add_argument("--ctx", type=int, default=4096, help="prompt tokens (default 4096)")
    parser.add_argument("--reps", type=int, default=3,
                        help="runs per process, each followed by one reference matmul; the best of each kept (default 3)")
    parser.add_argument("--runs", type=int, default=1, help="fresh processes per model, one table line each (default 1)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.ctx, args.reps)))
        return

    import numpy as np

    env = ", ".join(f"{v}={os.environ[v]!r}" if v in os.environ else f"{v} unset" for v in OPENBLAS_VARS)
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; {env}")
    print(f"BLAS: {blas_line()}")
    print(f"kvcalc run, 1 layer, ctx {args.ctx}, 1 decode step, float32; best of {args.reps} runs and of {args.reps} "
          "reference matmuls, interleaved")
    print()
    results = [measure(model, args.ctx, args.reps) for _ in range(args.runs) for model in args.models]
    sys.exit(0 if print_table(results) else 1)


if __name__ == "__main__":
    main()

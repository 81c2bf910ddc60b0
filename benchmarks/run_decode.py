"""Decode-step speed of `kvcalc run`'s NumPy layers: on a one-thread BLAS (what the runner does) against the
process's default BLAS threads (what it did before), in the same process, interleaved.

Run by hand, not by CI:

    python benchmarks/run_decode.py [--model llama3-70b] [--ctx 4096] [--steps 4] [--rounds 3] [--contend N]

The process first sets glibc's allocator as `kvcalc run` does (`return_freed_memory`). One layer of the model at
its real dims is built and prefilled with --ctx tokens (float32); then, --rounds times,
--steps decode steps run on one BLAS thread and --steps more on every BLAS thread, each from the same cache (the
steps are timed, not kept). Printed: the median and best wall time of a step each way, and their ratio. Target
(the project's issue #11): the one-thread step at least 20x faster than the default on the machine where a step
took about a second; the ratio depends on how busy the cores are, since a BLAS thread that waits for a core is
what makes the default slow. --contend N starts N other processes for the timed rounds, each multiplying 1500 x 1500
float32 matrices on its default BLAS threads without end (what other jobs' BLAS threads do to a shared machine), so
the contended case can be reproduced rather than waited for.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

# Another job's BLAS work: products on its default threads, until it is stopped.
CONTENDER = "import numpy as np\na = np.ones((1500, 1500), dtype=np.float32)\nwhile True:\n    a @ a\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--contend", type=int, default=0, metavar="N",
                        help="other processes doing BLAS products on their default threads while the steps are timed")
    args = parser.parse_args()

    import numpy as np

    from kvcalc.backend.memory import return_freed_memory
    from kvcalc.backend.ops import FlopCounter
    from kvcalc.backend.runner import RunSettings, build_layer, layer_order
    from kvcalc.backend.stack import stack_decode, stack_prefill
    from kvcalc.backend.threads import _blas_controller, available_cores, one_blas_thread
    from kvcalc.registry import load_model

    return_freed_memory()  # as `kvcalc run` does: arrays of 1 MiB and more mmapped, so freed memory leaves at once
    spec = load_model(args.model).spec
    first = layer_order(spec)[0]
    group = spec.groups[spec.group_index_of(first)]
    s = RunSettings(ctx=args.ctx, decode=args.steps, layers=1)
    rng = np.random.default_rng(0)
    layer = build_layer(group, rng, s)
    x = rng.standard_normal((1, args.ctx + args.steps, spec.d_model)).astype(np.float32)
    caches = stack_prefill(FlopCounter(), [layer], x[:, : args.ctx])[1]

    def steps() -> float:
        """Seconds per step of --steps decode steps from the prefilled cache."""
        c = list(caches)  # stack_decode replaces the list's entries: each timing starts from the prefill's
        t0 = time.perf_counter()
        for j in range(args.steps):
            _, c = stack_decode(FlopCounter(), [layer], c, x[:, args.ctx + j : args.ctx + j + 1], s.schedule)
        return (time.perf_counter() - t0) / args.steps

    one, default = [], []
    contenders = [subprocess.Popen([sys.executable, "-c", CONTENDER]) for _ in range(args.contend)]
    try:
        time.sleep(1.0 if contenders else 0.0)  # let them start their products
        for _ in range(args.rounds):
            with one_blas_thread():
                one.append(steps())
            default.append(steps())
    finally:
        for proc in contenders:
            proc.kill()
            proc.wait()
    blas = _blas_controller()
    threads = blas.info()[0].get("num_threads") if blas is not None else "unknown"
    print(f"{args.model}, one layer, ctx {args.ctx}, {args.steps} steps x {args.rounds} rounds; "
          f"{available_cores()} cores, default BLAS threads {threads}; {args.contend} contending processes")
    print(f"{'BLAS':>12} {'median ms':>10} {'best ms':>9}")
    for name, t in (("one thread", one), ("default", default)):
        print(f"{name:>12} {1e3 * statistics.median(t):10.1f} {1e3 * min(t):9.1f}")
    print(f"speed-up (median): {statistics.median(default) / statistics.median(one):.1f}x")


if __name__ == "__main__":
    main()

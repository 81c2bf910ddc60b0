"""Ctrl-C stops `kvcalc run` within a second or two whatever the dtype (#13 item 5): long products run in pieces
(`ops.product`), prefill threads stop at their next piece, and a Ctrl-C at any moment of any command, start-up
included, prints `interrupted` and exits 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import kvcalc
from conftest import ROOT
from kvcalc.backend import ops

POSIX = hasattr(signal, "SIGKILL")

# A tiny model whose prefill is nearly all attention (d_model 64, 4 heads of 16): at 8k tokens in float16 the
# threads' score products run for tens of seconds, the projections for about one.
TINY = """\
name: tiny
family: test
max_context: 131072
d_model: 64
n_layers: 1
vocab_size: 256
ffn: {kind: dense, d_ff: 128}
layer_groups:
  - layers: all
    attention: {kind: mha, n_heads: 4, head_dim: 16}
"""


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shapes", [((3, 700, 64), (64, 50)), ((2, 1, 1, 300), (2, 300, 900)),
                                    ((5, 40), (40, 7)), ((2, 3, 130, 17), (3, 17, 20))])
def test_product_in_pieces_is_the_same_product(monkeypatch, dtype, shapes):
    monkeypatch.setattr(ops, "HALF_TILE", 64)  # force many pieces: tiles of float16, rows (or columns) of BLAS
    monkeypatch.setattr(ops, "HALF_DEPTH", 8)  # float16: sums over several tiles of k
    monkeypatch.setattr(ops, "PIECE_FLOPS_BLAS", 4096)
    monkeypatch.setattr(ops, "PIECE_ROWS", 1)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(dtype) for s in shapes)
    got, want = _in_thread(lambda: ops.product(a, b)), np.matmul(a, b)  # BLAS pieces are a prefill thread's
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = {np.float16: 1e-2, np.float32: 1e-4, np.float64: 1e-12}[dtype]
    assert np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("tile,depth", [(1 << 20, 1 << 11), (64, 8), (5, 3)])
@pytest.mark.parametrize("shapes", [((3, 37, 20), (20, 11)), ((1, 500), (500, 3)), ((2, 1, 1, 30), (2, 30, 90)),
                                    ((40, 3, 1, 41), (3, 41, 2)), ((2, 3, 13, 17), (3, 17, 20)), ((1, 7), (7, 1))])
def test_float16_product_is_the_float64_sum_rounded_once(monkeypatch, tile, depth, shapes):
    # float16 runs on the float64 BLAS by tiles (NumPy's float16 matmul has no BLAS: a nemotron-h run at ctx 40 took
    # over 10 minutes); each element is its float64 dot product rounded once, however the product was tiled: across
    # rows and columns, over k (depth), and one leading batch index at a time (tile below batch·depth)
    monkeypatch.setattr(ops, "HALF_TILE", tile)
    monkeypatch.setattr(ops, "HALF_DEPTH", depth)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in shapes)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float16)
    for got in (ops.product(a, b), _in_thread(lambda: ops.product(a, b))):
        assert got.dtype == np.float16 and np.array_equal(got, want)
    out = np.full(want.shape, np.nan, dtype=np.float16)  # into a given array, as the prefill writes its tiles
    assert ops.product(a, b, out=out) is out and np.array_equal(out, want)


def _in_thread(f):
    """f() in a thread other than the main one (where products are cut in pieces), its result returned."""
    import threading

    box = []
    t = threading.Thread(target=lambda: box.append(f()))
    t.start()
    t.join()
    return box[0]


def test_product_pieces_see_the_abort_in_a_thread(monkeypatch):
    import threading

    monkeypatch.setattr(ops, "PIECE_FLOPS_BLAS", 1024)
    monkeypatch.setattr(ops, "PIECE_ROWS", 1)
    a, b = np.ones((64, 32)), np.ones((32, 32))
    ops.ABORT.set()
    try:
        assert ops.product(a, b)[0, 0] == 32  # the main thread is interrupted by the signal itself, not ABORT
        seen = []
        t = threading.Thread(target=lambda: seen.append(_raises(lambda: ops.product(a, b))))
        t.start()
        t.join()
        assert seen == [True]
    finally:
        ops.ABORT.clear()


def _raises(f) -> bool:
    try:
        f()
    except ops.Aborted:
        return True
    return False


def _interrupt(args: list[str], after: float, cwd, out: list | None = None) -> tuple[int, float, str]:
    """Start `python -m kvcalc ARGS`, send SIGINT after `after` seconds; exit status, seconds to exit, stderr (and
    stdout appended to `out`, if given)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    p = subprocess.Popen([sys.executable, "-m", "kvcalc", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, cwd=cwd)
    time.sleep(after)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        stdout, err = p.communicate(timeout=60)
        if out is not None:
            out.append(stdout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        return -1, 60.0, err
    return p.returncode, time.monotonic() - t0, err


@pytest.mark.slow
@pytest.mark.skipif(not POSIX, reason="optional: SIGINT to a child process is POSIX")
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_ctrl_c_stops_a_run_within_two_seconds(tmp_path, dtype):
    (tmp_path / "tiny.yaml").write_text(TINY)
    ctx = "8192" if dtype == "float16" else "65536"
    # 6 s: past the float16 projections, into the threads' score products; and again early, in the projections. The
    # best of two tries: a busy host once stalled a run for seconds around the signal (a fresh-clone CI run, 4.06 s)
    for after in (6.0, 1.5):
        took_all = []
        for _ in range(2):
            code, took, err = _interrupt(["run", "tiny.yaml", "--ctx", ctx, "--dtype", dtype, "--threads", "2"], after,
                                         tmp_path)
            assert code == 130 and err.strip().splitlines()[-1] == "interrupted", err
            assert "Traceback" not in err
            took_all.append(took)
            if took < 2.0:
                break
        assert min(took_all) < 2.0, f"{dtype}: exited {', '.join(f'{t:.2f}' for t in took_all)} s after Ctrl-C"


def _at_cli_import(on_import: str) -> str:
    """A script that starts `kvcalc list` through its console entry point and runs `on_import` (indented code) when
    the CLI module is about to be imported: a Ctrl-C at that moment, in one of the forms Python delivers it."""
    return f"""
import importlib.abc, sys

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "kvcalc.cli":
{textwrap.indent(textwrap.dedent(on_import), " " * 12)}
        return None

class Finaliser:
    def __del__(self):
        raise KeyboardInterrupt

sys.meta_path.insert(0, Interrupt())
sys.argv = ["kvcalc", "list"]
from kvcalc.__main__ import main
main()
"""


def _start(script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)


def test_ctrl_c_while_the_cli_is_imported_exits_130():
    # a Ctrl-C that lands while kvcalc.cli (and typer, rich, pydantic under it) is being imported
    res = _start(_at_cli_import("raise KeyboardInterrupt"))
    assert res.returncode == 130 and res.stderr == "interrupted\n", res.stderr


def test_ctrl_c_that_python_would_ignore_still_exits_130():
    # found by test_ctrl_c_at_any_moment_of_start_up: 'Exception ignored in: <function _get_module_lock.<locals>.cb>
    # ... KeyboardInterrupt', and the command carried on. A finaliser dropped at once raises it where Python cannot
    # (its exception goes to sys.unraisablehook), as importlib's module-lock callback does.
    res = _start(_at_cli_import("Finaliser()"))
    assert res.returncode == 130 and res.stderr == "interrupted\n" and res.stdout == "", (res.returncode, res.stderr)


WRAPPED = """
try:
    raise KeyboardInterrupt
except KeyboardInterrupt as exc:
    raise RuntimeError("Error calling __set_name__ on 'cached_property' instance") from exc
"""


@pytest.mark.slow
def test_ctrl_c_that_python_wraps_in_a_runtime_error_still_exits_130():
    # found by test_ctrl_c_at_any_moment_of_start_up: "RuntimeError: Error calling __set_name__ on 'cached_property'
    # instance 'hostmask' in 'IPv4Interface'", caused by the KeyboardInterrupt, and a traceback
    res = _start(_at_cli_import(WRAPPED))
    assert res.returncode == 130 and res.stderr == "interrupted\n", (res.returncode, res.stderr)
    # a RuntimeError with no Ctrl-C behind it is not called an interrupt
    plain = WRAPPED.replace("raise KeyboardInterrupt", "raise ValueError").replace("except KeyboardInterrupt", "except ValueError")
    assert plain != WRAPPED
    res = _start(_at_cli_import(plain))
    assert res.returncode == 1 and "interrupted" not in res.stderr and "Error calling __set_name__" in res.stderr


SWALLOWED = """
import os, signal, time
try:
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to kvcalc's handler
    time.sleep(5)
except KeyboardInterrupt:
    # pydantic_core turns an interrupt during a deferred schema build into SchemaError('... KeyboardInterrupt: '),
    # a message with no cause or context to follow
    raise TypeError("Error building `literal` serializer: KeyboardInterrupt: ") from None
"""


@pytest.mark.slow
def test_ctrl_c_that_a_library_swallows_into_its_own_error_still_exits_130():
    # found by CI (test_ctrl_c_at_any_moment_of_start_up): a Ctrl-C during pydantic's first build of ModelSpec's
    # validator came out as pydantic_core.SchemaError, an Exception with the interrupt only in its text, and a
    # traceback. Here while the CLI is imported, and below while a command loads its spec.
    res = _start(_at_cli_import(SWALLOWED))
    assert res.returncode == 130 and res.stderr == "interrupted\n", (res.returncode, res.stderr)
    script = f"""
import sys
import kvcalc.spec as spec

def validate_mapping(*args):
{textwrap.indent(SWALLOWED, " " * 4)}

spec.validate_mapping = validate_mapping
sys.argv = ["kvcalc", "compare", "llama3-70b", "--ctx", "4k"]
from kvcalc.__main__ import main
main()
"""
    res = _start(script)
    assert res.returncode == 130 and res.stderr == "interrupted\n" and res.stdout == "", (res.returncode, res.stderr)
    # the same error with no Ctrl-C behind it is a traceback, as any bug is: not called an interrupt
    res = _start(script.replace("os.kill(os.getpid(), signal.SIGINT)", "raise KeyboardInterrupt"))
    assert res.returncode == 1 and "interrupted" not in res.stderr and "Error building" in res.stderr, res.stderr


def test_a_wrapped_ctrl_c_during_a_command_exits_130(monkeypatch):
    import kvcalc.present.outputs as outputs
    from conftest import run

    def wrapped():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc

    monkeypatch.setattr(outputs, "list_output", wrapped)
    res = run("list", ok=False)
    assert res.exit_code == 130 and res.stderr.strip().splitlines()[-1] == "interrupted"


def test_a_ctrl_c_after_numpy_ran_leaves_the_process_at_once(monkeypatch):
    # a review: a Ctrl-C in `kvcalc run` printed 'interrupted' and then often hung for good in the interpreter's exit
    # (OpenBLAS's gotoblas_quit joining a worker thread left waiting): the command line's process now ends at once
    # there. In-process callers (the test runner here) keep the plain exit
    import typer

    from kvcalc import options

    left = []
    monkeypatch.setattr(options, "_leave_now", lambda code: left.append(code))

    @options.guarded
    def command():
        raise KeyboardInterrupt

    monkeypatch.setattr(options, "LEAVE_AT_ONCE", [True])
    with pytest.raises(typer.Exit):  # _leave_now, patched here, returns: the plain exit follows
        command()
    assert left == [130]
    monkeypatch.setattr(options, "LEAVE_AT_ONCE", [])
    with pytest.raises(typer.Exit) as exc:
        command()
    assert exc.value.exit_code == 130 and left == [130]


@pytest.mark.slow
@pytest.mark.skipif(not POSIX, reason="optional: SIGINT to a child process is POSIX")
def test_ctrl_c_during_a_real_run_never_hangs_the_exit(tmp_path):
    # the hang above, as the review met it: llama3-8b at 4k, interrupted at moments through its prefill and decode
    # (on a 2-core guest it hung 2 to 5 times in 10 at 2.5 to 7 s); every interrupt must end the process, 130
    for after in (1.5, 2.5, 3.5, 5.0):
        code, took, err = _interrupt(["run", "llama3-8b", "--ctx", "4k", "--decode", "2", "-q"], after, tmp_path)
        assert code == 130 and err.strip().splitlines()[-1] == "interrupted", (after, code, err[-500:])
        assert took < 10.0, (after, took)


def test_interrupted_follows_the_chain_of_causes():
    from kvcalc.errors import interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as a:
            try:
                raise RuntimeError("inner") from a
            except RuntimeError:
                raise ValueError("outer")  # noqa: B904 (its context is the RuntimeError)
    except ValueError as exc:
        assert interrupted(exc)
    assert not interrupted(RuntimeError("plain")) and interrupted(KeyboardInterrupt())
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("unrelated") from None  # a context hidden on purpose is not followed
    except RuntimeError as exc:
        assert not interrupted(exc)


def test_console_script_enters_through_the_guarded_start():
    # pyproject's entry point is the function that guards the import of the CLI, not the CLI itself
    text = (ROOT / "pyproject.toml").read_text()
    assert 'kvcalc = "kvcalc.__main__:main"' in text


@pytest.mark.slow
@pytest.mark.skipif(not POSIX, reason="optional: SIGINT to a child process is POSIX")
def test_ctrl_c_at_any_moment_of_start_up(tmp_path):
    # Ctrl-C at 20 moments of the first ~0.4 s of a command: every outcome is 'interrupted' and 130, or the
    # command finished first (0, with its output); never a traceback or a swallowed interrupt. A signal that lands
    # before Python has installed its handler ends the process by SIGINT itself (no output at all); one that lands
    # while Python imports its `site` module, before any kvcalc code, is Python's own fatal start-up error; one that
    # lands while Python imports runpy ('Could not import runpy module') or runpy finds or compiles the package, before
    # its first statement runs, is Python's own traceback, no frame of it in kvcalc's files (a busy CI machine without
    # cached bytecode hit both). Any traceback through kvcalc's code fails.
    package = str(Path(kvcalc.__file__).parent)
    for i in range(20):
        stdout: list[str] = []
        code, _, err = _interrupt(["compare", "llama3-70b", "deepseek-v2", "--ctx", "128k"], i * 0.02, tmp_path, stdout)
        if "Fatal Python error: init_import_site" in err:
            assert code != 0 and "kvcalc" not in err, err
            continue
        if (err.startswith("Traceback") or err.startswith("Could not import runpy module")) and package not in err:
            assert code != 0 and err.rstrip().endswith("KeyboardInterrupt"), err
            continue
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        # 130 with `interrupted`; or ended by SIGINT itself (a Ctrl-C before Python's handler is in place, or
        # during its shutdown: the shell reports 130 for both); or 0, the command finished first
        assert (code == 130 and err.endswith("interrupted\n")) or code in (0, -signal.SIGINT), (i, code, err)
        if code == 0:  # finished first: then with its whole table, not a swallowed interrupt
            assert "llama3-70b" in stdout[0] and "deepseek-v2" in stdout[0], (i, stdout, err)


def test_blas_pieces_keep_hundreds_of_rows(monkeypatch):
    # a float32 piece is never under PIECE_ROWS rows, whatever the budget: 8-row pieces starved the BLAS
    calls = []
    real = np.matmul

    def spy(a, b, out=None):
        calls.append(a.shape[-2])
        return real(a, b, out=out)

    monkeypatch.setattr(ops, "PIECE_FLOPS_BLAS", 1 << 20)
    monkeypatch.setattr(ops.np, "matmul", spy)
    a, b = np.ones((1000, 64), dtype=np.float32), np.ones((64, 64), dtype=np.float32)
    assert _in_thread(lambda: ops.product(a, b))[999, 63] == 64
    assert calls == [256, 256, 256, 232]


def test_a_large_product_in_the_main_thread_is_one_call_in_a_helper_thread(monkeypatch):
    import threading

    names = []
    real = np.matmul

    def spy(a, b, out=None):
        names.append(threading.current_thread().name)
        return real(a, b, out=out)

    monkeypatch.setattr(ops, "WAIT_FLOPS", 1 << 10)
    monkeypatch.setattr(ops.np, "matmul", spy)
    a, b = np.ones((300, 64)), np.ones((64, 64))
    assert ops.product(a, b)[299, 63] == 64
    assert names == ["kvcalc-product"]  # whole, not in pieces
    small = ops.product(np.ones((2, 2)), np.ones((2, 2)))
    assert small[0, 0] == 2 and names == ["kvcalc-product", threading.main_thread().name]


@pytest.mark.slow
def test_ctrl_c_interrupts_the_wait_for_a_long_product():
    # the main thread waits for a 54-GFLOP float64 product in 50 ms joins: a Ctrl-C (interrupt_main) 0.1 s in is
    # raised at once, not when the product ends seconds later
    import _thread
    import threading

    a = np.ones((3000, 3000))
    threading.Timer(0.1, _thread.interrupt_main).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ops.product(a, a)
    assert time.monotonic() - t0 < 0.6

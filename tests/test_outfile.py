"""--output files are written whole: a Ctrl-C, a full disk or an error midway leaves the earlier file, never part of
a new one (kvcalc.present.outfile)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import run
from kvcalc.present.outfile import whole_file


def test_whole_file_renames_on_success_and_removes_the_partial_file_on_an_error(tmp_path):
    out = tmp_path / "t.csv"
    with whole_file(out) as path:
        assert path != out and path.parent == out.parent and not out.exists()
        path.write_text("new\n")
    assert out.read_text() == "new\n" and os.listdir(tmp_path) == ["t.csv"]
    for error in (KeyboardInterrupt, OSError(28, "No space left on device")):
        with pytest.raises(type(error) if isinstance(error, Exception) else error), whole_file(out) as path:
            path.write_text("half a ro")
            raise error
        assert out.read_text() == "new\n" and os.listdir(tmp_path) == ["t.csv"]


def test_whole_file_keeps_permissions_follows_links_and_writes_devices_directly(tmp_path, monkeypatch):
    out = tmp_path / "t.csv"
    out.write_text("old\n")
    out.chmod(0o640)
    link = tmp_path / "link.csv"
    link.symlink_to(out)
    with whole_file(link) as path:
        path.write_text("new\n")
    assert link.is_symlink() and out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o640
    with whole_file("/dev/null") as path:  # nothing to rename over: written in place, /dev/null left a device
        assert str(path) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    out.write_text("old\n")  # a folder that takes no new file (a read-only folder's writable file): written in place
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with whole_file(out) as path:
        assert path == out
        path.write_text("in place\n")
    assert out.read_text() == "in place\n"
    monkeypatch.undo()
    for long in (tmp_path / ("x" * 250 + ".csv"), tmp_path / ("é" * 125 + ".csv")):  # 254 bytes: the partial file's
        with whole_file(long) as path:  # name is short, whatever the destination's
            path.write_text("ok\n")
        assert long.read_text() == "ok\n"
    out.chmod(0o640)  # a file its owner made read-only is written in place, so the write fails as a plain one would
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != out)
    with whole_file(out) as path:
        assert path == out
    monkeypatch.undo()
    fresh = tmp_path / "new.csv"  # a new file gets open()'s permissions, not mkstemp's 0600
    with whole_file(fresh) as path:
        path.write_text("x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


def test_an_output_into_a_pipe_is_written_in_place():
    # a review of whole_file: -o /dev/stdout into a pipe resolved to /proc/<pid>/fd/pipe:[...], no file to open
    import subprocess
    import sys

    from conftest import ROOT

    res = subprocess.run([sys.executable, "-m", "kvcalc", "show", "gpt2", "-f", "csv", "-o", "/dev/stdout"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0 and "cannot write" not in res.stderr, res.stderr
    assert res.stdout.startswith("table,key,value,source,") and "summary,name,gpt2," in res.stdout


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_streamed_sweep_stopped_midway_leaves_the_earlier_file(tmp_path, monkeypatch, fmt):
    # a review: Ctrl-C during `sweep -o rows.csv` left the rows written so far, a csv cut short (and a json without its
    # closing bracket) that read as a finished file; a full disk did the same
    import kvcalc.present.emit as emit

    out = tmp_path / f"rows.{fmt}"
    out.write_text("earlier\n")
    real = emit._batched
    for error, status in ((KeyboardInterrupt(), 130), (OSError(28, "No space left on device"), 1)):
        def stopping(pieces, size=1 << 16, error=error):
            for i, text in enumerate(real(pieces, size=64)):
                if i == 1:  # the header written, the rows not
                    raise error
                yield text

        monkeypatch.setattr(emit, "_batched", stopping)
        res = run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..64k", "-f", fmt, "-o", str(out), ok=False)
        assert res.exit_code == status and "Traceback" not in res.stderr, res
        assert out.read_text() == "earlier\n" and sorted(os.listdir(tmp_path)) == [out.name]
    monkeypatch.setattr(emit, "_batched", real)
    run("sweep", "gpt2", "llama3-8b", "--ctx", "1k..64k", "-f", fmt, "-o", str(out))
    text = out.read_text()
    rows = json.loads(text) if fmt == "json" else text.splitlines()[1:]
    assert len(rows) == 2 * 7 and sorted(os.listdir(tmp_path)) == [out.name]


def test_a_loop_of_links_is_refused_not_replaced(tmp_path):
    # a hardening review: -o a link to itself was replaced by a regular file (a plain write gives ELOOP)
    loop = tmp_path / "loop.csv"
    loop.symlink_to("loop.csv")
    res = run("compare", "llama3-8b", "-f", "csv", "-o", str(loop), ok=False)
    assert res.exit_code == 1 and f"--output {loop}: cannot write (Too many levels of symbolic links)" in res.stderr
    assert loop.is_symlink() and os.readlink(loop) == "loop.csv"


def test_a_folder_that_refuses_the_temporary_file_is_written_in_place(tmp_path, monkeypatch):
    # a hardening review: where mkstemp failed though access() allowed the folder (/sys), the message named the
    # temporary file (.kvcalc-....partial), not the destination
    import tempfile

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    out = tmp_path / "rows.csv"
    with whole_file(out) as path:
        assert path == out  # the destination itself, as a plain write
        path.write_text("x")
    assert out.read_text() == "x"


def test_import_refuses_force_without_an_output():
    # a hardening review: --force without -o did nothing, silently (LaTeX options off LaTeX output are refused alike)
    res = run("import", "tests/data/reference/models/llama-3-8b.json", "--force", ok=False)
    assert res.exit_code == 2 and "Invalid value for '--force': overwrites --output's file" in res.stderr


def test_plot_names_a_misspelt_metric_before_reading_the_models():
    # a hardening review: the models were read first, so their warnings (ctx past the maximum) came before the error
    res = run("plot", "llama3-8b", "--ctx", "1M", "--metric", "cahce", "-o", "x.png", ok=False)
    assert res.exit_code == 1 and res.stderr.startswith("error: unknown metric 'cahce'") and "warning" not in res.stderr

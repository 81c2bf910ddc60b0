"""--output files are written whole: a Ctrl-C, a full disk or an error midway leaves the earlier file, never part of
a new one (kvcalc.present.outfile)."""

from __future__ import annotations

import json
import os
import stat

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
    long = tmp_path / ("x" * 250 + ".csv")  # the partial file's name stays within 255 bytes
    with whole_file(long) as path:
        path.write_text("ok\n")
    assert long.read_text() == "ok\n"


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

"""A fuzz audit of `kvcalc approx --data F.npz`: a damaged archive gave a zipfile traceback (an empty file only
'Aborted!'), a hostile .npy header an _ArrayMemoryError of terabytes, complex and bool arrays were cast to float64
and extra arrays ignored, all without naming the file; `--data ''` was called a folder."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import run


def arrays(n: int = 16, d: int = 4, d_v: int = 3) -> dict[str, np.ndarray]:
    """A small valid q, k, v."""
    rng = np.random.default_rng(0)
    return {"q": rng.standard_normal((n, d)), "k": rng.standard_normal((n, d)), "v": rng.standard_normal((n, d_v))}


def refused(path: Path | str, message: str) -> None:
    """`approx --data path` exits 1 with one message naming the file and `message`, and no traceback."""
    res = run("approx", "--data", str(path), "--method", "exact", "--scale", "1", "--seeds", "1", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.stderr, str(res)
    assert isinstance(res.exception, SystemExit), str(res)  # a clean exit, not an exception CliRunner caught
    assert f"error: --data {path}: {message}" in res.stderr, str(res)


def rewrite_header(path: Path, name: str, shape: tuple[int, ...], extra: bytes = b"") -> None:
    """Give member `name`.npy a header claiming `shape` over its original data (plus `extra` bytes): no big array."""
    with zipfile.ZipFile(path) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    blob = io.BytesIO(members[f"{name}.npy"])
    np.lib.format.read_magic(blob)
    _, fortran, dtype = np.lib.format.read_array_header_1_0(blob)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"shape": shape, "fortran_order": fortran,
                                                  "descr": np.lib.format.dtype_to_descr(dtype)})
    members[f"{name}.npy"] = header.getvalue() + blob.read() + extra
    with zipfile.ZipFile(path, "w") as z:
        for member, data in members.items():
            z.writestr(member, data)


# defect 1: an archive that cannot be read


def test_an_unreadable_archive_is_named(tmp_path):
    (tmp_path / "pk.npz").write_bytes(b"PK\x03\x04")  # a zip's first bytes and nothing else: BadZipFile
    refused(tmp_path / "pk.npz", "not a NumPy .npz archive of arrays q, k, v (np.savez): File is not a zip file")
    (tmp_path / "empty.npz").write_bytes(b"")  # np.load's EOFError, which click printed as 'Aborted!'
    refused(tmp_path / "empty.npz", "an empty file, not an .npz archive")
    np.save(tmp_path / "plain.npy", arrays()["q"])  # an .npy: np.load returned an array, not an archive
    refused(tmp_path / "plain.npy", "not a NumPy .npz archive of arrays q, k, v (np.savez): File is not a zip file")


def test_a_bad_crc_is_named(tmp_path):
    path = tmp_path / "crc.npz"
    np.savez(path, **arrays())
    with zipfile.ZipFile(path) as z:
        member = z.read("q.npy")
    raw = bytearray(path.read_bytes())
    at = raw.index(member) + len(member) - 1  # np.savez stores members uncompressed: the last byte of q's data
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    refused(path, "not a readable .npz archive (Bad CRC-32 for file 'q.npy')")


# defect 2: a header is checked before any data is read


def test_a_hostile_header_is_refused_before_loading(tmp_path):
    path = tmp_path / "huge.npz"
    np.savez(path, **arrays())
    for name in ("q", "k", "v"):  # 10⁶ × 10⁶ float64: 7.28 TiB, which np.load tried to allocate
        rewrite_header(path, name, (10**6, 10**6))
    refused(path, "n = 1,000,000: approx materialises n × n attention matrices; n may be at most 16k")


@pytest.mark.parametrize("shape, extra, have", [((32, 4), b"", 512), ((16, 4), b"\0" * 8, 520)])
def test_data_of_another_length_than_the_header_says_is_refused(tmp_path, shape, extra, have):
    path = tmp_path / "short.npz"
    np.savez(path, **arrays())  # q is 16 × 4 float64: 512 bytes of data
    rewrite_header(path, "q", shape, extra)
    if shape != (16, 4):
        rewrite_header(path, "k", shape)
        rewrite_header(path, "v", (shape[0], 3))
    need = shape[0] * shape[1] * 8
    refused(path, f"q.npy: its header says shape {shape} of float64 ({need:,} bytes) but it holds {have:,} bytes of "
                  "data: a truncated or corrupt file")


def test_an_empty_dimension_is_refused(tmp_path):
    path = tmp_path / "empty_d.npz"
    np.savez(path, q=np.ones((16, 0)), k=np.ones((16, 0)), v=np.ones((16, 3)))
    refused(path, "q (16, 0) and v (16, 3): n, d and d_v must each be at least 1")


# defect 3: only real numbers, only q, k and v


@pytest.mark.parametrize("name, value, dtype", [
    ("q", arrays()["q"] + 1j, "complex128"),
    ("k", arrays()["k"] > 0, "bool"),
    ("v", arrays()["v"].astype(np.complex64), "complex64"),
    ("q", arrays()["q"].astype(str), "<U"),
    ("k", np.zeros((16, 4), dtype=[("a", "<f8")]), "[('a', '<f8')]"),
])
def test_a_dtype_that_is_not_real_is_refused(tmp_path, name, value, dtype):
    path = tmp_path / "dtype.npz"
    np.savez(path, **{**arrays(), name: value})
    refused(path, f"{name} has dtype {dtype}")
    res = run("approx", "--data", str(path), "--method", "exact", ok=False)
    assert "q, k and v must hold real numbers, an integer or float dtype" in res.stderr


def test_an_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "object.npz"
    np.savez(path, **{**arrays(), "v": np.array([[object()] * 3] * 16)})  # pickled: np.load(allow_pickle=False) refused
    refused(path, "v has dtype object")


def test_an_unknown_array_is_refused(tmp_path):
    path = tmp_path / "extra.npz"
    np.savez(path, **arrays(), w=np.ones(3))  # the README: an .npz with q, k, v; nothing says others are ignored
    refused(path, "unknown array(s) 'w'; it must hold exactly q, k, v (q [n, d], k [n, d], v [n, d_v])")


def test_a_zip_directory_larger_than_a_few_arrays_need_is_refused_before_parsing(tmp_path):
    # zipfile reads the whole directory and makes a ZipInfo per entry (about 7 bytes of memory a byte of it): a file
    # of 4 GiB, --data's limit, would take tens of GiB before a name could be checked
    path = tmp_path / "many.npz"
    np.savez(path, **arrays())
    with zipfile.ZipFile(path, "a") as z:
        for i in range(1400):  # 46 + 5 bytes an entry: over 64 KiB
            z.writestr(f"{i:05}", b"")
    refused(path, "not a NumPy .npz archive of arrays q, k, v (np.savez): its zip directory is")
    many = tmp_path / "names.npz"
    np.savez(many, **arrays(), **{f"x{i}": np.ones(1) for i in range(20)})
    refused(many, "unknown array(s) 'x0', 'x1', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7' and 12 more; it must hold exactly")


# defect 4: an empty path


def test_an_empty_path_is_named_as_such():
    res = run("approx", "--data", "", "--method", "exact", ok=False)  # Path('') is '.', which was 'a folder'
    assert res.exit_code == 1 and "error: --data: an empty path" in res.stderr and "folder" not in res.stderr, str(res)


# what still works


def test_a_valid_npz_reads_as_np_load_did(tmp_path):
    # the old reader was np.asarray(np.load(path)[name], dtype=np.float64); integer, float and byte-swapped dtypes,
    # Fortran order and compressed archives must give the same arrays
    from kvcalc.approx.evaluate import load_npz

    base = arrays(64, 8, 6)
    variants = {
        "plain": base,
        "types": {"q": base["q"].astype(np.float32), "k": base["k"].astype(">f8"),
                  "v": (base["v"] * 100).astype(np.int16)},
        "fortran": {name: np.asfortranarray(a) for name, a in base.items()},
    }
    for label, data in variants.items():
        for save in (np.savez, np.savez_compressed):
            path = tmp_path / f"{label}_{save.__name__}.npz"
            save(path, **data)
            with np.load(path, allow_pickle=False) as old:
                expected = [np.asarray(old[name], dtype=np.float64) for name in ("q", "k", "v")]
            for got, want in zip(load_npz(str(path)), expected):
                assert got.dtype == want.dtype and np.array_equal(got, want), (label, save.__name__)
                assert got.flags.c_contiguous == want.flags.c_contiguous, (label, save.__name__)


def test_a_valid_npz_gives_the_same_rows_however_it_is_stored(tmp_path):
    base = arrays(64, 8, 6)
    rows = {}
    for label, save, data in (("plain", np.savez, base),
                              ("packed", np.savez_compressed, {n: a.astype(">f8") for n, a in base.items()})):
        path = tmp_path / f"{label}.npz"
        save(path, **data)
        out = run("approx", "--data", str(path), "--method", "exact,topk:k=8,performer:r=16", "--scale", "0.5,1",
                  "--seeds", "2", "-f", "json")
        rows[label] = [{k: v for k, v in r.items() if k != "data"} for r in json.loads(out.stdout)]
    assert rows["plain"] == rows["packed"]
    exact = rows["plain"][0]
    assert (exact["n"], exact["d"], exact["d_v"]) == (64, 8, 6) and exact["rel_error_output"] == 0
    assert exact["flops_exact"] == 2 * 64 * 64 * (8 + 6)  # non-causal exact: 2·n²·(d + d_v)


# a second fuzz audit: a header that is not Python gave tokenize's traceback; exact attention overflowing on the data
# was printed as a NaN error (exit 0) or crashed recall@k with a traceback; an exact output of zeros gave Infinity in
# the JSON; a zero query row sent LSH's user to a smaller --scale, which cannot help


def write_raw_header(path: Path, header: str) -> None:
    """An .npz whose q.npy has `header` verbatim (padded as np.save pads it), k and v valid."""
    raw = header.encode("latin1")
    raw += b" " * (64 - (10 + len(raw) + 1) % 64) + b"\n"
    q = b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + np.zeros((16, 4)).tobytes()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("q.npy", q)
        for name, a in arrays().items():
            if name != "q":
                blob = io.BytesIO()
                np.save(blob, a)
                z.writestr(f"{name}.npy", blob.getvalue())


@pytest.mark.parametrize("header, detail", [
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (16, 4),", "EOF in multi-line statement"),
    ("'" * 3, "EOF in multi-line string"),
    ("{'descr': '<f8', 'fortran_order': False, 'shape': (10**9, 4), }", "malformed node or string on line 1: an expression"),
])
def test_a_header_that_is_not_a_literal_is_named(tmp_path, header, detail):
    path = tmp_path / "hdr.npz"
    write_raw_header(path, header)
    refused(path, f"q.npy: not a readable .npy array ({detail})")


def measured(path: Path, method: str, *extra: str):
    return run("approx", "--data", str(path), "--method", method, "--scale", "1", "--seeds", "1", "-q", *extra, ok=False)


@pytest.mark.parametrize("q, k, method", [
    ([[-1e200], [1.0]], [[-1e200], [1.0]], "cosformer"),  # exact's score 1e400: NaN rows, cosFormer finite
    ([[1e-200], [1e200]], [[1e200], [1e-200]], "window:w=1"),  # recall@k met the NaN matrix
])
def test_exact_attention_that_overflows_is_refused(tmp_path, q, k, method):
    path = tmp_path / "ovf.npz"
    np.savez(path, q=np.array(q), k=np.array(k), v=np.array([[1.0], [2.0]]))
    res = measured(path, method, "--causal")
    assert res.exit_code == 1 and "Traceback" not in res.stderr and isinstance(res.exception, SystemExit), str(res)
    assert f"error: --method {method} at --scale 1: exact attention itself is not finite on this data" in res.stderr
    assert "nan" not in res.stdout.lower()
    # at a scale where the scores fit, the same data measures
    ok = run("approx", "--data", str(path), "--method", method, "--scale", "1e-150", "--seeds", "1", "-q", "--causal")
    assert ok.exit_code == 0


def test_an_exact_output_of_zeros_is_refused(tmp_path):
    path = tmp_path / "zero.npz"
    np.savez(path, q=np.zeros((2, 1)), k=np.zeros((2, 1)), v=np.array([[1.0], [-1.0]]))  # uniform weights: mean 0
    res = measured(path, "topk:k=1", "-f", "json")
    assert res.exit_code == 1 and "Infinity" not in res.stdout, str(res)
    assert "exact attention's output is all zeros on this data" in res.stderr


def test_lsh_names_a_zero_query_row(tmp_path):
    path = tmp_path / "zrow.npz"
    np.savez(path, q=np.array([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0], [3.0, 4.0]]), k=np.ones((4, 2)),
             v=np.arange(4.0).reshape(4, 1))
    res = measured(path, "lsh:c=1")
    assert res.exit_code == 1 and "q's row 1 is all zeros" in res.stderr and "--scale" not in res.stderr, str(res)

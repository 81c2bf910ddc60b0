"""Reading named arrays from an .npz without trusting it: each member's .npy header (NEP 1, numpy.lib.format) is read
and checked before any data, so a hostile header cannot ask for terabytes, and every failure of the zip or the .npy
format becomes one KvcalcError naming the file and the member. np.load reads the data first and raises whatever
zipfile or numpy raise (BadZipFile, EOFError, _ArrayMemoryError)."""

from __future__ import annotations

import math
import re
import struct
import tokenize
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

from kvcalc.errors import KvcalcError

# What zipfile and numpy.lib.format raise on a damaged or hostile file: a bad CRC or a truncated zip (BadZipFile,
# EOFError), an encrypted member (RuntimeError), an unknown compression (NotImplementedError), a bad magic string or
# header (ValueError, numpy's word; RecursionError from ast.literal_eval; tokenize's TokenError, and SyntaxError, for a
# header that is not Python: an unclosed brace), a bad deflate stream (zlib.error)
READ_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, TypeError, ArithmeticError,
               LookupError, NotImplementedError, RuntimeError, struct.error, zlib.error, tokenize.TokenError,
               SyntaxError)
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error)  # the archive's fault, not the .npy's
REAL_KINDS = "iuf"  # signed and unsigned integers, floats: what converts to float64 without losing a part
MAX_DIRECTORY = 2**16  # bytes of zip directory: about 46 + the name's length an entry (APPNOTE 4.3.12)
SHOWN = 8  # unknown names listed
DETAIL = 160  # characters of a library's message shown (numpy quotes the whole header, up to 10,000)


@dataclass(frozen=True)
class Header:
    """One member's .npy header: where it is, and what array its data holds."""

    name: str  # the array's name: the member's, less '.npy' (as np.load names it)
    member: zipfile.ZipInfo
    shape: tuple[int, ...]
    fortran: bool
    dtype: Any  # numpy.dtype
    offset: int  # bytes of magic and header before the data

    @property
    def nbytes(self) -> int:
        """The data's length as the header states it."""
        return math.prod(self.shape) * self.dtype.itemsize


def _detail(exc: BaseException) -> str:
    raw = exc.args[0] if isinstance(exc, tokenize.TokenError) and exc.args else exc  # ('EOF in ...', (2, 0))
    text = " ".join(str(raw).split()) or type(exc).__name__
    text = re.sub(r"<ast\.\w+ object at 0x[0-9a-fA-F]+>", "an expression", text)  # ast.literal_eval's word for 10**9
    return text if len(text) <= DETAIL else text[:DETAIL] + "…"


def directory_size(path: str) -> int | None:
    """The zip directory's size in its end record (APPNOTE 4.3.16), found as zipfile finds it; zipfile reads that many
    bytes and makes a ZipInfo per entry (about 7 bytes of memory a byte). -1: ZIP64; None: no end record."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - 22 - 65535 - 20))  # the record, a comment of up to 65,535 bytes, a ZIP64 locator
        tail = f.read()
    at = len(tail) - 22  # zipfile._EndRecData: a record without a comment at the end, else the last signature
    if not (at >= 0 and tail[at:at + 4] == b"PK\x05\x06" and tail[-2:] == b"\0\0"):
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return None
    if at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":  # a ZIP64 locator: zipfile takes the sizes from there
        return -1
    return struct.unpack_from("<L", tail, at + 12)[0]


def open_archive(path: str, names: tuple[str, ...], what: str) -> zipfile.ZipFile:
    """The .npz at `path` as a zip archive, or a KvcalcError saying it is not one (of arrays `names`)."""
    wrong = f"{what}: not a NumPy .npz archive of arrays {', '.join(names)} (np.savez)"
    try:
        directory = directory_size(path)
        if directory == -1:
            raise KvcalcError(f"{wrong}: a ZIP64 archive, which arrays within approx's bounds never need")
        if directory is not None and directory > MAX_DIRECTORY:
            raise KvcalcError(f"{wrong}: its zip directory is {directory:,} bytes; a few arrays need at most "
                              f"{MAX_DIRECTORY:,}")
        return zipfile.ZipFile(path)
    except READ_ERRORS as exc:
        raise KvcalcError(f"{wrong}: {_detail(exc)}") from None


def members(archive: zipfile.ZipFile, names: tuple[str, ...], shapes: str, what: str) -> dict[str, zipfile.ZipInfo]:
    """The members holding arrays `names`; a KvcalcError for one missing, unknown or there twice."""
    found: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = info.filename.removesuffix(".npy")
        if name in found:
            raise KvcalcError(f"{what}: array {name} is there twice (members {found[name].filename!r} and "
                              f"{info.filename!r}); a corrupt or hand-made archive")
        found[name] = info
    missing = [n for n in names if n not in found]
    if missing:
        raise KvcalcError(f"{what}: missing array(s) {', '.join(missing)} ({shapes})")
    unknown = [n for n in found if n not in names]
    if unknown:
        more = f" and {len(unknown) - SHOWN:,} more" if len(unknown) > SHOWN else ""
        raise KvcalcError(f"{what}: unknown array(s) {', '.join(map(repr, unknown[:SHOWN]))}{more}; it must hold "
                          f"exactly {', '.join(names)} ({shapes})")
    return {n: found[n] for n in names}


def open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str) -> Any:
    """A member opened for reading, or a KvcalcError (encrypted, an unknown compression, a bad local header)."""
    try:
        return archive.open(info)
    except READ_ERRORS as exc:
        raise KvcalcError(f"{what}: not a readable .npz archive ({_detail(exc)})") from None


def read_header(archive: zipfile.ZipFile, name: str, info: zipfile.ZipInfo, what: str) -> Header:
    """A member's .npy header, refused unless its dtype holds real numbers; no data is read."""
    import numpy as np

    try:
        with open_member(archive, info, what) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):  # 3.0: only for structured dtypes with non-Latin-1 field names
                raise KvcalcError(f"{what}: {info.filename}: .npy format version {version[0]}.{version[1]}; np.save "
                                  "writes 1.0 (2.0 for very wide headers), which is what is read here")
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            offset = f.tell()
    except READ_ERRORS as exc:
        if isinstance(exc, ZIP_ERRORS):  # a bad CRC shows here when the member fits zipfile's first read
            raise KvcalcError(f"{what}: not a readable .npz archive ({_detail(exc)})") from None
        raise KvcalcError(f"{what}: {info.filename}: not a readable .npy array ({_detail(exc)})") from None
    if dtype.kind not in REAL_KINDS or dtype.subdtype is not None:
        raise KvcalcError(f"{what}: {name} has dtype {dtype}; q, k and v must hold real numbers, an integer or float "
                          "dtype (complex, bool, object, string, date and structured arrays are refused)")
    return Header(name, info, tuple(shape), bool(fortran), dtype, offset)


def check_length(header: Header, what: str) -> None:
    """A KvcalcError when the member's data is not as long as its header's shape and dtype say."""
    have = header.member.file_size - header.offset
    if have != header.nbytes:
        raise KvcalcError(f"{what}: {header.member.filename}: its header says shape {header.shape} of {header.dtype} "
                          f"({header.nbytes:,} bytes) but it holds {have:,} bytes of data: a truncated or corrupt file")


def read_data(archive: zipfile.ZipFile, header: Header, what: str) -> Any:
    """The member's array as float64, read after its header was checked (so at most header.nbytes are read)."""
    import numpy as np

    try:
        with open_member(archive, header.member, what) as f:
            f.seek(header.offset)
            data = f.read(header.nbytes + 1)  # to the member's end: zipfile checks the CRC there
    except READ_ERRORS as exc:
        raise KvcalcError(f"{what}: not a readable .npz archive ({_detail(exc)})") from None
    if len(data) != header.nbytes:  # the directory's size and the stream disagree
        raise KvcalcError(f"{what}: {header.member.filename}: {len(data):,} bytes of data where its header says "
                          f"{header.nbytes:,}: a truncated or corrupt file")
    array = np.frombuffer(data, dtype=header.dtype).reshape(header.shape, order="F" if header.fortran else "C")
    return array.astype(np.float64)

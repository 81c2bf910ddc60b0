"""Hardware presets and the roofline lower bound on the time a step takes.

Conventions: FLOPs not MACs; `peak_flops_bf16` is dense bf16 matrix throughput with no 2:4 sparsity, in FLOP/s;
`memory_bandwidth` is the vendor's decimal figure in bytes/s (1 TB/s = 10**12); `memory_bytes` is the physical
capacity in bytes; `interconnect_bandwidth` (optional) is the scale-up link per device in bytes/s, one direction.
Times are exact `Fraction`s of a second, so nothing is rounded before the renderer.

In a YAML file the byte fields take an integer or a size with a unit: decimal units are powers of 1000
(80GB = 80 * 10**9 bytes, 3.35TB/s), binary ones powers of 1024 (192GiB = 192 * 2**30 bytes).

The roofline takes a step to run at peak compute and peak bandwidth at once, with compute and memory traffic
overlapping perfectly: its time is a lower bound that no real kernel reaches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from kvcalc.errors import SpecError
from kvcalc.fields import as_row, figure
from kvcalc.paths import user_path
from kvcalc.registry import bundled_dir, bundled_names, find_bundled, is_special_file, looks_like_path
from kvcalc.spec import FAMILY_PATTERN, TEXT_PATTERN, Strict, validate_mapping
from kvcalc.yamlfile import check_file, is_file, line_finder, load_yaml

# ---------------------------------------------------------------- sizes in a YAML file

# ASCII digits, grouped by single underscores as YAML 1.1 and Python write them (1_000), one space at most before the unit
_SIZE = re.compile(r"(?P<number>[0-9](?:_?[0-9])*(?:\.[0-9]+)?) ?(?P<prefix>[kKMGTP]?)(?P<binary>i?)B(?P<per_second>/s)?")
# A plain number as YAML 1.1 and Python write one: no sign, no space, single underscores between digits, no leading
# zero (0100 is octal in YAML 1.1), an optional fraction and exponent ('989.4e12', read by YAML 1.1 as a string)
_NUMBER = re.compile(r"(?:0|[1-9](?:_?[0-9])*)(?:\.[0-9](?:_?[0-9])*)?(?:[eE][+-]?[0-9]+)?")
_PREFIX_POWER = {"": 0, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
MAX_EXPONENT = 29  # every figure is below 10**30 (a thousand yotta-FLOP/s, bytes or bytes/s): nothing real comes near
_BOUND = Field(gt=0, lt=10 ** (MAX_EXPONENT + 1))
_UNIT_OF = {"memory_bytes": "bytes", "memory_bandwidth": "bytes/s", "interconnect_bandwidth": "bytes/s"}


def parse_bytes(text: str, per_second: bool = False) -> int:
    """A size such as '80GB' (decimal: 80 * 10**9) or '192GiB' (binary: 192 * 2**30) as an exact int of bytes.

    Args:
        text: a number, then a unit: B, kB, MB, GB, TB, PB (powers of 1000) or KiB, MiB, GiB, TiB, PiB (powers of
            1024); with per_second, the unit ends in '/s' ('3.35TB/s'; '3.35TB' is refused as a size). A lower-case b
            (bits) is refused.
        per_second: whether the figure is a rate (bytes/s) rather than a capacity.
    Returns:
        The whole number of bytes (or bytes/s); a ValueError says what was wrong.
    """
    match = _SIZE.fullmatch(text)
    if match and per_second and not match["per_second"] and not (match["binary"] and not match["prefix"]):
        raise ValueError(f"{text!r} is a size, not a rate: write it per second ({text}/s)")
    if not match or (match["binary"] and not match["prefix"]) or (match["per_second"] and not per_second):
        noun, example = (
            ("a bandwidth in bytes/s", "3.35TB/s = 3.35 * 10**12, 800GiB/s = 800 * 2**30")
            if per_second
            else ("a size in bytes", "80GB = 80 * 10**9, 192GiB = 192 * 2**30")
        )
        raise ValueError(f"{text!r} is not {noun} (write a whole number, or a number with a unit: {example})")
    base = 1024 if match["binary"] else 1000
    value = Fraction(match["number"].replace("_", "")) * base ** _PREFIX_POWER[match["prefix"]]
    if value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


# ---------------------------------------------------------------- the model


class Hardware(Strict):
    """One accelerator: its peak dense bf16 throughput, memory bandwidth and memory size, with their source."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Short name, as used on the command line.")
    vendor: str = Field(pattern=FAMILY_PATTERN, description="Maker, e.g. 'NVIDIA', 'AMD', 'Apple'.")
    description: str = Field(pattern=FAMILY_PATTERN, description="The exact part: form factor, memory type, power.")
    peak_flops_bf16: Annotated[int, _BOUND] = Field(
        description="Peak dense bf16 matrix throughput in FLOP/s (no 2:4 sparsity), as the vendor states it."
    )
    memory_bandwidth: Annotated[int, _BOUND] = Field(description="Peak memory bandwidth in bytes/s (decimal: 3.35 TB/s = 3350000000000).")
    memory_bytes: Annotated[int, _BOUND] = Field(
        description="Memory capacity in bytes: an integer, or a size such as '80GB' (80 * 10**9) or '80GiB' (80 * 2**30)."
    )
    interconnect_bandwidth: Annotated[int, _BOUND] | None = Field(
        None,
        description="Scale-up interconnect bandwidth per device in bytes/s, one direction, decimal (NVLink 5 is quoted as"
        " 1.8 TB/s total, both directions together, and stored as 900 GB/s = 900000000000); absent when not published.",
    )
    interconnect_peers: Annotated[int, Field(ge=1, le=1 << 20, strict=True)] | None = Field(
        None,
        description="Where the scale-up links join the devices directly, all to all (no switch): the peers they are"
        " split among evenly, so one peer is reached over interconnect_bandwidth / peers (Gaudi 3's HLS-3: 21 ports to"
        " 7 peers, 3 each); absent for a switched fabric (NVSwitch), where every peer is reached at the whole bandwidth.",
    )
    compute_capability: str | None = Field(
        None,
        description="An NVIDIA GPU's compute capability, major.minor (9.0: Hopper; 10.0: B200), which selects vLLM's"
        " per-architecture kernels (its Gated DeltaNet prefill); absent for other vendors, and where unknown (read as"
        " an A100's where the name or description says A100, else as Hopper's).",
    )
    source: str = Field(pattern=TEXT_PATTERN, description="URL(s) of the vendor datasheet or page the numbers come from.")
    notes: str | None = Field(None, pattern=TEXT_PATTERN,
                              description="Free-form remarks: accumulate modes, what was chosen and why.")

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _capability_text(cls, value: object) -> object:
        """major.minor as written (a YAML float, 9.0, by its text)."""
        if value is None:
            return value
        text = getattr(value, "text", repr(value)) if isinstance(value, float) else value
        if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,2}\.[0-9]", text):
            raise ValueError(f"{str(text)[:40]!r}: write it as major.minor, as NVIDIA lists it (9.0 for Hopper, 8.0 "
                             "for an A100)")
        return text

    @property
    def capability(self) -> tuple[int, int] | None:
        """compute_capability as (major, minor); where absent, an A100's 8.0 for an NVIDIA part whose name or
        description says A100 (as vLLM's batch defaults tell one), else None."""
        if self.compute_capability is None:
            return (8, 0) if self.platform == "cuda" and self.names_a100 else None
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def names_a100(self) -> bool:
        """Whether the preset's name or description says A100, its words for the part (as vLLM reads a device's
        name, 'NVIDIA A100-SXM4-80GB')."""
        return "a100" in f"{self.name} {self.description}".casefold()

    def group_bandwidth(self, group: int) -> Fraction | None:
        """The interconnect bandwidth one device spends on a collective among `group` devices (one direction): the
        whole interconnect_bandwidth through a switch; in a direct mesh the links to the group's other devices,
        interconnect_bandwidth · (group − 1) / peers. None where none is published, and for a group larger than one
        mesh (peers + 1 devices), which leaves it over links no preset describes."""
        bandwidth = self.interconnect_bandwidth
        if bandwidth is None or self.interconnect_peers is None:
            return None if bandwidth is None else Fraction(bandwidth)
        if group - 1 > self.interconnect_peers:
            return None
        return Fraction(bandwidth * (group - 1), self.interconnect_peers)

    @property
    def platform(self) -> str:
        """The serving engines' platform, read from the vendor (the one place it is): 'cuda' (NVIDIA), 'rocm' (AMD),
        'tpu' (Google), 'apple' (whose GPU vLLM does not use: on macOS it runs its CPU backend), else 'other' (Intel's
        Gaudi): what selects vLLM's and SGLang's per-platform defaults (vLLM's extensible KV cache and its TPU batch
        defaults, SGLang's CUDA graphs and AMD's aiter)."""
        vendor = self.vendor.casefold()
        if "nvidia" in vendor:
            return "cuda"
        if re.search(r"\bamd\b|advanced micro devices", vendor):
            return "rocm"
        if re.search(r"\bapple\b", vendor):
            return "apple"
        return "tpu" if "google" in vendor else "other"

    @field_validator("peak_flops_bf16", "memory_bandwidth", "memory_bytes", "interconnect_bandwidth", mode="before")
    @classmethod
    def _whole_number(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, bool) or not isinstance(value, (str, float)):
            return value  # ints pass on to the bounds; a bool is refused there (strict)
        # A float (3.35e+12) and YAML 1.1's unsigned exponent (989.4e12, read as a string) are accepted when they are
        # whole numbers; the exponent and digits are bounded first, so 1e999999999 fails at once.
        # a YAML float's digits as written (yamlfile.YamlFloat): its float value may have lost some
        text = getattr(value, "text", repr(value)) if isinstance(value, float) else value
        if not text.isascii():  # Decimal and \d read other scripts' digits ('８0GB')
            raise ValueError(f"{text[:40]!r}: a number is written in the digits 0-9")
        if re.fullmatch(r"0[0-9_]+", text):
            raise ValueError(f"{text[:40]!r}: a leading zero (YAML 1.1 reads 0100 as octal 64); write the number without it")
        if not _NUMBER.fullmatch(text):  # Decimal alone would take ' 80 ', '_80_' and '8__0'
            unit = _UNIT_OF.get(info.field_name or "")
            if unit is None or len(text) > 64:
                raise ValueError(f"{text[:40]!r} is not a whole number: write its digits (989400000000000, 989_400_000_000_000) "
                                 "or an exponent (989.4e12); units such as TFLOPS are not read")
            return parse_bytes(text, per_second=unit == "bytes/s")
        number = Decimal(text.replace("_", ""))  # _NUMBER is Decimal's syntax less its leniencies
        if not number.is_finite() or len(number.as_tuple().digits) > 64 or number.adjusted() > MAX_EXPONENT:
            raise ValueError(f"{text[:40]!r} is not a whole number below 10**{MAX_EXPONENT + 1}")
        if number != number.to_integral_value():
            raise ValueError(f"{text[:40]!r} is not a whole number")
        return int(number)

    @property
    def ridge_point(self) -> Fraction:
        """Arithmetic intensity (FLOPs per byte) at which compute time equals memory time."""
        return Fraction(self.peak_flops_bf16, self.memory_bandwidth)


# ---------------------------------------------------------------- finding presets


def hardware_dir() -> Path:
    """The bundled hardware presets."""
    return bundled_dir("hardware_specs")


def bundled_hardware() -> list[str]:
    """Names of the bundled hardware presets, sorted."""
    return sorted(p.stem for p in hardware_dir().glob("*.yaml"))


def hardware_from_dict(data: object, origin: str, locate: Callable[[tuple], int | None] | None = None) -> Hardware:
    """Validate a parsed mapping as Hardware, raising SpecError that names `origin` (and lines, with `locate`)."""
    fields = "name, vendor, description, peak_flops_bf16, memory_bandwidth, memory_bytes, source"
    return validate_mapping(Hardware, data, origin, "hardware spec", fields, locate)


def load_hardware(arg: str) -> Hardware:
    """Resolve HARDWARE: an existing YAML file, else a bundled preset (exact, case-insensitive), else a LookupFailure."""
    path = user_path(arg)
    if is_file(path, arg):
        return hardware_from_dict(load_yaml(path), str(path), line_finder(path))
    if looks_like_path(arg, (".yaml", ".yml")) or is_special_file(path):
        if path.is_dir():
            raise SpecError(f"{arg}: is a folder, not a hardware spec file")
        check_file(path, arg)  # says what it is instead: a FIFO, a symlink loop, missing, ...
        raise SpecError(f"{arg}: no such file")
    name = find_bundled(arg, bundled_hardware(), "hardware",
                        "'kvcalc hardware' lists the bundled presets; a path to a YAML hardware spec also works",
                        (bundled_names, f"--hardware {arg}: a bundled model, not a hardware preset ('kvcalc hardware' "
                                        "lists the presets)"))
    return hardware_from_dict(load_yaml(hardware_dir() / f"{name}.yaml"), f"hardware_specs/{name}.yaml")


# ---------------------------------------------------------------- the roofline


@dataclass(frozen=True)
class Roofline:
    """The roofline lower bound on one step's time: perfect overlap of compute and memory traffic, at peak rates.

    All times are exact Fractions of a second. `bound` is "compute" when compute time is at least memory time,
    i.e. when `intensity >= ridge_point`; at the ridge point exactly the two times are equal and it says "compute".
    """

    compute_seconds: Fraction  # flops / peak_flops_bf16
    memory_seconds: Fraction  # bytes_moved / memory_bandwidth
    seconds: Fraction  # max of the two: the lower bound
    bound: Literal["compute", "memory"]
    intensity: Fraction  # FLOPs per byte moved
    ridge_point: Fraction  # peak_flops_bf16 / memory_bandwidth, FLOPs per byte


def roofline(flops: int, bytes_moved: int, hw: Hardware) -> Roofline:
    """Lower bound on the time of a step doing `flops` FLOPs and moving `bytes_moved` bytes on `hw`.

    Assumes peak throughput and perfect overlap of compute with memory traffic, so the real time is never less.

    Args:
        flops: FLOPs of the step (not MACs), a non-negative int.
        bytes_moved: bytes read from and written to memory by the step, a positive int (a step reads at least
            its weights, so zero bytes means a caller's mistake).
        hw: the hardware.
    Returns:
        A Roofline with exact Fraction times in seconds.
    """
    for label, value in (("flops", flops), ("bytes_moved", bytes_moved)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{label} must be an int, not {type(value).__name__}")
    if flops < 0:
        raise ValueError(f"flops must be non-negative, got {flops}")
    if bytes_moved <= 0:
        raise ValueError(f"bytes_moved must be positive, got {bytes_moved}")
    compute = Fraction(flops, hw.peak_flops_bf16)
    memory = Fraction(bytes_moved, hw.memory_bandwidth)
    return Roofline(
        compute_seconds=compute,
        memory_seconds=memory,
        seconds=max(compute, memory),
        bound="compute" if compute >= memory else "memory",
        intensity=Fraction(flops, bytes_moved),
        ridge_point=hw.ridge_point,
    )


@dataclass(frozen=True)
class HardwareRow:
    """One row of `hardware`: a preset's peak figures (exact ints, except the ridge point)."""

    name: str = figure("Name", "text", "the preset's name, as --hardware takes it")
    vendor: str = figure("Vendor", "text", "maker")
    peak_flops_bf16: int = figure("Peak bf16\nper second", "flops", "peak dense bf16 matrix throughput, FLOP/s")
    memory_bandwidth: int = figure("Memory\nbandwidth", "bandwidth", "peak memory bandwidth, bytes/s (decimal)")
    memory_bytes: int = figure("Memory", "bytes", "memory capacity in bytes")
    ridge_flops_per_byte: float = figure("Ridge\nFLOP/byte", "float",
                                         "peak_flops_bf16 / memory_bandwidth: the intensity where compute and memory time meet")
    interconnect_bandwidth: int | None = figure("Interconnect\n(each way)", "bandwidth",
                                                "scale-up interconnect per device, bytes/s, one direction (where published)")
    source: str = figure("Source", "text", "URL(s) of the vendor datasheet or page the figures come from (csv and json)")
    interconnect_peers: int | None = figure("Mesh\npeers", "int", "peers a direct mesh splits the interconnect among "
                                            "(each reached at interconnect_bandwidth / peers); none through a switch")
    description: str = figure("Part", "text", "the exact part: form factor, memory, power (csv and json)")
    notes: str | None = figure("Notes", "text", "what was chosen and why, where a figure is not the vendor's (csv and json)")
    compute_capability: str | None = figure("Compute\ncapability", "text", "an NVIDIA GPU's, which picks vLLM's kernels "
                                            "(its Gated DeltaNet prefill)")


def hardware_rows(hardware: list[Hardware]) -> list[dict]:
    """One row per preset with stable keys, for a listing table; raw ints except the ridge point (a float)."""
    return [as_row(HardwareRow(name=hw.name, vendor=hw.vendor, peak_flops_bf16=hw.peak_flops_bf16,
                               memory_bandwidth=hw.memory_bandwidth, memory_bytes=hw.memory_bytes,
                               ridge_flops_per_byte=float(hw.ridge_point), interconnect_bandwidth=hw.interconnect_bandwidth,
                               source=hw.source, interconnect_peers=hw.interconnect_peers, description=hw.description,
                               notes=hw.notes, compute_capability=hw.compute_capability))
            for hw in hardware]

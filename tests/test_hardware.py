"""Hardware presets and the roofline: presets load with sources and match the vendors' published figures,
the roofline has its closed forms, and user files fail with file, field and rule."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from fractions import Fraction

import pytest
from pydantic import ValidationError

from conftest import run
from kvcalc.errors import LookupFailure, SpecError
from kvcalc.hardware import (
    Hardware,
    Roofline,
    bundled_hardware,
    hardware_dir,
    hardware_rows,
    load_hardware,
    roofline,
)

ALL_HARDWARE = bundled_hardware()
GiB = 2**30


def tera(figure: str) -> int:
    """A vendor's 'x TFLOPS' or 'x TB/s' as an exact int."""
    return int(Decimal(figure) * 10**12)


def giga(figure: str) -> int:
    """A vendor's 'x GB/s' as an exact int."""
    return int(Decimal(figure) * 10**9)


# Published figures, written here from the vendors' pages (not from the YAML files):
# name: (peak dense bf16 FLOP/s, memory bandwidth in bytes/s, memory in bytes).
# Memory sizes are the vendors' "GB" read as GiB: HBM stacks and GDDR/LPDDR chips come in power-of-two sizes.
PUBLISHED = {
    # NVIDIA H100 whitepaper, https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper:
    # H100 SXM5 peak BF16 Tensor 989.4 TFLOPS dense (1978.9 sparse); https://www.nvidia.com/en-us/data-center/h100/:
    # 3.35TB/s, 80GB HBM3.
    "h100-80gb": (tera("989.4"), tera("3.35"), 80 * GiB),
    # https://www.nvidia.com/en-us/data-center/h200/: BF16 1,979 TFLOPS with sparsity (dense: the same GH100 at the
    # same clocks as the H100 SXM5, 989.4), 141GB HBM3e, 4.8TB/s.
    "h200-141gb": (tera("989.4"), tera("4.8"), 141 * GiB),
    # NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): A100 80GB SXM BF16 312 TFLOPS
    # (624 sparse), 2,039 GB/s, 80GB HBM2e.
    "a100-80gb": (tera("312"), giga("2039"), 80 * GiB),
    # https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html: peak BF16 1307.4 TFLOPs
    # (2614.9 with structured sparsity), 5.3 TB/s, 192 GB HBM3.
    "mi300x": (tera("1307.4"), tera("5.3"), 192 * GiB),
    # NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): BFLOAT16 Tensor 362.05 TFLOPS
    # (733 sparse), 864GB/s, 48GB GDDR6.
    "l40s": (tera("362.05"), giga("864"), 48 * GiB),
    # NVIDIA Ada whitepaper (nvidia-ada-gpu-architecture.pdf), RTX 4090: peak BF16 Tensor TFLOPS with FP32
    # accumulate 165.2 (330.4 sparse), 1008 GB/s, 24 GB GDDR6X.
    "rtx-4090": (tera("165.2"), giga("1008"), 24 * GiB),
    # https://www.apple.com/newsroom/2023/06/apple-introduces-m2-ultra/: 800GB/s, up to 192GB;
    # https://www.apple.com/mac-pro/: 76-core GPU up to 27.2 teraflops (FP32; no bf16 figure is published).
    "m2-ultra": (tera("27.2"), giga("800"), 192 * GiB),
    # https://www.nvidia.com/en-us/data-center/dgx-b200/: 8 GPUs, 1,440GB HBM3e; NVIDIA's Blackwell brief
    # (via glennklockwood.com/garden/processors/B200): HGX B200 BF16 matrix 2250 TFLOPS dense (4500 sparse);
    # NVIDIA's Blackwell datasheet (via ai-dynamo/aiconfigurator#1246): HGX B200 7.7 TB/s, not DGX's 64 / 8.
    "b200-180gb": (tera("2250"), tera("7.7"), 180 * GiB),
    # https://www.nvidia.com/en-us/data-center/gb200-nvl72/: GB200 superchip (2 GPUs) 10 PFLOPS FP16/BF16 with
    # sparsity, so 2.5 dense per GPU; 13.4TB HBM3e for 72 GPUs, 186GB each; 8 TB/s per GPU.
    "gb200-186gb": (tera("10000") // 2 // 2, tera("8"), 186 * GiB),
    # https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html: peak BF16 1307.4 TFLOPs,
    # 256 GB HBM3E (ROCm GPU specs: VRAM 256 GiB), 6 TB/s.
    "mi325x": (tera("1307.4"), tera("6"), 256 * GiB),
    # https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html: BF16 matrix 2.5 PFLOPS dense
    # (5 with sparsity), 288 GB HBM3E (ROCm GPU specs: VRAM 288 GiB, 256 CUs), 8 TB/s; the 2.5 is AMD's rounding of
    # 256 CUs x 4096 bf16 FLOP a clock x 2.4 GHz (Hot Chips 2025), stored unrounded so a time stays a lower bound.
    "mi355x": (256 * 4096 * giga("2.4"), tera("8"), 288 * GiB),
    # https://docs.cloud.google.com/tpu/docs/v5e: 197 TFLOPs (bf16) per chip; HBM2 16 GB, 819 GBps.
    "tpu-v5e": (tera("197"), giga("819"), 16 * GiB),
    # https://docs.cloud.google.com/tpu/docs/v5p: 459 TFLOPs (BF16) per chip; HBM 95 GiB, 2765 GBps.
    "tpu-v5p": (tera("459"), giga("2765"), 95 * GiB),
    # https://docs.cloud.google.com/tpu/docs/v6e: 918 TFLOPs (bf16) per chip; HBM 32 GB, 1638 GBps.
    "tpu-v6e": (tera("918"), giga("1638"), 32 * GiB),
    # Intel Gaudi 3 white paper and Hot Chips 2024 talk: BF16 matrix 1835 TFLOPs; 128 GB HBM2e; 3.67 TB/s.
    "gaudi3": (tera("1835"), tera("3.67"), 128 * GiB),
    # No NVIDIA datasheet: third-party reports (willitrunai.com, Wccftech's leaked table): FP16/BF16 148 TFLOPS
    # dense, 96 GB HBM3, 4.0 TB/s, NVLink 900 GB/s.
    "h20-96gb": (tera("148"), tera("4"), 96 * GiB),
    # NVIDIA RTX Blackwell whitepaper (via spheron.network, Tom's Hardware): FP16 tensor 838.4 TFLOPS sparse, so
    # 419.2 dense (stored for bf16: measured bf16 with FP32 accumulate exceeds the listed 209.5); 1792 GB/s; 32 GB.
    "rtx-5090": (tera("419.2"), giga("1792"), 32 * GiB),
    # Apple (M4 Max: 40-core GPU, 128GB, 546GB/s); FLOP/s estimated: 40 x 128 ALUs x 2 x 1.678 GHz.
    "m4-max": (40 * 128 * 2 * giga("1.678"), giga("546"), 128 * GiB),
}

# Interconnect, one direction per device in bytes/s: vendors quote both directions together, so half of it.
PUBLISHED_INTERCONNECT = {
    # NVLink 5: 1.8 TB/s per GPU (DGX B200: 14.4 TB/s over 8 GPUs; GB200 NVL72: 130 TB/s over 72).
    "b200-180gb": tera("1.8") // 2,
    "gb200-186gb": tera("1.8") // 2,
    # NVLink 3: "NVIDIA NVLink 600GB/s" in the A100 datasheet (SXM), twelve links.
    "a100-80gb": giga("600") // 2,
    # NVLink 4: "NVIDIA NVLink: 900GB/s" on the H100 SXM and H200 SXM product pages.
    "h100-80gb": giga("900") // 2,
    "h200-141gb": giga("900") // 2,
    "h20-96gb": giga("900") // 2,
    # Google's "bidirectional inter-chip interconnect (ICI) bandwidth per chip": 400, 1200 and 800 GBps.
    "tpu-v5e": giga("400") // 2,
    "tpu-v5p": giga("1200") // 2,
    "tpu-v6e": giga("800") // 2,
    # Gaudi 3 (Hot Chips 2024): networking 1200 GB/s bidirectional, 24x 200GbE.
    "gaudi3": giga("525"),
}


# ---------------------------------------------------------------- bundled presets


def test_required_presets_are_bundled():
    required = {"h100-80gb", "h200-141gb", "a100-80gb", "mi300x", "l40s", "rtx-4090"}
    assert required <= set(ALL_HARDWARE)
    assert any(load_hardware(n).vendor == "Apple" for n in ALL_HARDWARE), "no Apple part among the presets"


def test_every_preset_is_checked_against_a_published_figure():
    assert set(ALL_HARDWARE) == set(PUBLISHED)


@pytest.mark.parametrize("name", ALL_HARDWARE)
def test_bundled_preset_loads_with_source_and_plausible_magnitudes(name):
    hw = load_hardware(name)
    assert hw.name == name, "a preset's name must match its file name"
    assert "https://" in hw.source
    assert hw.vendor and hw.description
    assert 10**13 <= hw.peak_flops_bf16 <= 10**16, hw.peak_flops_bf16  # 10 TFLOPS .. 10 PFLOPS
    assert 10**11 <= hw.memory_bandwidth <= 10**13, hw.memory_bandwidth  # 100 GB/s .. 10 TB/s
    assert 8 * GiB <= hw.memory_bytes <= 1024 * GiB, hw.memory_bytes
    assert 10 <= hw.ridge_point <= 1000, float(hw.ridge_point)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_matches_published_figures(name):
    hw = load_hardware(name)
    seen = (hw.peak_flops_bf16, hw.memory_bandwidth, hw.memory_bytes)
    assert seen == PUBLISHED[name], f"we see {seen}, expected {PUBLISHED[name]}"


@pytest.mark.parametrize("name", ALL_HARDWARE)
def test_preset_interconnect_matches_published_figure(name):
    # Presets without a sourced figure leave it unset rather than guess.
    assert load_hardware(name).interconnect_bandwidth == PUBLISHED_INTERCONNECT.get(name)


def test_gaudi3_interconnect_is_its_21_scale_up_ports_of_200_gbit_ethernet_each_way():
    # an audit: Intel's network docs give 21 scale-up ports (the box's all-to-all) and 3 scale-out ports; the
    # scale-up link of one device, one direction, is 21 · 200 Gb/s = 525 GB/s (kvcalc counted all 24: 600)
    assert load_hardware("gaudi3").interconnect_bandwidth == 21 * 200 * 10**9 // 8 == 525 * 10**9


def test_per_device_presets_say_what_one_unit_is():
    assert "one chip" in load_hardware("tpu-v5p").description
    assert load_hardware("gb200-186gb").description.startswith("Blackwell GPU of a GB200")


def test_presets_explain_their_choices():
    # RTX 4090: bf16 has only the FP32-accumulate path; the 330.3 figure is FP16 with FP16 accumulate.
    notes = load_hardware("rtx-4090").notes
    assert "FP32 accumulate" in notes and "330.3" in notes
    # Apple: no bf16 tensor cores; the figure chosen is the GPU's fp32 peak.
    notes = load_hardware("m2-ultra").notes
    assert "no bf16" in notes and "FP32" in notes
    # RTX 5090: the whitepaper's 209.5 (FP32 accumulate) is measured to be exceeded; the full rate is stored.
    notes = load_hardware("rtx-5090").notes
    assert "209.5" in notes and "370.6" in notes and "419.2" in notes
    # Figures that are not the vendor's say so where a user sees the preset.
    assert "third-party" in load_hardware("h20-96gb").description
    assert "estimate" in load_hardware("m4-max").description


def test_estimated_apple_peak_is_the_alu_count_times_the_clock():
    # 40 GPU cores x 128 FP32 ALUs x 2 FLOP per FMA x 1.678 GHz = 17.18272e12; bf16 runs at the fp32 rate.
    assert load_hardware("m4-max").peak_flops_bf16 == 17_182_720_000_000


def test_h100_ridge_point_is_about_295_flops_per_byte():
    # 989.4 TFLOPS / 3.35 TB/s = 295.3 FLOPs per byte, the figure usually quoted for the H100 SXM roofline.
    hw = load_hardware("h100-80gb")
    assert hw.ridge_point == Fraction(989_400, 3_350)
    assert round(float(hw.ridge_point)) == 295


def test_lookup_is_case_insensitive_and_exact():
    assert load_hardware("H100-80GB").name == "h100-80gb"
    assert load_hardware("MI300X").name == "mi300x"


def test_hardware_dir_holds_one_yaml_per_preset():
    assert sorted(p.stem for p in hardware_dir().glob("*.yaml")) == ALL_HARDWARE


# ---------------------------------------------------------------- roofline closed forms

# A hand-made part: 1 PFLOP/s and 1 TB/s, so the ridge point is 1000 FLOPs per byte.
TOY = Hardware(
    name="toy", vendor="test", description="round numbers", peak_flops_bf16=10**15, memory_bandwidth=10**12,
    memory_bytes=64 * GiB, source="https://example.invalid",
)


def test_one_petaflop_on_a_one_petaflop_part_takes_exactly_one_second():
    r = roofline(10**15, 10**9, TOY)
    assert r.compute_seconds == 1 and isinstance(r.compute_seconds, Fraction)
    assert r.memory_seconds == Fraction(1, 1000)  # 10**9 bytes at 10**12 bytes/s
    assert r.seconds == 1 and r.bound == "compute"
    assert r.intensity == 10**6 and r.ridge_point == 1000


def test_decode_like_step_is_memory_bound():
    # A 1B-parameter bf16 decode step: 2 FLOPs per parameter, 2 bytes per parameter read.
    flops, bytes_moved = 2 * 10**9, 2 * 10**9
    r = roofline(flops, bytes_moved, TOY)
    assert r.memory_seconds == Fraction(2 * 10**9, 10**12) == Fraction(1, 500)
    assert r.compute_seconds == Fraction(1, 500_000)
    assert r.seconds == r.memory_seconds and r.bound == "memory"
    assert r.intensity == 1
    assert 1 / r.seconds == 500  # tokens per second at batch 1


def test_bound_flips_exactly_at_the_ridge_point():
    bytes_moved = 10**9
    at_ridge = roofline(1000 * bytes_moved, bytes_moved, TOY)
    assert at_ridge.intensity == at_ridge.ridge_point
    assert at_ridge.compute_seconds == at_ridge.memory_seconds == Fraction(1, 1000)
    assert at_ridge.bound == "compute"  # a tie counts as compute-bound: intensity >= ridge point
    assert roofline(1000 * bytes_moved - 1, bytes_moved, TOY).bound == "memory"
    assert roofline(1000 * bytes_moved, bytes_moved + 1, TOY).bound == "memory"
    assert roofline(1000 * bytes_moved + 1, bytes_moved, TOY).bound == "compute"


def test_roofline_on_a_bundled_preset_is_exact():
    hw = load_hardware("h100-80gb")
    r = roofline(989_400_000_000_000, 3_350_000_000_000, hw)  # one second of each
    assert r.compute_seconds == r.memory_seconds == r.seconds == 1


def test_roofline_rejects_what_it_cannot_bound():
    with pytest.raises(ValueError, match="bytes_moved must be positive"):
        roofline(10, 0, TOY)
    with pytest.raises(ValueError, match="flops must be non-negative"):
        roofline(-1, 10, TOY)
    with pytest.raises(TypeError, match="flops must be an int"):
        roofline(1e15, 10, TOY)


def test_roofline_is_frozen():
    r = roofline(1, 1, TOY)
    assert isinstance(r, Roofline)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seconds = Fraction(0)


# ---------------------------------------------------------------- listing rows


def test_hardware_rows_have_stable_keys_and_raw_numbers():
    presets = [load_hardware(n) for n in ALL_HARDWARE]
    rows = hardware_rows(presets)
    assert [r["name"] for r in rows] == ALL_HARDWARE
    for row, hw in zip(rows, presets):
        assert list(row) == [
            "name", "vendor", "peak_flops_bf16", "memory_bandwidth", "memory_bytes", "ridge_flops_per_byte",
            "interconnect_bandwidth",  # added by #7: keys only grow
            "source",  # a review: the command's help promised sources no output carried (csv and json, not the table)
            "interconnect_peers", "description", "notes",  # a review: no output said which part a preset is
            "compute_capability",  # vLLM's Gated DeltaNet prefill by GPU
        ]
        assert row["source"] == hw.source and "https://" in row["source"]
        assert row["description"] == hw.description and row["notes"] == hw.notes
        assert row["interconnect_peers"] == (7 if hw.name == "gaudi3" else None)
        assert row["interconnect_bandwidth"] == PUBLISHED_INTERCONNECT.get(hw.name)
        assert row["peak_flops_bf16"] == hw.peak_flops_bf16 and isinstance(row["memory_bytes"], int)
        assert isinstance(row["ridge_flops_per_byte"], float)
        assert row["ridge_flops_per_byte"] == hw.peak_flops_bf16 / hw.memory_bandwidth


# ---------------------------------------------------------------- user files and errors

USER_YAML = """\
name: my-gpu
vendor: Example
description: a made-up card
peak_flops_bf16: 100_000_000_000_000
memory_bandwidth: 1_000_000_000_000
memory_bytes: 25769803776
source: https://example.invalid/datasheet
"""


def write(tmp_path, text: str, name: str = "my-gpu.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(arg) -> str:
    with pytest.raises(SpecError) as info:
        load_hardware(str(arg))
    return str(info.value)


def test_user_yaml_file_loads(tmp_path):
    hw = load_hardware(str(write(tmp_path, USER_YAML)))
    assert (hw.name, hw.peak_flops_bf16, hw.memory_bandwidth, hw.memory_bytes) == (
        "my-gpu", 10**14, 10**12, 24 * GiB
    )
    assert roofline(10**14, 10**12, hw).seconds == 1


def test_scientific_notation_without_sign_is_read_as_a_number(tmp_path):
    # PyYAML reads 989.4e12 as a string (YAML 1.1 wants 989.4e+12); it is a whole number, so it is accepted.
    text = USER_YAML.replace("100_000_000_000_000", "989.4e12").replace("1_000_000_000_000", "3.35e+12")
    hw = load_hardware(str(write(tmp_path, text)))
    assert (hw.peak_flops_bf16, hw.memory_bandwidth) == (989_400_000_000_000, 3_350_000_000_000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),  # decimal: 10**9
        ("80 GB", 80 * 10**9),
        ("192GiB", 192 * GiB),  # binary: 2**30
        ("1.5GiB", 3 * 2**29),
        ("512MiB", 512 * 2**20),
        ("2TB", 2 * 10**12),
        ("1_000kB", 10**6),
        ("4096B", 4096),
        ("85899345920", 85_899_345_920),
    ],
)
def test_memory_accepts_sizes_decimal_and_binary(tmp_path, text, expected):
    path = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", f"memory_bytes: {text}"))
    assert load_hardware(str(path)).memory_bytes == expected


def test_bandwidths_accept_rates(tmp_path):
    text = USER_YAML.replace("memory_bandwidth: 1_000_000_000_000", "memory_bandwidth: 3.35TB/s")
    hw = load_hardware(str(write(tmp_path, text + "interconnect_bandwidth: 900 GB/s\n")))
    assert (hw.memory_bandwidth, hw.interconnect_bandwidth) == (3_350_000_000_000, 900_000_000_000)
    text = USER_YAML.replace("memory_bandwidth: 1_000_000_000_000", "memory_bandwidth: 800GiB/s")
    assert load_hardware(str(write(tmp_path, text))).memory_bandwidth == 800 * GiB
    # a review: a size where a rate belongs was read as one ('3.35TB' as 3.35 TB/s); and a unit a count does not take
    # was called a malformed number, not told how to write it
    text = USER_YAML.replace("memory_bandwidth: 1_000_000_000_000", "memory_bandwidth: 3.35TB")
    assert error_of(write(tmp_path, text)).endswith("memory_bandwidth: '3.35TB' is a size, not a rate: write it per "
                                                   "second (3.35TB/s) (line 5)")
    text = USER_YAML.replace("peak_flops_bf16: 100_000_000_000_000", "peak_flops_bf16: 989.4TFLOPS")
    assert "peak_flops_bf16: '989.4TFLOPS' is not a whole number: write its digits (989400000000000, " \
        "989_400_000_000_000) or an exponent (989.4e12); units such as TFLOPS are not read" in error_of(write(tmp_path, text))


def test_interconnect_is_optional(tmp_path):
    assert load_hardware(str(write(tmp_path, USER_YAML))).interconnect_bandwidth is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("80 gigs", "'80 gigs' is not a size in bytes (write a whole number, or a number with a unit: "
                    "80GB = 80 * 10**9, 192GiB = 192 * 2**30)"),
        ("80Gb", "'80Gb' is not a size in bytes"),  # gigabits: a lower-case b is refused
        ("80iB", "'80iB' is not a size in bytes"),
        ("80GB/s", "'80GB/s' is not a size in bytes"),  # a rate is not a capacity
        ("0.5B", "'0.5B' is not a whole number of bytes"),
    ],
)
def test_bad_size_names_file_field_and_rule(tmp_path, text, message):
    path = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", f"memory_bytes: {text}"))
    assert error_of(path).startswith(f"{path}: memory_bytes: {message}")


def test_bad_rate_names_its_field(tmp_path):
    path = write(tmp_path, USER_YAML + "interconnect_bandwidth: fast\n")
    assert error_of(path).startswith(f"{path}: interconnect_bandwidth: 'fast' is not a bandwidth in bytes/s")


def test_flops_take_no_byte_units(tmp_path):
    path = write(tmp_path, USER_YAML.replace("peak_flops_bf16: 100_000_000_000_000", "peak_flops_bf16: 100TB"))
    assert error_of(path).startswith(f"{path}: peak_flops_bf16: ")


def test_size_strings_through_the_cli(tmp_path):
    good = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", "memory_bytes: 24GiB"), "good.yaml")
    assert run("compare", "llama3-8b", "--hardware", str(good), "--format", "json").exit_code == 0
    bad = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", "memory_bytes: 80 gigs"), "my.yaml")
    res = run("compare", "llama3-8b", "--hardware", str(bad), ok=False)
    assert res.exit_code != 0
    assert f"{bad}: memory_bytes: '80 gigs' is not a size in bytes" in res.stderr


def test_unknown_preset_suggests_a_close_name():
    with pytest.raises(LookupFailure) as info:
        load_hardware("h100-80g")
    msg = str(info.value)
    assert "unknown hardware 'h100-80g'" in msg and "did you mean h100-80gb" in msg
    assert "kvcalc hardware" in msg


def test_unknown_key_names_the_field(tmp_path):
    path = write(tmp_path, USER_YAML + "peak_flops_fp8: 4\n")
    assert error_of(path) == f"{path}: peak_flops_fp8: unknown key (check its spelling; unknown keys are errors) (line 8)"


def test_negative_bandwidth_names_field_and_rule(tmp_path):
    path = write(tmp_path, USER_YAML.replace("memory_bandwidth: 1_000_000_000_000", "memory_bandwidth: -5"))
    assert error_of(path) == f"{path}: memory_bandwidth: must be greater than 0, got -5 (line 5)"


def test_fractional_figure_names_field_and_rule(tmp_path):
    path = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", "memory_bytes: '1.5'"))
    assert error_of(path) == f"{path}: memory_bytes: '1.5' is not a whole number (line 6)"


@pytest.mark.parametrize("written, read", [
    ("12345678901234567891.0", 12_345_678_901_234_567_891),  # the float's nearest, 12345678901234567168, was read
    ("25769803776.0", 25_769_803_776), ("2.5769803776e10", 25_769_803_776),
    ("25769803776.0000000001", None),  # a float of 25769803776.0: it was taken as whole
])
def test_a_yaml_float_is_read_as_written(tmp_path, written, read):
    # an exactness review: a YAML float's value loses digits past 15-17 significant ones; the hardware fields that take
    # whole numbers read the digits as written (yamlfile.YamlFloat)
    from kvcalc.hardware import load_hardware

    path = write(tmp_path, USER_YAML.replace("memory_bytes: 25769803776", f"memory_bytes: {written}"))
    if read is None:
        assert error_of(path) == f"{path}: memory_bytes: '{written}' is not a whole number (line 6)"
    else:
        assert load_hardware(str(path)).memory_bytes == read


def test_missing_field_is_named(tmp_path):
    path = write(tmp_path, USER_YAML.replace("source: https://example.invalid/datasheet\n", ""))
    assert error_of(path) == f"{path}: source: required field is missing"


def test_malformed_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "name: [unclosed\nvendor: x\n")
    msg = error_of(path)
    assert msg.startswith(f"{path}: malformed YAML: line ")


def test_empty_and_non_mapping_files_are_explained(tmp_path):
    assert "the file is empty" in error_of(write(tmp_path, "", "empty.yaml"))
    assert "must be a mapping of fields, not list" in error_of(write(tmp_path, "- 1\n", "list.yaml"))


def test_missing_file_and_folder_are_named(tmp_path):
    assert error_of(tmp_path / "nope.yaml") == f"{tmp_path / 'nope.yaml'}: no such file"
    folder = tmp_path / "gpus"
    folder.mkdir()
    assert error_of(f"{folder}/") == f"{folder}/: is a folder, not a hardware spec file"


def test_hardware_is_frozen():
    with pytest.raises(ValidationError):
        TOY.memory_bandwidth = 1


def test_readme_table_shows_every_preset_as_it_loads():
    # the README's table (Hardware presets) against the YAML: one row a preset, and each figure the preset's own;
    # an interconnect is shown exactly where the preset has one (it was blank for h100 and h200, which have 450 GB/s)
    from conftest import ROOT

    text = (ROOT / "README.md").read_text().split("## Hardware presets", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(ALL_HARDWARE)
    scale = {"TFLOP/s": 10**12, "TB/s": 10**12, "GB/s": 10**9, "GiB": GiB}

    def figure(cell: str) -> int:
        number, unit = cell.split(" (")[0].split()
        value = Decimal(number) * scale[unit]
        assert value == int(value), cell
        return int(value)

    for name, (_, _, peak, bandwidth, memory, link) in rows.items():
        hw = load_hardware(name)
        assert (figure(peak), figure(bandwidth), figure(memory)) == (hw.peak_flops_bf16, hw.memory_bandwidth,
                                                                     hw.memory_bytes), name
        assert (figure(link) if link else None) == hw.interconnect_bandwidth, name


def test_a_file_of_another_kind_is_named_in_one_line():
    # a fuzz audit: a hardware preset given as a MODEL listed 13 missing and unknown keys (26 lines for a config.json
    # as --hardware), never saying what the file was
    from conftest import ROOT

    hw, spec = ROOT / "hardware_specs/h100-80gb.yaml", ROOT / "model_specs/llama3-8b.yaml"
    config = ROOT / "tests/data/reference/models/llama-3-8b.json"
    res = run("compare", str(hw), ok=False)
    assert res.exit_code == 1 and res.stderr.strip().splitlines() == [
        f"error: {hw}: a hardware preset (it has peak_flops_bf16, memory_bandwidth, memory_bytes), not a model spec; "
        "give it to --hardware"]
    res = run("cost", "llama3-8b", "--hardware", str(spec), ok=False)
    assert res.stderr.strip().splitlines() == [
        f"error: {spec}: a model spec (it has d_model, layer_groups, n_layers), not a hardware preset; give it as a MODEL"]
    res = run("cost", "llama3-8b", "--hardware", str(config), ok=False)
    assert len(res.stderr.strip().splitlines()) == 1 and "a Hugging Face config.json (it has model_type" in res.stderr


def test_a_direct_mesh_reaches_a_tp_group_over_the_links_to_its_peers():
    # Intel's network docs: an HLS-3 box joins its 8 Gaudi 3s all to all, 21 scale-up ports of 25 GB/s each way, 3 to
    # each of the 7 peers: 75 GB/s a peer. A ring all-reduce of B bytes over tp cards moves 2·(tp − 1)/tp · B through
    # the links to the group's other cards: llama3.1-70b, batch 32, d = 8,192, 80 layers · 2 + 1 all-reduces of
    # 32 · 8,192 · 2 bytes = 84,410,368 bytes a step
    gaudi = load_hardware("gaudi3")
    assert [gaudi.group_bandwidth(tp) for tp in (2, 4, 8)] == [75 * 10**9, 225 * 10**9, 525 * 10**9]
    # 16 cards span two boxes, joined by 3 scale-out ports a card that no preset field describes: no estimate
    assert gaudi.group_bandwidth(16) is None
    assert "comm_seconds_per_token" not in json.loads(run("cost", "llama3.1-70b", "--ctx", "4096", "--tp", "16",
                                                          "--hardware", "gaudi3", "-f", "json").stdout)["summary"]
    assert load_hardware("h100-80gb").group_bandwidth(2) == 450 * 10**9  # NVSwitch: every peer at the whole link
    total = (2 * 80 + 1) * 32 * 8192 * 2
    assert total == 84_410_368
    for tp, bandwidth in ((2, 75 * 10**9), (4, 225 * 10**9), (8, 525 * 10**9)):
        out = json.loads(run("cost", "llama3.1-70b", "--ctx", "4096", "--batch", "32", "--tp", str(tp), "--hardware", "gaudi3",
                             "-f", "json").stdout)["summary"]
        assert out["tp_allreduce_bytes"] == total
        assert out["comm_seconds_per_token"] == float(Fraction(2 * (tp - 1) * total, tp * bandwidth))


def test_vllm_takes_a_preset_for_an_a100_by_its_name_or_description(tmp_path):
    # vLLM's batch defaults test the CUDA device's name ('NVIDIA A100-SXM4-80GB': 2,048 batched tokens and 256
    # sequences where other GPUs of 70 GiB or more get 8,192 and 1,024); a file of one's own for an A100 under another
    # name says so in its description, as the bundled preset does
    from kvcalc.costs.engine_memory import default_prefill_chunk, vllm_a100

    text = ("name: ampere80\nvendor: NVIDIA\ndescription: {}\npeak_flops_bf16: 312e12\nmemory_bandwidth: 2039e9\n"
            "memory_bytes: 80GiB\nsource: https://www.nvidia.com/en-us/data-center/a100/\n")
    (tmp_path / "a.yaml").write_text(text.format("NVIDIA A100-SXM4-80GB"))
    (tmp_path / "h.yaml").write_text(text.format("an 80 GiB Hopper"))
    a100, other = (load_hardware(str(tmp_path / f)) for f in ("a.yaml", "h.yaml"))
    assert vllm_a100(a100) and vllm_a100(load_hardware("a100-80gb")) and not vllm_a100(other)
    assert [default_prefill_chunk("vllm", hw) for hw in (a100, other)] == [2048, 8192]


def test_compute_capability_reads_as_written_and_refuses_other_forms(tmp_path):
    text = ("name: mine\nvendor: NVIDIA\ndescription: a GPU\npeak_flops_bf16: 989.4e12\nmemory_bandwidth: 3.35e12\n"
            "memory_bytes: 80GiB\nsource: https://example.com\ncompute_capability: {}\n")
    for written, cap in (("9.0", (9, 0)), ('"10.0"', (10, 0)), ("12.0", (12, 0))):
        (tmp_path / "h.yaml").write_text(text.format(written))
        assert load_hardware(str(tmp_path / "h.yaml")).capability == cap
    for bad in ("9", '"sm90"', "9.00"):
        (tmp_path / "h.yaml").write_text(text.format(bad))
        with pytest.raises(SpecError) as err:
            load_hardware(str(tmp_path / "h.yaml"))
        assert "compute_capability" in str(err.value), bad
    assert [load_hardware(n).capability for n in ("h100-80gb", "a100-80gb", "mi300x")] == [(9, 0), (8, 0), None]
    # a file without it that describes an A100 (as vLLM's defaults tell one) is an A100 here too, not Hopper
    (tmp_path / "a.yaml").write_text(text.replace("description: a GPU", "description: NVIDIA A100-SXM4-80GB")
                                     .replace("compute_capability: {}\n", ""))
    assert load_hardware(str(tmp_path / "a.yaml")).capability == (8, 0)

"""Capture the exact text kvcalc printed before the #11 speed work, so tests/test_golden_scale.py can assert that every
byte stays the same: every bundled model at 4k, 32k, 128k and 1M, batch 1 and 8, both MLA cache layouts, and the
serving settings (parallel layouts, engines, quantisation scales, MTP, dense attention, encoder context).

Run once, from the root of a checkout of the commit before a change that must keep every byte:
    python tests/data/golden/capture_scale.py
It writes golden_scale.json.gz (gzip of JSON): {command line: stdout text}. Commands that fail on that commit are left
out and listed. Do not regenerate it to make a failing test pass.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CTXS = ("4k", "32k", "128k", "1M")
HW = ("--hardware", "h100-80gb")
# serving settings, each a sweep at 4k and 1M with every column (batch 8, so dp and dp-attention split something).
# 2026-12-02: '--tp 2 --ep 8' became '--tp 2 --dp 4 --ep 8' (ep must divide tp · dp; the new line's output was
# checked equal under the commit before), and the dp-attention lines' weights_bytes_per_gpu were regenerated
# (whole attention weights on every rank); a script checked that no other value changed.
# 2026-12-03: the 17 lines whose tp does not split the model's heads (falcon-7b's 71, gemma3-1b's 4, gpt2's 12,
# qwen2.5-7b's 28 and whisper-large-v3's 20 query heads over tp 8 or 4·2·...) are now refused, as vLLM refuses them,
# and were dropped; a script checked that every other tp and gpus line is unchanged to the byte. The 5 SGLang lines of
# Gemma 3 and Mistral were regenerated (SGLang pages their windowed layers whole): a script checked that only
# engine_kv_bytes, kv_cache_bytes_per_gpu and fits_in_memory changed, to 8 · layers · ceil(ctx / 16) · 16 · per-token bytes.
# The 5 dp-attention lines were regenerated (the input embedding whole under SGLang's DP attention): a script checked
# that only weights_bytes_per_gpu changed, by the embedding's other 3/4 rows (tp 4) in bf16. deepseek-v3.2's SGLang line
# was regenerated (SGLang keeps the indexer key in fp8 with its scale): only the engine figures changed, to
# 8 · 61 · ceil(ctx / 16) · 16 · (1,152 + 132). The 3 '--kv-dtype fp8 --engine vllm' lines of hybrid models were
# regenerated (vLLM keeps states at the model's bf16): a script checked each equals the same line with --state-dtype
# bf16 (Nemotron-H, whose SSM state is fp32 anyway: its state bytes by hand).
# The 15 '--engine vllm' lines of Gemma 3 (1b, 4b, 27b), Gemma 4 and Nemotron-H were regenerated (vLLM's groups pad
# every spec to whole groups and unify page sizes): a script checked that only the engine figures changed, Gemma 3's
# by 8 · padding slots (2, 1, 8) · window pages · 16 · bytes a token, Nemotron-H's states by 60/54, Gemma 4's
# block_size 16 -> 32 and its full layers' pages halved. qwen3-next's '--engine sglang' line was regenerated (SGLang
# keeps the Gated DeltaNet recurrent state in fp32): a script checked the state bytes by hand, the cache and decode
# bytes by their difference, and the roofline figures by the ratio of bytes read.
# 2026-12-03 (later): the 6 '--engine' lines of gpt2 and whisper-large-v3 were regenerated (vLLM and SGLang pad the
# vocabulary to a multiple of 64): a script checked that only weights_bytes_per_gpu changed, by 47 · 768 · 2 (gpt2,
# 50,257 -> 50,304 rows) and 38 · 1,280 · 2 (whisper, 51,866 -> 51,904), each model's one tied table in bf16.
SERVING = (
    ("--tp", "8"), ("--tp", "4", "--pp", "3", "--dp", "2"), ("--tp", "2", "--dp", "4", "--ep", "8"), ("--engine", "vllm"),
    ("--engine", "sglang", "--block-size", "16"), ("--kv-dtype", "int4", "--kv-quant", "g64"),
    ("--kv-dtype", "fp8", "--kv-quant", "per-head"), ("--kv-dtype", "fp8", "--engine", "vllm"), ("--mtp",),
    ("--dense-attn", "--gen", "100"), ("--state-dtype", "fp32", "--weights-dtype", "int4", "--kv-dtype", "fp8"),
)
MLA_SERVING = (("--tp", "4", "--dp", "2", "--dp-attention"), ("--mla-schedule", "naive"))


def command_lines(models: list[str], mla: set[str], encdec: set[str]) -> list[list[str]]:
    """Every command line the file covers."""
    out = []
    for m in models:
        for layout in ("latent", "expanded") if m in mla else ("latent",):
            for batch in ("1", "8"):
                at = ["--mla-cache", layout, "--batch", batch]
                out.append(["sweep", m, "--ctx", ",".join(CTXS), *at, "--columns", "all", *HW, "-f", "json"])
                for ctx in CTXS:
                    out.append(["cost", m, "--ctx", ctx, *at, "-f", "json"])
                    out.append(["show", m, "--ctx", ctx, *at, "-f", "json"])
        serving = SERVING + (MLA_SERVING if m in mla else ()) + ((("--enc-ctx", "100"),) if m in encdec else ())
        for extra in serving:
            out.append(["sweep", m, "--ctx", "4k,1M", "--batch", "8", *extra, "--columns", "all", *HW, "-f", "json"])
        out.append(["cost", m, "--ctx", "32k", "--mtp", "--dense-attn", "--gen", "100", "--batch", "8", *HW, "-f", "json"])
        out.append(["show", m, "--ctx", "1M", "--engine", "vllm", "--batch", "8", "-f", "json"])
        out.append(["show", m, "--ctx", "32k", "--kv-dtype", "int4", "--kv-quant", "g64", "-f", "json"])
        out.append(["show", m, "--ctx", "1M", "--per-layer", "--explain", "-f", "json"])
        out.append(["fit", m, *HW, "--ctx", "4k,1M", "--gpus", "8", "-f", "json"])
        out.append(["fit", m, *HW, "--batch", "8", "--tp", "8", "-f", "json"])
        out.append(["sweep", m, "--ctx", "1k..1M", "--points", "7", "-f", "csv"])
        out.append(["sweep", m, "--ctx", "1k..1M", "--points", "5"])
    out.append(["compare", *models, "--ctx", ",".join(CTXS), "-f", "json"])
    out.append(["compare", *models, "--ctx", ",".join(CTXS), "--columns", "all", *HW, "-f", "csv"])
    out.append(["compare", *models, "--ctx", "128k"])
    out.append(["compare", *models, "--ctx", "1M", "--columns", "cost"])
    out.append(["compare", *models, "--ctx", "32k", "--columns", "kv", "-f", "markdown"])
    out.append(["list", "-f", "json"])
    out.append(["table", "models", *models, "--ctx", "1M", "-f", "json"])
    return out


def main() -> None:
    sys.path.insert(0, str(HERE.parents[2]))
    from typer.testing import CliRunner

    from kvcalc.cli import app
    from kvcalc.registry import bundled_names, load_model

    models = bundled_names()
    specs = {m: load_model(m).spec for m in models}
    mla = {m for m, s in specs.items() if s.has_layouts()}
    encdec = {m for m, s in specs.items() if s.encoder is not None}
    runner = CliRunner()
    golden, failed = {}, []
    for args in command_lines(models, mla, encdec):
        res = runner.invoke(app, args, env={"COLUMNS": "240", "TERM": "dumb", "NO_COLOR": "1"})
        if res.exit_code != 0:
            failed.append(f"{' '.join(args)}: {res.stderr.strip()[:200]}")
            continue
        golden[" ".join(args)] = res.stdout
    with gzip.GzipFile(HERE / "golden_scale.json.gz", "wb", mtime=0) as f:
        f.write((json.dumps(golden, indent=0) + "\n").encode())
    print(f"{len(golden)} outputs; {len(failed)} commands failed and are left out:")
    print("\n".join(failed))


if __name__ == "__main__":
    main()

"""The README's prose quotes figures of fit under the engines' rules; each here is recomputed from the command the
README describes and looked up in the README, so a change of rule that moves one cannot leave the text behind (a
README review found seven stale after the engines' rules changed)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run

README = (ROOT / "README.md").read_text()


def _fit(*args: str) -> dict:
    return json.loads(run("fit", *args, "-f", "json").stdout)[0]


def _in_readme(text: str) -> bool:
    """Whether the README says `text`, its line breaks and indents read as spaces."""
    return text in " ".join(README.split())


@pytest.mark.parametrize(("args", "key", "phrase"), [
    (("gpt-oss-20b", "--hardware", "h100-80gb", "--batch", "16", "--engine", "sglang"), "max_ctx",
     "gpt-oss-20b on an H100 at batch 16 fits {:,} tokens"),
    (("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--gpus", "4", "--batch", "32", "--engine", "sglang"), "max_ctx",
     "Qwen3-Next at tp 4 on H100s and batch 32 fits {:,} tokens"),
    (("qwen3-next-80b-a3b", "--hardware", "h100-80gb", "--tp", "4", "--ctx", "1k", "--engine", "sglang"), "max_batch",
     "{} for Qwen3-Next above"),
    (("deepseek-v3", "--hardware", "h200-141gb", "--gpus", "8", "--weights-dtype", "fp8", "--kv-dtype", "fp8", "--mtp",
      "--engine", "vllm", "--ctx", "9600"), "max_batch", "not 150, so {} sequences fit"),
    (("llama3.1-8b", "--hardware", "rtx-4090", "--engine", "vllm", "--batch", "1"), "max_ctx",
     "Llama 3.1 8B on an RTX 4090: 1,007 blocks, 1,006 for the sequence, {:,} tokens"),
])
def test_the_readme_quotes_fit_as_it_answers(args, key, phrase):
    assert _in_readme(phrase.format(_fit(*args)[key]))


def test_the_readme_quotes_dp_attention_as_it_answers():
    row = _fit("deepseek-v3", "--hardware", "h200-141gb", "--gpus", "8", "--weights-dtype", "fp8", "--engine", "sglang",
               "--dp-attention", "--ctx", "1024")
    assert _in_readme(f"at 1,024 tokens fits {row['max_batch'] // 8:,} a worker, {row['max_batch']:,} in all")


def test_a_title_names_mlas_decode_schedule_only_beside_a_figure_that_follows_it():
    # a help-text review: under --tp the GPUs and per-GPU cache columns counted as cost figures, so a cache table's
    # title said 'MLA absorbed decode' (the README: named "where decode figures are shown")
    def title(*args: str) -> str:
        return run(*args).stdout.splitlines()[0]

    assert "decode" not in title("compare", "deepseek-v2", "--ctx", "4k", "--tp", "2")
    assert "decode" not in title("sweep", "deepseek-v2", "--ctx", "4k,8k", "--columns", "kv", "--tp", "2")
    assert "decode" not in title("compare", "deepseek-v2", "--ctx", "4k", "--columns", "mla")  # naive and absorbed, named
    assert title("compare", "deepseek-v2", "--ctx", "4k", "--columns", "cost").endswith("MLA latent cache, absorbed decode")
    assert "naive decode" in title("compare", "deepseek-v2", "--ctx", "4k", "--columns", "tokens_per_second",
                                   "--hardware", "h100-80gb", "--mla-schedule", "naive")

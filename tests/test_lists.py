"""kvcalc.lists: the first value a user's list names twice, the one check every list option and argument list asks."""

from __future__ import annotations

from conftest import run
from kvcalc.lists import first_repeat


def test_first_repeat_finds_the_first_value_named_again_falsy_ones_too():
    assert first_repeat([4096, 8192, 4096, 8192]) == 4096
    assert first_repeat(["b", "a", "a", "b"]) == "a"  # the first to repeat, not the first repeated
    assert first_repeat([0, 1, 0]) == 0 and first_repeat(["", ""]) == ""  # a falsy repeat is still one
    assert first_repeat([]) is None and first_repeat(range(20_000)) is None


def test_every_list_refuses_a_repeat_through_it():
    # contexts, sweep values, table dims' kinds, plot's models and metrics, paper's and table dims' models
    for args, said in [(["compare", "gpt2", "--ctx", "1k,2k,1024"], "1,024 tokens given twice"),
                       (["sweep", "gpt2", "--batch", "1,2,1"], "'1,2,1': 1 given twice"),
                       (["table", "dims", "--kinds", "mha,gqa,mha"], "mha given twice"),
                       (["table", "dims", "gpt2", "gpt2"], "two models are named 'gpt2'")]:
        res = run(*args, ok=False)
        assert res.exit_code in (1, 2) and said in res.stderr, (args, res)

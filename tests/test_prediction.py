"""`kolong.training.prediction`: the predict commands' batches and the order of their files."""

from __future__ import annotations

from kolong.training.prediction import by_length, in_order, token_lengths


def test_batches_go_longest_first_and_results_keep_the_input_order():
    items = ["c", "a", "e", "b", "d", "c2"]
    batches = list(by_length(items, [3, 1, 5, 2, 4, 3], 2))
    assert batches == [["e", "d"], ["c", "c2"], ["b", "a"]]  # ties keep the input's order
    assert list(in_order(["x", "y", "z"], {"z": 3, "y": 2, "x": 1})) == ["x", "y", "z"]
    assert list(by_length([], [], 4)) == []


def test_token_lengths_count_pairs_and_truncation(tmp_path):
    from transformers import AutoTokenizer

    from kolong.data.builtin_checkpoints import build_tiny_bert_checkpoint

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_bert_checkpoint(tmp_path / "tiny"))
    texts = ["가 나 다", "가"]
    single = token_lengths(tokenizer, texts, None, 64)
    assert single == [len(tokenizer(t)["input_ids"]) for t in texts] and single[0] > single[1]
    assert token_lengths(tokenizer, texts, ["나", "다 라"], 64) == [len(tokenizer(t, p)["input_ids"]) for t, p in
                                                                  zip(texts, ["나", "다 라"], strict=True)]  # fmt: skip
    assert (
        token_lengths(tokenizer, texts, [None, "다"], 64) == single
    )  # not every text has a pair: texts alone
    assert token_lengths(tokenizer, texts, None, 3) == [4, 3]  # counted to max_length + 1: 4 means cut


def test_progress_is_a_bar_on_a_terminal_and_a_line_a_tenth_otherwise(monkeypatch, capsys):
    import sys

    from kolong.training.prediction import progress

    for _ in by_length(list(range(100)), [1] * 100, 8):
        pass
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 10 and lines[-1].startswith("predicting: 100/100 items (100%")  # stderr is captured
    for _ in by_length(list(range(10)), [1] * 10, 8):  # a batch or two: nothing to show
        pass
    assert capsys.readouterr().err == ""

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress(100, "window") as advance:
        for _ in range(13):
            advance(8)  # the last batch counted whole stops at the total
    shown = capsys.readouterr().err
    assert "100/100" in shown and "104" not in shown and "window" in shown

"""`kolong.training.prediction`: the predict commands' batches and the order of their files."""

from __future__ import annotations

import re

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


def test_progress_is_a_bar_on_a_terminal_and_lines_from_the_first_item_otherwise(monkeypatch, capsys):
    """Redirected: a line when the loop starts, one each tenth of the way and one at least every 30 s, so even a
    loop of a few slow batches shows it is working."""
    import sys

    from kolong.training import prediction
    from kolong.training.prediction import progress

    for _ in by_length(list(range(100)), [1] * 100, 8):
        pass
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("predicting: 0/100 items (0%")  # from the first item
    assert len(lines) == 11 and lines[-1].startswith("predicting: 100/100 items (100%")  # stderr is captured
    for _ in by_length(list(range(10)), [1] * 10, 8):  # two batches: a start and an end
        pass
    assert [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()] == [
        "predicting: 0/10 items", "predicting: 8/10 items", "predicting: 10/10 items"]  # fmt: skip

    clock = iter([0.0, 0.0, 31.0, 31.0, 40.0, 75.0, 75.0])  # a slow loop: the second batch comes 9 s later
    monkeypatch.setattr(prediction.time, "perf_counter", lambda: next(clock))
    with progress(400, "window") as advance:
        for _ in range(3):
            advance(1)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["predicting: 0/400 windows", "predicting: 1/400 windows",
                                                      "predicting: 3/400 windows"]  # fmt: skip

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress(100, "window") as advance:
        for _ in range(13):
            advance(8)  # the last batch counted whole stops at the total
    shown = capsys.readouterr().err
    counts = re.findall(r"(\d+)/100 ", shown)  # the bar's "n/total", not its rate (which may read 1045961)
    assert counts[-1] == "100" and "104" not in counts and "window" in shown


def test_progress_lines_count_in_english_and_give_slow_loops_seconds_per_item(capsys, monkeypatch):
    from kolong.training import prediction
    from kolong.training.prediction import pace, plural, progress

    assert [plural(1, "step"), plural(2, "step"), plural(0, "branch"), plural(1, "branch")] == [
        "step", "steps", "branches", "branch"]  # fmt: skip
    assert [plural(120, "query"), plural(2, "day"), plural(40, "article")] == ["queries", "days", "articles"]
    assert pace(0, 5.0, "step") == "" and pace(10, 2.0, "step") == "5.0 steps/s, "
    assert pace(2, 34.0, "step") == "17.0 s/step, "  # not "0.1 steps/s"
    clock = iter([0.0, 0.0, 17.0, 17.0])
    monkeypatch.setattr(prediction.time, "perf_counter", lambda: next(clock))
    with progress(1, "step", "training") as advance:
        advance(1)
    assert capsys.readouterr().err.splitlines() == [
        "training: 0/1 step (0%, 0 s)", "training: 1/1 step (100%, 17.0 s/step, 17 s)"]  # fmt: skip


def test_training_steps_are_reported_from_the_first_where_output_is_redirected(capsys):
    """Where the Trainer shows no bar (stderr a file or a pipe): a line at the start, each tenth, and at the end;
    a resumed run counts from its checkpoint's step."""
    from types import SimpleNamespace

    from kolong.training.common import step_lines

    for resumed in (0, 10):
        callback = step_lines()
        state, args = (
            SimpleNamespace(max_steps=20, global_step=resumed),
            SimpleNamespace(local_process_index=0),
        )
        callback.on_train_begin(args, state, None)
        for _ in range(20 - resumed):
            callback.on_step_end(args, state, None)
        callback.on_train_end(args, state, None)
        lines = [line.split(" (")[0] for line in capsys.readouterr().err.splitlines()]
        assert lines[0] == "training: 0/20 steps" and lines[-1] == "training: 20/20 steps"
        assert (lines[1] == "training: 10/20 steps") if resumed else (len(lines) == 11)

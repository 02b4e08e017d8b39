"""Experiment stages and the call's deadline (`--max-minutes`): stop at a checkpoint, resume on the rerun."""

from __future__ import annotations

import re
import time
from types import SimpleNamespace

import pytest

from kolong.lab.experiments.stages import Deadline, StoppedByDeadline, fresh_start, run_stage


def _step(callback, step: int, max_steps: int = 10):
    control = SimpleNamespace(should_save=False, should_training_stop=False)
    callback.on_step_end(None, SimpleNamespace(global_step=step, max_steps=max_steps), control)
    return control


def test_no_limit_adds_no_callback_and_never_stops():
    deadline = Deadline(0)
    assert deadline.callbacks() == [] and not deadline.stopped
    deadline.check("anything")  # no exception


def test_one_limit_is_shared_by_every_run_of_the_call():
    deadline = Deadline(0.5 / 60)  # half a second for the whole call
    (first,) = deadline.callbacks()
    assert not _step(first, 1).should_training_stop  # within the limit: train on
    time.sleep(0.6)
    control = _step(first, 2)
    assert control.should_save and control.should_training_stop  # a checkpoint, then stop
    with pytest.raises(
        StoppedByDeadline, match="during pre-training: run the same command to resume"
    ) as caught:
        deadline.check("pre-training")
    assert caught.value.stage == "pre-training"
    # a later run of the same call gets no time of its own: it trains one step, saves and stops
    later = Deadline(0.5 / 60)
    time.sleep(0.6)
    (second,) = later.callbacks()
    assert _step(second, 1).should_training_stop and later.stopped


def test_the_last_step_is_never_cut():
    deadline = Deadline(1e-9)
    (budget,) = deadline.callbacks()
    time.sleep(0.01)
    assert not _step(budget, 10, max_steps=10).should_training_stop  # the run ends anyway: nothing to resume
    assert not deadline.stopped


def test_fresh_start_unless_a_checkpoint_waits(tmp_path):
    assert fresh_start(tmp_path / "missing") and fresh_start(tmp_path)
    (tmp_path / "runs").mkdir()  # logs of a run killed before its first checkpoint: start again
    assert fresh_start(tmp_path)
    (tmp_path / "checkpoint-3").mkdir()
    assert not fresh_start(tmp_path)


def test_unfinished_stages_are_not_stored(tmp_path):
    assert run_stage(tmp_path / "a.json", lambda: {"finished": False, "steps": 1}) == {
        "finished": False,
        "steps": 1,
    }
    assert not (tmp_path / "a.json").exists()
    assert run_stage(tmp_path / "a.json", lambda: {"value": 2}) == {"value": 2}
    assert run_stage(tmp_path / "a.json", lambda: {"value": 3}) == {"value": 2}  # read back, not made again


def _work_dir(path, blocks: str, losses: dict, folders=()):
    import numpy as np

    path.mkdir(parents=True)
    np.savez_compressed(path / "losses.npz", blocks=np.array(blocks), **losses)
    for folder in folders:
        (path / folder).mkdir()
        (path / folder / "from").write_text(path.name)
    return path


def test_side_by_side_extension_runs_merge_into_one_study(tmp_path):
    import numpy as np

    from kolong.lab.experiments.extension_init import merge_work_dirs

    base, copy, control = np.ones((3, 4)), np.full((3, 4), 2.0), np.full((3, 4), 3.0)
    base[:, 1] = np.nan  # a token that was not masked has no loss, as in the study's arrays
    one = _work_dir(tmp_path / "copy", "abc", {"512-chunks": base, "copy@2000": copy},
                    ("extended-copy", "continued-copy", "corpus-1024", "runs"))  # fmt: skip
    two = _work_dir(tmp_path / "control", "abc", {"512-chunks": base, "512-continued@2000": control},
                    ("continued-512", "corpus-1024", "corpus-512"))  # fmt: skip
    target = tmp_path / "all"
    assert merge_work_dirs(target, [one, two]) == ["512-chunks", "512-continued@2000", "copy@2000"]
    merged = dict(np.load(target / "losses.npz"))
    assert str(merged.pop("blocks")) == "abc"
    np.testing.assert_array_equal(merged["copy@2000"], copy)
    np.testing.assert_array_equal(merged["512-continued@2000"], control)
    linked = {entry.name: (entry / "from").read_text() for entry in target.iterdir() if entry.is_symlink()}
    assert linked == {"extended-copy": "copy", "continued-copy": "copy", "corpus-1024": "copy",
                      "continued-512": "control", "corpus-512": "control"}  # fmt: skip
    # merging again (the target's own losses included) changes nothing
    assert merge_work_dirs(target, [one, two]) == ["512-chunks", "512-continued@2000", "copy@2000"]

    other_masks = _work_dir(tmp_path / "seed-43", "xyz", {"copy@2000": copy})
    with pytest.raises(ValueError, match=r"--merge-from .*seed-43: it scored other held-out blocks or masks"):
        merge_work_dirs(tmp_path / "bad", [one, other_masks])
    clash = _work_dir(tmp_path / "clash", "abc", {"512-chunks": base + 1})
    with pytest.raises(ValueError, match="its 512-chunks losses differ"):
        merge_work_dirs(tmp_path / "bad", [one, clash])
    with pytest.raises(ValueError, match=r"no losses\.npz there"):
        merge_work_dirs(tmp_path / "bad", [one, tmp_path / "copy" / "runs"])
    assert not (tmp_path / "bad").exists()  # refused before anything is written


def test_scale_settings_check_each_override_against_the_scales_types():
    from kolong.lab.experiments.scales import scale_settings

    scales = {"tiny": {"steps": 4, "rate": 1e-3, "limit": 20, "name": "a", "flag": False},
              "full": {"steps": 400, "rate": 5e-4, "limit": None, "name": "b", "flag": True}}  # fmt: skip
    assert scale_settings(scales, "tiny", {"steps": 8, "rate": 1, "limit": None, "flag": True})["rate"] == 1
    for overrides, named in [({"steps": "abc"}, "steps='abc': expected a whole number"),
                             ({"steps": 2.0}, "expected a whole number"), ({"steps": True}, "expected a whole"),
                             ({"rate": "fast"}, "expected a finite number"), ({"name": 3}, "expected text"),
                             ({"rate": float("nan")}, "rate=nan: expected a finite number"),
                             ({"rate": float("inf")}, "expected a finite number"),
                             ({"flag": 1}, "expected true or false"), ({"steps": None}, "steps=None"),
                             ({"limit": [1]}, "expected a whole number (or null)"), ({"nope": 1}, "'nope'")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(named)):
            scale_settings(scales, "tiny", overrides)
    with pytest.raises(ValueError, match="scale 'huge'"):
        scale_settings(scales, "huge", {})

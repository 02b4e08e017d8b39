"""The one choice of attention path: what each scheme declares, the plan for each case, every path in the table
against the eager reference, the run-time options, and asking a model which plans it runs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import FLEX_HERE, random_ids, tiny_kolong_config
from kolong.attention.dispatch import ATTENTION_FUNCTIONS, AttentionCall, Contribution, plan_attention
from kolong.attention.masks import AttentionMask
from kolong.attention.options import AttentionOptions
from kolong.errors import ConfigError
from kolong.models import KolongModel

DECLARED = {
    "learned": Contribution("none"),
    "sinusoidal": Contribution("none"),
    "memn2n": Contribution("none"),
    "none": Contribution("none"),
    "rope": Contribution("rotation"),
    "alibi": Contribution("distance"),
    "t5": Contribution("distance", trained=True),
    "shaw": Contribution("query", trained=True, reach=16),  # max_distance
}


@pytest.mark.parametrize("scheme", list(DECLARED))
def test_every_scheme_declares_what_it_hands_to_attention(scheme):
    model = KolongModel(tiny_kolong_config(position_encoding=scheme))
    assert model.positions.contribution == DECLARED[scheme]
    value = KolongModel(tiny_kolong_config(position_encoding="shaw", position_kwargs={"value": True}))
    assert value.positions.contribution == Contribution("query", value_term=True, trained=True, reach=16)
    with pytest.raises(ValueError, match="one of none, rotation, distance, query"):
        Contribution("relative")


def _q(grad: bool, length: int = 8) -> torch.Tensor:
    return torch.zeros(2, 2, length, 4, requires_grad=grad)


PADDING = AttentionMask.from_attention_mask(torch.tensor([[1] * 8, [1] * 6 + [0] * 2]))
PADDING_INSIDE = AttentionMask.from_attention_mask(torch.tensor([[1] * 8, [0] + [1] * 7]))
DOCUMENTS = AttentionMask.from_attention_mask(torch.tensor([[1] * 4 + [2] * 4, [1] * 8]))
WINDOW = AttentionMask.from_attention_mask(torch.ones(2, 8, dtype=torch.long), window=2)


@pytest.mark.parametrize(
    ("contribution", "mask", "dropout", "grad", "expected"),
    [
        (Contribution("none"), PADDING, 0.0, True, "sdpa"),
        (Contribution("rotation"), DOCUMENTS, 0.0, False, "sdpa"),
        (Contribution("none"), PADDING, 0.1, True, "eager"),  # no fused CPU kernel with dropout
        (Contribution("none"), WINDOW, 0.0, True, "banded"),
        (Contribution("none"), WINDOW, 0.1, True, "chunked"),
        (Contribution("distance"), PADDING, 0.0, True, "sdpa-distance-view"),  # ALiBi trains through the view
        (Contribution("distance", trained=True), PADDING, 0.0, False, "sdpa-distance-view"),  # inference: no gradient
        (Contribution("distance", trained=True), PADDING, 0.0, True, "chunked"),  # T5's table has a gradient
        (Contribution("distance"), PADDING_INSIDE, 0.0, False, "chunked"),
        (Contribution("distance"), DOCUMENTS, 0.0, True, "chunked"),
        (Contribution("distance"), WINDOW, 0.0, False, "banded"),
        (Contribution("query", trained=True), PADDING, 0.0, False, "chunked"),
        (Contribution("query", trained=True), PADDING, 0.0, True, "chunked"),
        (Contribution("query", trained=True), WINDOW, 0.0, False, "chunked"),
        (Contribution("query", value_term=True, trained=True), PADDING, 0.0, False, "chunked"),
    ],
)  # fmt: skip
def test_the_plan_on_cpu(contribution, mask, dropout, grad, expected):
    with torch.set_grad_enabled(grad):
        plan = plan_attention("sdpa", _q(grad), contribution, mask, dropout, AttentionOptions())
    assert plan.kernel == expected and plan.why and str(plan) == expected


LONG_PADDING = AttentionMask.from_attention_mask(torch.tensor([[1] * 80, [1] * 60 + [0] * 20]))
LONG_DOCUMENTS = AttentionMask.from_attention_mask(torch.tensor([[1] * 40 + [2] * 40, [1] * 80]))


@pytest.mark.parametrize(
    ("contribution", "mask", "dropout", "grad", "options", "expected"),
    [
        (Contribution("query", trained=True, reach=4), LONG_PADDING, 0.0, True, {}, "sdpa-regions"),
        (Contribution("query", trained=True, reach=4), LONG_PADDING, 0.0, False, {}, "sdpa-regions"),
        (Contribution("query", value_term=True, trained=True, reach=4), LONG_PADDING, 0.0, False, {}, "sdpa-regions"),
        (Contribution("distance", trained=True), LONG_PADDING, 0.0, True, {}, "chunked"),
        (Contribution("distance", trained=True), LONG_PADDING, 0.0, False, {}, "sdpa-distance-view"),
        (Contribution("query", trained=True, reach=6), LONG_PADDING, 0.0, True, {}, "chunked"),  # strips too wide
        (Contribution("query", trained=True, reach=4), LONG_PADDING, 0.1, True, {}, "chunked"),
        (Contribution("query", trained=True, reach=4), LONG_DOCUMENTS, 0.0, True, {}, "chunked"),
        (Contribution("query", trained=True, reach=4), LONG_PADDING, 0.0, True, {"skip_paths": ("sdpa-regions",)}, "chunked"),
    ],
)  # fmt: skip
def test_the_regions_on_cpu_where_the_rows_hold_their_strips(
    monkeypatch, contribution, mask, dropout, grad, options, expected
):
    # 80 tokens hold eight strips of 4 + 2 x 4 - 2 keys, and five of 4 + 2 x 6 - 2: too few
    options = {"regions_strips": 6, "regions_block_rows": 4, **options}
    with torch.set_grad_enabled(grad):
        plan = plan_attention("sdpa", _q(grad, 80), contribution, mask, dropout, AttentionOptions(**options))
    assert plan.kernel == expected


@pytest.mark.parametrize(
    ("mask", "dropout", "grad", "dtype", "options", "expected"),
    [
        (LONG_PADDING, 0.0, True, torch.float32, {}, "chunked"),
        (AttentionMask(), 0.0, True, torch.float64, {}, "chunked"),
        (LONG_PADDING, 0.0, False, torch.float32, {}, "sdpa-distance-view"),  # inference: no gradient into the bias
        (LONG_PADDING, 0.1, False, torch.float32, {}, "chunked"),
    ],
)  # fmt: skip
def test_a_trained_bias_by_distance_trains_through_the_chunked_path(
    mask, dropout, grad, dtype, options, expected
):
    contribution = Contribution("distance", trained=True)
    q = torch.zeros(2, 2, 80, 4, dtype=dtype, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        plan = plan_attention("sdpa", q, contribution, mask, dropout, AttentionOptions(**options))
    assert plan.kernel == expected
    # unmasked, without dropout: the chunked forward in one fused call, said in the plan and its label
    assert plan.one_call == (expected == "chunked" and mask.empty and not dropout)
    assert plan.label == ("chunked one call" if plan.one_call else expected)


@pytest.mark.parametrize("layers", [1, 3])
def test_padding_ends_are_read_from_the_device_once_per_forward_whatever_the_depth(monkeypatch, layers):
    """ALiBi in training reads each row's length off the mask before planning and again in its kernel (the view):
    from the mask, one host read (a wait for the queued work on a GPU) for every layer."""
    config = tiny_kolong_config(
        position_encoding="alibi", num_hidden_layers=layers, attention_probs_dropout_prob=0.0
    )
    model = KolongModel(config).train()
    ids, attention_mask = random_ids(2, 24), torch.ones(2, 24, dtype=torch.long)
    attention_mask[0, 17:] = 0
    reads, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(self.shape) or tolist(self))
    assert {plan.kernel for plan in model.attention_plans(ids, attention_mask)} == {"sdpa-distance-view"}
    reads.clear()
    model(ids, attention_mask=attention_mask)
    assert len(reads) == 2  # the mask's layout, then the rows' ends

    mask = AttentionMask.from_attention_mask(attention_mask)
    inside = AttentionMask.from_attention_mask(attention_mask.flip(1))  # padding first
    reads.clear()
    assert mask.padding_ends() == mask.padding_ends() == [17, 24]
    assert inside.padding_ends() is None and inside.padding_ends() is None
    assert len(reads) == 2


@pytest.mark.parametrize(
    ("contribution", "mask", "dropout", "options", "expected"),
    [
        (Contribution("none"), PADDING, 0.1, {}, "sdpa"),
        (Contribution("none"), DOCUMENTS, 0.0, {}, "flex"),  # the block mask skips the blocks between documents
        (Contribution("none"), DOCUMENTS, 0.1, {}, "sdpa"),
        (Contribution("query", trained=True), PADDING, 0.1, {}, "flex"),
        (Contribution("query", trained=True), PADDING, 0.1, {"flex_dropout": False}, "chunked"),
        (Contribution("query", value_term=True, trained=True), PADDING, 0.0, {}, "chunked"),
        (Contribution("none"), WINDOW, 0.0, {}, "flex"),
    ],
)  # fmt: skip
def test_the_plan_where_flex_attention_trains(monkeypatch, contribution, mask, dropout, options, expected):
    as_on_cuda = AttentionOptions(**options, flex_devices=FLEX_HERE)
    plan = plan_attention("sdpa", _q(True), contribution, mask, dropout, as_on_cuda)
    assert plan.kernel == expected


def test_the_implementation_asked_for_comes_first():
    query = Contribution("query", trained=True)
    assert plan_attention("eager", _q(True), query, PADDING, 0.1, AttentionOptions()).kernel == "eager"
    assert (
        plan_attention("flex_attention", _q(False), query, PADDING, 0.0, AttentionOptions()).kernel == "flex"
    )
    value = Contribution("query", value_term=True, trained=True)
    assert (
        plan_attention("flex_attention", _q(False), value, PADDING, 0.0, AttentionOptions()).kernel
        == "chunked"
    )


SCHEME_OF_KERNEL = {
    "sdpa": ("learned", {}, PADDING, False),
    "sdpa-distance-view": ("t5", {}, PADDING, False),
    "banded": ("alibi", {}, WINDOW, False),
    "chunked": ("shaw", {"value": True}, DOCUMENTS, True),
    "sdpa-regions": ("shaw", {"value": True, "max_distance": 2}, PADDING, True),
}


@pytest.mark.parametrize("kernel", list(SCHEME_OF_KERNEL))
def test_every_path_in_the_table_is_the_eager_reference(kernel):
    """Each function of ATTENTION_FUNCTIONS, called with its one signature, against `eager` on the same call
    (outputs; gradients of q, k, v and the scheme's parameters where the path trains)."""
    scheme, kwargs, mask, trains = SCHEME_OF_KERNEL[kernel]
    torch.manual_seed(0)
    model = KolongModel(tiny_kolong_config(position_encoding=scheme, position_kwargs=kwargs))
    positions = model.positions
    q, k, v = (torch.randn(2, 2, 8, 16, dtype=torch.float64, requires_grad=trains) for _ in range(3))
    positions.double()
    call = AttentionCall(mask, 0.0, AttentionOptions(), positions, positions.prepare(8, q.device, q.dtype))
    results = []
    for name in (kernel.split(" ")[0], "eager"):
        with torch.set_grad_enabled(trains):
            context, _ = ATTENTION_FUNCTIONS[name](q, k, v, call, 0)
        if mask.real is not None or mask.documents is not None:  # padded queries' outputs are never read
            real = mask.real if mask.real is not None else mask.documents != 0
            context = context * real[:, None, :, None]
        grads = ()
        if trains:
            parameters = [q, k, v, *positions.parameters()]
            grads = torch.autograd.grad(context.square().sum(), parameters)
        results.append((context.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0])
    for ours, reference in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(ours, reference)


def test_options_are_parsed_by_name_and_bad_ones_refused():
    options = AttentionOptions.parse(
        ["flex_dropout=false", "skip_paths=banded+sdpa-regions", 'flex_kernel_options={"BLOCK_M": 64}']
    )
    assert options == AttentionOptions(
        flex_dropout=False, skip_paths=("banded", "sdpa-regions"), flex_kernel_options={"BLOCK_M": 64}
    )
    assert options.changed() == {
        "flex_dropout": False,
        "skip_paths": ("banded", "sdpa-regions"),
        "flex_kernel_options": {"BLOCK_M": 64},
    }
    with pytest.raises(
        ConfigError, match="--attention-option 'fast=yes': expected NAME=VALUE with NAME one of"
    ):
        AttentionOptions.parse(["fast=yes"])
    with pytest.raises(ConfigError, match="compiled_kernels: expected true or false, got 'maybe'"):
        AttentionOptions.parse(["compiled_kernels=maybe"])
    for path in ("chunked", "fast"):
        with pytest.raises(ConfigError, match=f"skip_paths: '{path}' is not a path the plan may pass over"):
            AttentionOptions.parse([f"skip_paths=banded+{path}"])


def test_a_model_says_which_plan_each_layer_runs_and_options_are_never_saved(tmp_path):
    """`attention_plans`: local layers and full ones (ModernBERT's alternation), in training and at inference;
    `set_attention_options` changes the plan at run time and is not written into the checkpoint."""
    config = tiny_kolong_config(position_encoding="alibi", attention_pattern="local", attention_window=4,
                                full_attention_every=2, num_hidden_layers=3, attention_probs_dropout_prob=0.0)  # fmt: skip
    model = KolongModel(config).eval()
    ids = random_ids(2, 24)
    with torch.no_grad():
        plans = model.attention_plans(ids)
        assert [plan.kernel for plan in plans] == ["sdpa-distance-view", "banded", "sdpa-distance-view"]
        model.set_attention_options(skip_paths=("banded",))
        assert [plan.kernel for plan in model.attention_plans(ids)][1] == "chunked"
    model.save_pretrained(tmp_path)
    assert "skip_paths" not in (tmp_path / "config.json").read_text()
    reloaded = KolongModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert reloaded.attention_plans(ids)[1].kernel == "banded"
        torch.testing.assert_close(model(ids).last_hidden_state, reloaded(ids).last_hidden_state)


def test_the_pretraining_help_names_every_run_time_option():
    from typer.testing import CliRunner

    from kolong.cli import app

    shown = CliRunner().invoke(app, ["pretrain", "mlm", "--help"], terminal_width=200).output
    words = "".join(shown.split())  # rich wraps the help anywhere
    assert all(spec.name in words for spec in dataclasses.fields(AttentionOptions))


def test_the_plan_table_is_read_in_order_and_every_kernel_is_in_the_table_of_paths():
    from kolong.attention.dispatch import PLAN_TABLE

    assert {row.kernel for row in PLAN_TABLE} <= set(ATTENTION_FUNCTIONS)
    assert PLAN_TABLE[-1].condition == "everything else" and PLAN_TABLE[-1].when(
        None
    )  # the last row always holds
    assert all(row.condition and row.why for row in PLAN_TABLE)


def test_the_docs_plan_table_names_exactly_the_plans_of_the_table():
    """docs/encoder.md's table of plans (its first column) against the kernels the plan table can choose."""
    import re
    from pathlib import Path

    from kolong.attention.dispatch import PLAN_TABLE

    page = (Path(__file__).resolve().parents[1] / "docs" / "encoder.md").read_text(encoding="utf-8")
    section = page.split("| plan | taken when", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))
    assert documented == {row.kernel for row in PLAN_TABLE}


def test_kolong_attention_plans_prints_every_row_and_option():
    from typer.testing import CliRunner

    from kolong.attention.dispatch import PLAN_TABLE
    from kolong.cli import app

    result = CliRunner().invoke(app, ["attention", "plans"])
    assert result.exit_code == 0, result.output
    for number, row in enumerate(PLAN_TABLE, 1):
        assert f"{number:2d}. {row.kernel}" in result.output and row.condition in result.output
    assert (
        "regions_strips (default 4)" in result.output and "compiled_kernels (default True)" in result.output
    )
    # the forms a chosen plan runs in, each with its condition, as its label names it
    assert "sdpa-document-blocks / chunked by row: CPU" in result.output
    assert "chunked one call: a bias by distance alone" in result.output


def test_tuned_thresholds_are_options_with_numbers_checked():
    options = AttentionOptions.parse(["regions_strips=6", "documents_max_share=0.5"])
    assert options.regions_strips == 6 and options.documents_max_share == 0.5
    with pytest.raises(ConfigError, match="regions_strips: expected a number"):
        AttentionOptions.parse(["regions_strips=many"])
    with pytest.raises(ConfigError, match="expected a positive number"):
        AttentionOptions.parse(["documents_by_row=0"])


def test_the_docs_options_table_names_every_run_time_option():
    """docs/encoder.md's table of run-time options against the fields of AttentionOptions."""
    import dataclasses
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "encoder.md").read_text(encoding="utf-8")
    section = page.split("| option | default | what it changes |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert documented == [spec.name for spec in dataclasses.fields(AttentionOptions)]


def test_every_path_but_the_chunked_one_and_the_reference_may_be_skipped():
    from kolong.attention.options import SKIPPABLE

    assert set(SKIPPABLE) == set(ATTENTION_FUNCTIONS) - {"chunked", "eager"}

"""Block-sparse attention of HF's BigBird (KoBigBird's architecture), as kolong extends and runs it.

BigBird pads every input to a multiple of its block size, and runs full attention for inputs shorter than
(5 + 2 r) x block tokens (r random blocks: 704 for KoBigBird's 64-token blocks and r = 3), where block-sparse
attention cannot be laid out. HF makes that switch by setting the model's attention type, not the call's:
after one short input the model stays on full attention, and later long inputs run it too, quadratic in
their length, without a word. `keep_block_sparse` restores the configured type before every call.
"""

from __future__ import annotations


def sparse_block_size(config) -> int | None:
    """The block size of a model with block-sparse attention (BigBird's `attention_type="block_sparse"`),
    which pads every input up to a multiple of it; None for other models."""
    if getattr(config, "attention_type", None) == "block_sparse":
        return int(getattr(config, "block_size", 0)) or None
    return None


def keep_block_sparse(model) -> None:
    """Make a block-sparse BigBird model return to block-sparse attention before every call (HF switches it
    to full attention for good after one short input); only the short call itself runs full attention."""
    base = getattr(model, "base_model", model)
    if sparse_block_size(model.config) is None or not hasattr(base, "set_attention_type"):
        return
    if getattr(base, "_kolong_keeps_block_sparse", False):
        return

    def restore(module, args, kwargs):
        if module.attention_type != "block_sparse":
            module.set_attention_type("block_sparse")

    base.register_forward_pre_hook(restore, with_kwargs=True)
    base._kolong_keeps_block_sparse = True

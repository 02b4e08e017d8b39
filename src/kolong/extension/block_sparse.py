"""Block-sparse attention of HF's BigBird (KoBigBird's architecture), as kolong extends and runs it.

BigBird pads every input to a multiple of its block size, and runs full attention for inputs shorter than
(5 + 2 r) x block tokens (r random blocks: 704 for KoBigBird's 64-token blocks and r = 3), where block-sparse
attention cannot be laid out. HF makes that switch by setting the model's attention type, not the call's:
after one short input the model stays on full attention, and later long inputs run it too, quadratic in
their length, without a word. `keep_block_sparse` restores the configured type before every call.

Since transformers 5.4, HF's block-sparse attention also assembles every layer's dense (b, h, n, n)
probabilities whether or not attentions are asked for, so its memory grows as n^2 (3.2 GB per layer call for one
8,192-token document with 12 heads). `sparse_attention_in_linear_memory` runs each layer's attention through
`kolong.extension.bigbird_attention` instead (the same outputs and gradients, HF's random blocks), and HF's own code only
when attentions are asked for.
"""

from __future__ import annotations

from types import MethodType


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


def run_block_sparse(model) -> None:
    """BigBird as kolong runs it (every model kolong loads): block-sparse again after a short input, in memory
    linear in the length. Other models are left as they are."""
    keep_block_sparse(model)
    sparse_attention_in_linear_memory(model)


def sparse_attention_in_linear_memory(model) -> int:
    """Run every block-sparse attention layer of an HF BigBird `model` through kolong's linear-memory kernel
    when no attentions are asked for; returns the number of layers changed (0 for other models). Nothing of the
    checkpoint changes: saved and reloaded without kolong, the model is HF's again."""
    try:
        from transformers.models.big_bird.modeling_big_bird import BigBirdBlockSparseAttention
    except ImportError:  # a transformers without BigBird
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, BigBirdBlockSparseAttention) and not getattr(
            module, "_kolong_linear_memory", False
        ):
            module.forward = MethodType(_linear_memory_forward, module)
            module._kolong_linear_memory = True
            changed += 1
    return changed


def _linear_memory_forward(self, hidden_states, band_mask=None, from_mask=None, to_mask=None,
                           from_blocked_mask=None, to_blocked_mask=None, **kwargs):  # fmt: skip
    """BigBirdBlockSparseAttention.forward's contract (context, attention probabilities), the probabilities None:
    HF's forward builds them densely, so it runs only when they are asked for."""
    if kwargs.get("output_attentions"):
        return type(self).forward(self, hidden_states, band_mask, from_mask, to_mask, from_blocked_mask,
                                  to_blocked_mask, **kwargs)  # fmt: skip
    from kolong.extension.bigbird_attention import block_sparse_attention

    batch, length, _ = hidden_states.shape
    if length % self.block_size:
        raise ValueError(
            f"block-sparse attention needs a length that is a multiple of {self.block_size}, got {length}"
        )

    def heads(linear):  # (b, n, hidden) -> (b, h, n, d)
        return linear(hidden_states).view(batch, length, self.num_attention_heads, -1).transpose(1, 2)

    key_mask = (
        to_mask.reshape(batch, length) if to_mask is not None else hidden_states.new_ones(batch, length)
    )
    out = block_sparse_attention(heads(self.query), heads(self.key), heads(self.value), key_mask,
                                 random_blocks(self, length, hidden_states.device), self.block_size)  # fmt: skip
    return out.transpose(1, 2).reshape(batch, length, -1), None


def random_blocks(module, length: int, device):
    """The random key blocks HF's BigBird attends to at `length`, as its block-sparse attention draws them
    (the paper's plans at 1,024, 3,072 and 4,096 tokens; seeded by the layer while training; a constant in
    evaluation): (1, h, nb - 2, r)."""
    import numpy as np
    import torch

    block, count, heads = module.block_size, module.num_random_blocks, module.num_attention_heads
    if module.training:
        np.random.seed(module.seed)
    if length in (1024, 3072, 4096):
        per_head = [module._bigbird_block_rand_mask(module.max_seqlen, module.max_seqlen, block, block, count,
                                                    last_idx=1024)[: length // block - 2] for _ in range(heads)]  # fmt: skip
    else:
        plan_length, plan_blocks = module._get_rand_attn_plan(length, block, count)
        per_head = module._bigbird_block_rand_mask_with_head(
            from_seq_length=length, to_seq_length=length, from_block_size=block, to_block_size=block,
            num_heads=heads, plan_from_length=plan_length, plan_num_rand_blocks=plan_blocks,
        )  # fmt: skip
    return torch.tensor(np.stack(per_head), dtype=torch.long, device=device)[None]

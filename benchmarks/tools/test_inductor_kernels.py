"""`benchmarks/tools/inductor_kernels.py` on a made-up Inductor cache: which modules count, what is read from them
and from their PTX, and how ptxas's answer is parsed (the real cache exists only on a GPU)."""

from __future__ import annotations

import json
import stat

import pytest

from benchmarks.tools import inductor_kernels as kernels

HEADER = """
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics

@triton_heuristics.template(

num_stages={stages},
num_warps={warps},
triton_meta={{'signature': {{'arg_Q': '*{dtype}', 'arg_K': '*{dtype}', 'arg_V': '*{dtype}', 'arg_LSE': '*fp32', 'in_ptr9': '*i64', 'out_ptr0': '*{dtype}'}}}},
inductor_meta={{'kernel_name': '{name}'}},

)
@triton.jit
def {name}(arg_Q, arg_K, arg_V, arg_LSE, arg_KV_NUM_BLKS, arg_KV_IDX, {captured}out_ptr0):
    PRESCALE_QK : tl.constexpr = False
    FLOAT32_PRECISION : tl.constexpr = 'ieee'
    IS_DIVISIBLE : tl.constexpr = True
    USE_TMA : tl.constexpr = False
    {tiles}
    Q = arg_Q

@triton.jit
def {inner}(
    arg_Q, arg_K,
):
    BLOCK_M : tl.constexpr = 999
"""


def module(name, inner, tiles, dtype="bf16", captured=2, stages=3, warps=4):
    pointers = "".join(f"in_ptr{9 + i}, " for i in range(captured))
    return HEADER.format(name=name, inner=inner, tiles=tiles, dtype=dtype, captured=pointers, stages=stages,
                         warps=warps)  # fmt: skip


FORWARD = module("triton_tem_fused_flex_attention_0", "forward_inner",
                 "BLOCK_M : tl.constexpr = 128\n    BLOCK_N : tl.constexpr = 64")  # fmt: skip
BACKWARD = module("triton_tem_fused_flex_attention_backward_1", "bwd_dq_inner",
                  "BLOCK_M1 : tl.constexpr = 64\n    BLOCK_N1 : tl.constexpr = 128\n    BLOCK_M2 : tl.constexpr = 128\n"
                  "    BLOCK_N2 : tl.constexpr = 64", dtype="fp32", captured=3, stages=1, warps=8)  # fmt: skip

PTX = """//
.version 8.7
.target sm_90a
.address_size 64
.visible .entry {name}(
)
{{
\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{%r1}}, %rd1, %rd2, p, 1, 1, 0, 1;
\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{%r2}}, %rd3, %rd4, p, 1, 1, 0, 1;
\tfma.rn.f32 %f1, %f2, %f3, %f4;
}}
\t.file\t1 "{source}"
"""
PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    8 bytes stack frame, 120 bytes spill stores, 96 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 0 bytes smem, 536 bytes cmem[0]
"""


@pytest.fixture
def cache(tmp_path):
    """An Inductor cache: two FlexAttention modules, a matmul template, a wrapper; Triton's PTX for the forward."""
    root = tmp_path / "inductor"
    for folder, name, text in (
        ("ab", "cabforward.py", FORWARD),
        ("cd", "ccdbackward.py", BACKWARD),
        ("ef", "cefmm.py", module("triton_tem_fused_mm_2", "mm_inner", "BLOCK_M : tl.constexpr = 64")),
        (
            "gh",
            "cghwrapper.py",
            "async_compile.triton('x', '''" + FORWARD + "''')",
        ),  # the output code, not a kernel
    ):
        (root / folder).mkdir(parents=True)
        (root / folder / name).write_text(text)
    triton = root / "triton" / "0" / "HASH"
    triton.mkdir(parents=True)
    source = root / "ab" / "cabforward.py"
    (triton / "triton_tem_fused_flex_attention_0.ptx").write_text(
        PTX.format(name="triton_tem_fused_flex_attention_0", source=source)
    )
    (triton / "triton_tem_fused_flex_attention_0.json").write_text(json.dumps({"shared": 98304}))
    return root


def fake_ptxas(tmp_path):
    script = tmp_path / "ptxas"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{PTXAS}EOF\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_the_report_reads_each_flex_kernel_from_its_source_and_ptx(cache, tmp_path):
    result = kernels.main(["--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"),
                           "--ptxas", fake_ptxas(tmp_path)])  # fmt: skip
    rows = {row["kind"]: row for row in result["rows"]}
    assert sorted(rows) == ["backward", "forward"]  # neither the matmul template nor the wrapper
    forward, backward = rows["forward"], rows["backward"]
    assert (
        forward["kernel"] == "triton_tem_fused_flex_attention_0" and forward["qkv_dtypes"] == "bf16,bf16,bf16"
    )
    assert (forward["BLOCK_M"], forward["BLOCK_N"]) == ("128", "64")  # the kernel's own, not its helper's 999
    assert (forward["num_stages"], forward["num_warps"], forward["captured_tensors"]) == (3, 4, 2)
    assert forward["FLOAT32_PRECISION"] == "ieee" and forward["USE_TMA"] == "False"
    assert forward["matrix"] == {"wgmma f32.bf16.bf16": 2, "fma.f32": 1}
    assert (forward["registers"], forward["spill_store_bytes"], forward["spill_load_bytes"]) == (255, 120, 96)
    assert forward["shared_bytes"] == 98304
    assert backward["qkv_dtypes"] == "fp32,fp32,fp32" and backward["captured_tensors"] == 3
    assert "matrix" not in backward  # its PTX is not in the cache
    out = tmp_path / "out"
    assert sorted(path.name for path in (out / "sources").iterdir()) == ["cabforward.py", "ccdbackward.py"]
    markdown = (out / "kernels.md").read_text()
    assert "| 128x64 |" in markdown and "| 64x128 / 128x64 |" in markdown
    assert "wgmma f32.bf16.bf16 x2" in markdown and "| 120 / 96 |" in markdown and "no PTX found" in markdown
    assert json.loads((out / "kernels.json").read_text())["rows"] == result["rows"]


def test_without_ptxas_the_rest_is_still_reported(cache, tmp_path):
    row = next(row for row in kernels.report(cache, ptxas=None)["rows"] if row["kind"] == "forward")
    assert "registers" not in row and row["matrix"]["wgmma f32.bf16.bf16"] == 2


def test_ptx_files_are_tied_to_their_source_in_either_file_form(tmp_path):
    """LLVM writes `.file 1 "/dir/c.py"` or, with a directory entry, `.file 1 "/dir", "c.py"`."""
    for index, line in enumerate(('.file\t1 "/tmp/x/ab/cone.py"', '.file 2 "/tmp/x/cd", "ctwo.py"')):
        (tmp_path / f"k{index}.ptx").write_text(f".target sm_90a\n{line}\n")
    tied = kernels.ptx_files(tmp_path)
    assert {name: path.name for name, path in tied.items() if name.endswith(".py")} == {
        "cone.py": "k0.ptx",
        "ctwo.py": "k1.ptx",
    }


def test_parse_ptxas_and_matrix_counts():
    assert kernels.parse_ptxas(PTXAS) == {"registers": 255, "stack_bytes": 8, "spill_store_bytes": 120,
                                          "spill_load_bytes": 96}  # fmt: skip
    assert kernels.parse_ptxas("ptxas fatal : bad input") == {}
    assert kernels.matrix_instructions("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {}") == {
        "mma f32.tf32.tf32": 1
    }
    assert kernels.matrix_instructions("fma.rn.ftz.f32 a; fma.rn.f32 b;") == {"fma.f32": 2}


def test_a_missing_cache_dir_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        kernels.main(["--cache-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path)])
    assert stopped.value.code == 2 and "nowhere: no such directory" in capsys.readouterr().err


def test_without_a_file_line_a_ptx_file_is_tied_by_its_kernel_name_when_that_name_is_unique(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "triton_tem_fused_0.ptx").write_text(".target sm_90a\n")
    (tmp_path / "a" / "triton_tem_fused_1.ptx").write_text(".target sm_90a\n")
    (tmp_path / "b" / "triton_tem_fused_1.ptx").write_text(".target sm_90a\n")  # another graph's kernel 1
    assert set(kernels.ptx_files(tmp_path)) == {"triton_tem_fused_0"}


def test_the_gpu_runners_kernel_reports_read_the_caches_their_runs_compiled_into():
    """`benchmarks/gpu/run` compiles each FlexAttention run into a cache of its own and reports on that cache."""
    import shlex
    import subprocess
    from pathlib import Path

    script = Path(__file__).parent.parent / "gpu" / "run"
    printed = subprocess.run(["bash", str(script), "--dry-run", "flex-probe", "pretrain-bench-base"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    compiled = [line.split("TORCHINDUCTOR_CACHE_DIR=")[1].split()[0] for line in printed.splitlines()
                if "TORCHINDUCTOR_CACHE_DIR=" in line]  # fmt: skip
    command = "python3 -m benchmarks.tools.inductor_kernels "
    reports = [kernels.build_parser().parse_args(shlex.split(line.partition(command)[2]))
               for line in printed.splitlines() if command in line]  # fmt: skip
    assert len(compiled) == 2 and [str(args.cache_dir) for args in reports] == compiled


def test_block_tables_name_the_kernel_that_reads_the_first_rows_tables_only():
    """A forward kernel reads row z's block tables at (z * heads + h) * stride: with one head at stride 0 over
    16 rows every row reads the first row's; with the tables written per head, 12 heads at stride 256."""
    one_head = kernels.block_tables("    SPARSE_Z = 16\n    SPARSE_HQ = 1\n    stride_kv_idx_h = 0\n"
                                    "    stride_q_idx_h = 0\n")  # fmt: skip
    per_head = kernels.block_tables("    SPARSE_Z = 16\n    SPARSE_HQ = 12\n    stride_kv_idx_h = 256\n")
    assert (one_head["table_heads"], one_head["table_head_stride"], one_head["first_row_tables_only"]) == (
        1,
        0,
        True,
    )
    assert (per_head["table_heads"], per_head["table_head_stride"], per_head["first_row_tables_only"]) == (
        12,
        256,
        False,
    )
    for row in (one_head, per_head):
        row.update(kernel="triton_tem_fused_flex_attention_0", kind="forward", captured_tensors=2,
                   qkv_dtypes="bf16")  # fmt: skip
    rows = {"rows": [{**one_head, "compiled_at": "04:07"}, {**per_head, "compiled_at": "04:20"}],
            "cache_dir": "c", "ptxas": None}  # fmt: skip
    markdown = kernels.to_markdown(rows)
    assert "| 1 x 0 (every row reads the first row's) |" in markdown and "| 12 x 256 |" in markdown
    assert kernels.block_tables("no tables here") == {}

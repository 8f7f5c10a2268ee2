"""The physical limit: the encoder's FLOPs per batch against measured onnxruntime time.

FLOPs are counted from the model's shape (matrix multiplications only; softmax, GELU and layer
norm are left out, so achieved GFLOP/s is a slight underestimate). The CPU's peak is derived
from its core count, clock and SIMD width, with the assumptions printed next to the figure:
2 FMA units per core (Zen 4/5, recent Intel server cores), 2 FLOPs per FMA lane, the clock read
from /proc/cpuinfo (no boost counted). INT8 is compared with the VNNI peak (4x the FP32 lanes).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from triton_fastpath.paths import BUILD_DIR, backends_importable

SEQUENCE = 64
DEFAULT_BATCHES = (1, 8, 32, 64)


def bert_flops_per_sequence(*, layers: int, hidden: int, intermediate: int, sequence: int, labels: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one sequence through a BERT classifier."""
    per_layer = (
        4 * 2 * sequence * hidden * hidden  # Q, K, V and output projections
        + 2 * 2 * sequence * sequence * hidden  # scores and context over all heads
        + 2 * 2 * sequence * hidden * intermediate  # feed-forward up and down
    )
    return layers * per_layer + 2 * hidden * hidden + 2 * hidden * labels  # + pooler + classifier


def cpu_peak(cpuinfo: str, cores: int) -> dict[str, Any]:
    """Peak FP32 FLOP/s (and INT8 ops/s) per core and for the machine, with the assumptions used."""
    flags = set(re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE).group(1).split()) if "flags" in cpuinfo else set()
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.MULTILINE)
    name = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    clock_ghz = float(mhz.group(1)) / 1000 if mhz else 2.0
    simd_bits = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
    fma_units = 2
    fp32_per_cycle = fma_units * (simd_bits // 32) * 2
    int8_per_cycle = fp32_per_cycle * 4 if {"avx512_vnni", "avx_vnni"} & flags else fp32_per_cycle * 2
    per_core = clock_ghz * fp32_per_cycle
    return {
        "cpu": name.group(1).strip() if name else "unknown",
        "cores": cores,
        "clock_ghz": clock_ghz,
        "simd_bits": simd_bits,
        "fma_units_per_core": fma_units,
        "fp32_flops_per_cycle": fp32_per_cycle,
        "fp32_gflops_per_core": per_core,
        "fp32_gflops_machine": per_core * cores,
        "int8_gops_per_core": clock_ghz * int8_per_cycle,
        "assumptions": (
            f"{cores} cores x {clock_ghz:.2f} GHz (cpu MHz in /proc/cpuinfo; no boost) x {simd_bits}-bit SIMD "
            f"({simd_bits // 32} FP32 lanes) x {fma_units} FMA units x 2 FLOP/FMA = "
            f"{per_core * cores:.0f} GFLOP/s FP32 ({per_core:.0f} per core); INT8: "
            f"{int8_per_cycle} ops/cycle/core ({'VNNI' if int8_per_cycle == fp32_per_cycle * 4 else 'no VNNI'})"
        ),
    }


def measure(repeats: int = 20, batch_sizes: tuple[int, ...] | None = None, threads: int = 1) -> dict[str, Any]:
    """Time the served encoder (FP32 and INT8, `threads` ORT threads) at each batch size."""
    backends_importable()
    from fastpath_backends.onnx_model import OnnxModel

    config = json.loads((BUILD_DIR / "sentiment" / "hf" / "config.json").read_text())
    per_sequence = bert_flops_per_sequence(
        layers=config["num_hidden_layers"],
        hidden=config["hidden_size"],
        intermediate=config["intermediate_size"],
        sequence=SEQUENCE,
        labels=len(config["id2label"]),
    )
    peak = cpu_peak(Path("/proc/cpuinfo").read_text(), os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    rows = []
    for precision, file in (("fp32", "model.onnx"), ("int8", "model.int8.onnx")):
        model = OnnxModel(BUILD_DIR / "sentiment" / "onnx" / file, intra_op_threads=threads)
        for batch in batch_sizes or DEFAULT_BATCHES:
            inputs = {
                "input_ids": rng.integers(5, config["vocab_size"], size=(batch, SEQUENCE), dtype=np.int64),
                "attention_mask": np.ones((batch, SEQUENCE), dtype=np.int64),
            }
            model.run(inputs)
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                model.run(inputs)
                times.append(time.perf_counter() - started)
            seconds = float(np.median(times))
            gflops = per_sequence * batch / seconds / 1e9
            peak_core = peak["fp32_gflops_per_core"] if precision == "fp32" else peak["int8_gops_per_core"]
            rows.append(
                {
                    "precision": precision,
                    "batch": batch,
                    "ms": seconds * 1000,
                    "gflop_per_batch": per_sequence * batch / 1e9,
                    "achieved_gflops": gflops,
                    "fraction_of_peak": gflops / (peak_core * threads),
                }
            )
    return {
        "flops_per_sequence": per_sequence,
        "sequence": SEQUENCE,
        "ort_threads": threads,
        "peak": peak,
        "rows": rows,
        "note": "matmul FLOPs only; peak of the cores ORT used (threads x per-core peak)",
    }

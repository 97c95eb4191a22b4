"""Launch-size helpers shared by the Triton kernels."""

from __future__ import annotations

import torch
import triton


def row_block(n_cols: int) -> int:
    """Smallest power-of-two block holding one whole row."""
    return triton.next_power_of_2(n_cols)


def warps_for(block: int) -> int:
    """More warps for wider rows so each thread keeps a bounded number of elements in registers."""
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


def num_programs(device: torch.device, work_items: int) -> int:
    """Programs for a persistent kernel: a few per SM on CUDA, a handful elsewhere (interpreter)."""
    if device.type == "cuda":
        per_device = torch.cuda.get_device_properties(device).multi_processor_count * 4
    else:
        per_device = 4
    return max(1, min(work_items, per_device))

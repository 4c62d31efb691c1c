"""What the host's GPUs are and what memory each has, read from NVML or nvidia-smi.

NVML comes from the `nvidia-ml-py` package (`pip install 'jobd[nvml]'`), imported
only when a worker starts and only where it is installed; without it the worker asks
`nvidia-smi` for each GPU's index and total memory. NVML also says how much memory is
in use on each GPU, which the agent reports with its heartbeat (`foreign_use`): memory
in use on a GPU that no job of this worker holds was taken by something jobd did not
start, and placement counts it as taken. With it goes each GPU's memory in use and
utilisation (`gpu_usage`), which the broker exports in `/metrics` and `job top` shows.

The functions that read NVML take the module as an argument and do nothing else, so
they are tested without a GPU (this module's tests give them a stand-in).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from typing import Any

__all__ = [
    "FOREIGN_ROUNDING",
    "foreign_use",
    "load_nvml",
    "nvml_gpus",
    "nvml_usage",
    "smi_gpus",
]

# Memory in use is reported rounded up to this, so a few MiB of drift is no write.
FOREIGN_ROUNDING = 256 << 20
_MIB = 1 << 20


def load_nvml() -> Any | None:
    """The initialised `pynvml` module; None where it is not installed or finds no driver."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no NVML here
        return None
    return pynvml


def nvml_gpus(nvml: Any) -> dict[int, int]:
    """Each GPU's index and total memory in bytes, as NVML counts them."""
    return {
        i: int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).total)
        for i in range(nvml.nvmlDeviceGetCount())
    }


def nvml_usage(nvml: Any, indices: Collection[int]) -> dict[int, dict[str, float | int]]:
    """Each of these GPUs' memory in use (`memory_used`, bytes) and, where NVML says it,
    how busy it was over its last sample period (`utilization`, 0 to 1); a GPU NVML
    fails on is left out, a GPU whose utilisation it cannot say has memory only."""
    usage: dict[int, dict[str, float | int]] = {}
    for i in indices:
        with contextlib.suppress(Exception):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            usage[i] = {"memory_used": int(nvml.nvmlDeviceGetMemoryInfo(handle).used)}
            # NVML_ERROR_NOT_SUPPORTED on some boards (and MIG): memory is still worth saying
            with contextlib.suppress(Exception):
                percent = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                usage[i]["utilization"] = min(max(int(percent), 0), 100) / 100
    return usage


def foreign_use(used: Mapping[int, int], held: Collection[int]) -> dict[int, int]:
    """Memory taken by processes jobd did not start: what is in use on the GPUs no job
    here holds (a held GPU is not offered anyway), rounded up; none is left out."""
    return {
        g: -(-n // FOREIGN_ROUNDING) * FOREIGN_ROUNDING
        for g, n in sorted(used.items())
        if g not in held and n > 0
    }


def smi_gpus(out: str) -> dict[int, int | None] | None:
    """`nvidia-smi --query-gpu=index,memory.total --format=csv,noheader,nounits` read:
    index -> bytes (None where it says `[N/A]`); None when it is not that answer."""
    gpus: dict[int, int | None] = {}
    for line in out.strip().splitlines():
        index, _, memory = (w.strip() for w in line.partition(","))
        if not index.isdigit():
            return None
        gpus[int(index)] = int(float(memory)) * _MIB if memory.replace(".", "").isdigit() else None
    return gpus

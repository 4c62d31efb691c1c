"""What a worker offers jobs that name CPUs and memory, and the labels selectors match.

The inventory is declared (`--cpus`, `--memory`) or detected: the CPUs this process may
run on (`os.sched_getaffinity`, so a worker started under `taskset` or a cgroup cpuset
offers those), and the host's memory (`MemTotal` of /proc/meminfo), each less a reserve
kept for the host itself (`--reserve-cpus`, default 1; `--reserve-memory`, default 2GiB),
never below 0. A declared figure is taken as said: no reserve comes off it.

Labels are declared (`--label K=V`) over the detected ones: `arch` (Kubernetes' names:
amd64, arm64, ...), `os` (linux) and, where NVML or nvidia-smi names the GPUs handed
out, `gpu.model` (the first one's name without its `NVIDIA ` prefix, spaces as `-`:
`A100-SXM4-80GB`). Checked at start, one sentence and exit 1 when a setting cannot work.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from jobd.api.labels import check_label_value, parse_label
from jobd.api.sizes import parse_size
from jobd.daemon.worker_host import StartupError

__all__ = [
    "DEFAULT_RESERVE_CPUS",
    "DEFAULT_RESERVE_MEMORY",
    "detect_gpu_name",
    "detected_cpus",
    "detected_labels",
    "detected_memory",
    "gpu_model_label",
    "labels_of",
    "mount_roots_of",
    "offered",
    "parse_labels",
    "size_option",
]

DEFAULT_RESERVE_CPUS = 1.0
DEFAULT_RESERVE_MEMORY = 2 << 30
# platform.machine() as Kubernetes' kubernetes.io/arch (GOARCH) says it.
_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
_NVIDIA_SMI_TIMEOUT_S = 10
_NOT_IN_A_VALUE = re.compile(r"[^-A-Za-z0-9_.]+")


def detected_cpus() -> int:
    """The CPUs this process may run on (its affinity), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def detected_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The host's memory in bytes (MemTotal); None where /proc/meminfo does not say."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    found = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def offered(declared: float | None, detected: float | None, reserve: float) -> float | None:
    """What the worker offers: as declared, else what is detected less the reserve (at
    least 0); None when neither is known."""
    if declared is not None:
        return declared
    if detected is None:
        return None
    return max(0.0, detected - reserve)


def size_option(value: str | int | None) -> int | None:
    """A size flag's value in bytes (`--memory 64GiB`); StartupError when it is none."""
    if value is None or isinstance(value, int):
        return value
    try:
        return parse_size(value)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def parse_labels(values: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """`--label K=V` (repeated; also comma- or space-separated, as JOBD_WORKER_LABELS
    holds them) as checked pairs; StartupError for one that is no label."""
    pairs: dict[str, str] = {}
    for value in values:
        for text in filter(None, re.split(r"[,\s]+", value)):
            try:
                key, label = parse_label(text)
            except ValueError as exc:
                raise StartupError(f"--label {text!r}: {exc}") from None
            pairs[key] = label
    return tuple(pairs.items())


def detected_labels(machine: str | None = None, system: str | None = None) -> dict[str, str]:
    """`arch` and `os` of this host, Kubernetes-style (amd64, arm64; linux)."""
    machine = (machine or platform.machine()).lower()
    system = (system or platform.system()).lower()
    return {"arch": _ARCH.get(machine, machine), "os": system}


def gpu_model_label(name: str) -> str | None:
    """A GPU's name as a label value: `NVIDIA A100-SXM4-80GB` is `A100-SXM4-80GB`."""
    value = _NOT_IN_A_VALUE.sub("-", name.strip().removeprefix("NVIDIA ").strip()).strip("-._")
    try:
        return check_label_value("gpu.model", value[:63].strip("-._")) or None
    except ValueError:
        return None


def detect_gpu_name(gpus: Sequence[int]) -> str | None:
    """The first handed-out GPU's name: NVML's, else nvidia-smi's; None when neither says."""
    if not gpus:
        return None
    from jobd.worker.gpus import load_nvml

    nvml = load_nvml()
    if nvml is not None:
        try:
            name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(gpus[0]))
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # an NVML error: the label is only left out
            return None
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", f"--id={gpus[0]}"],
            capture_output=True,
            text=True,
            timeout=_NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def labels_of(declared: Sequence[tuple[str, str]], gpus: Sequence[int]) -> dict[str, str]:
    """The worker's labels: detected (arch, os, gpu.model), then the declared over them."""
    labels = detected_labels()
    name = detect_gpu_name(gpus)
    model = gpu_model_label(name) if name else None
    if model:
        labels["gpu.model"] = model
    labels.update(declared)
    return labels


def mount_roots_of(roots: Iterable[Path]) -> list[str]:
    """`--mount-root` paths, absolute and normalised; StartupError for a relative one."""
    out: list[str] = []
    for root in roots:
        path = root.expanduser()
        if not path.is_absolute():
            raise StartupError(f"--mount-root {str(root)!r}: give an absolute path")
        text = os.path.normpath(path)
        if text not in out:
            out.append(text)
    return out

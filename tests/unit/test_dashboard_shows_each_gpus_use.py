"""The dashboard's workers page shows each GPU's memory in use and utilisation where the
worker's NVML said them (`status.gpu_usage`), and only its total where nothing measures."""

from __future__ import annotations

from typing import Any

from jobd.broker.ui.rendering import fragment

GIB = 1 << 30


def _page(usage: dict[str, Any]) -> str:
    spec = {"slots": 1, "gpus": [0, 1], "gpu_memory": {"0": 24 * GIB, "1": 80 * GIB}}
    worker = {
        "doc": {
            "metadata": {"name": "w1"},
            "spec": spec,
            "status": {"phase": "Ready", "gpu_usage": usage},
        },
        "jobs": [],
        "others": 0,
        "slots_used": 0,
        "gpus_used": [0],
    }
    return fragment("workers.html", who=None, workers=[worker])


def test_each_gpu_shows_what_nvml_said_of_it() -> None:
    page = _page({"0": {"memory_used": 3 * GIB, "utilization": 0.97}, "1": {"memory_used": GIB}})
    assert '0:24GiB <span class="muted">3GiB used, 97%</span>' in page
    assert '1:80GiB <span class="muted">1GiB used</span>' in page  # no utilisation said


def test_a_declared_inventory_shows_totals_only() -> None:
    page = _page({})
    assert "0:24GiB</span>" in page and "used" not in page

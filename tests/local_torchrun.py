"""Start every node line of a plan's emitted torchrun launch on this host (gloo, CPU) and read back what each rank's
probe script wrote: the real-rank checks of tests/test_adapters_torchrun.py and tests/test_adapters_stages.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from frenzy_core.adapters import ADAPTERS
from frenzy_core.planning import Plan


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_lines(plan: Plan, probe: Path, out: Path, timeout_s: float = 300) -> list[dict[str, Any]]:
    """Every node's line of ``plan`` run here with ``probe`` as the script (its argument: ``out``), each rank's JSON
    record (``out/rank*.json``) in rank order; the ranks' stderr tails when any agent fails."""
    data = ADAPTERS["torchrun"](plan, torchrun=[sys.executable, "-m", "torch.distributed.run"],
                                script=str(probe), script_args=[str(out)],
                                hosts={name: "127.0.0.1" for name in plan.placement}, rdzv_port=free_port(),
                                rdzv_id="frenzy-test")
    procs = [subprocess.Popen(node["argv"], env={**os.environ, **node["env"], "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for node in data["nodes"]]
    errors = [proc.communicate(timeout=timeout_s)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * len(procs), "\n".join(e[-3000:] for e in errors)
    return sorted((json.loads(p.read_text()) for p in out.glob("rank*.json")), key=lambda r: r["rank"])

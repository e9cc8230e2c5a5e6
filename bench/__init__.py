"""XPUShare's benchmarks, by what they measure: launch/, scheduling/, switching/, quotas/,
observability/, multigpu/, with what they share in core/ and one-off design measurements in
probes/. One runner, run_all.py (`python3 -m bench.run_all`); each benchmark also runs alone
(`python3 -m bench.<room>.<name>`), from the repository's root.

Benchmarks start their worker programs by path as child processes; those find this package through
PYTHONPATH, which importing it extends with the repository's root.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(REPO) not in _paths:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *_paths])

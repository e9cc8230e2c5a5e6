import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))

from sched_fixtures import scheduler, sockdir, start_scheduler  # noqa: E402,F401

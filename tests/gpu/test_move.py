"""`nvsharectl move` on a machine of two GPUs of one chip type (docs/suspend.md): a training job
running under the library is moved mid-run from GPU 0 to GPU 1 and finishes with every loss
bit-identical to the same job run natively; the scheduler and the job's own CUDA then name GPU 1.
Skipped on a machine of one GPU, or of two different ones.

GPU safety: the job is small (well under 1 GiB); a process the driver restored is never killed
while it may be restored: if it does not finish in time it is checkpointed again first."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from testkit import gpu as harness
from testkit.gpu import PROGRAMS, python_cmd
from testkit.waiting import poll

STEPS, STEP_MS, ANNOUNCE_AT = 300, 20, 50


def _gpus() -> list[tuple[str, str]]:
    """(name, uuid) of each GPU nvidia-smi lists."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    return [tuple(f.strip() for f in line.split(",")) for line in out.stdout.splitlines() if "," in line]


GPUS = _gpus()
pytestmark = pytest.mark.skipif(len(GPUS) < 2 or GPUS[0][0] != GPUS[1][0],
                                reason="needs two GPUs of one chip type (a move restores onto the same type)")


# The job sees GPU 0 by its UUID: CUDA numbers GPUs fastest first, nvidia-smi by PCI bus, and the
# assertions name nvidia-smi's.
def _trainer(*extra) -> list[str]:
    return python_cmd(PROGRAMS / "move_trainer.py", "--steps", STEPS, "--step-ms", STEP_MS, *extra)


def _finish_safely(prog: harness.Program, timeout: float) -> harness.Run:
    """Wait for it; one that does not end in time is checkpointed again before it is ended (a
    restored process that is killed can hang the host)."""
    try:
        prog.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.path.insert(0, str(harness.REPO / "src"))
        from xpushare.scheduler.node.checkpoint_worker import Driver
        Driver("libcuda.so.1").suspend(prog.pid, 10000)
    return prog.wait(timeout=5)


def test_nvsharectl_move_moves_a_running_training_job_and_its_losses_stay_native(
        tmp_path, nvshare_lib, scheduler_factory):
    native = harness.run(_trainer(), harness.native_env(CUDA_VISIBLE_DEVICES=GPUS[0][1]), timeout=180).check()
    sched = scheduler_factory(mode="auto")
    ready = tmp_path / "ready"
    env = harness.library_env(nvshare_lib, sched.socket, CUDA_VISIBLE_DEVICES=GPUS[0][1])
    prog = harness.Program(_trainer("--announce-at", ANNOUNCE_AT, "--ready-file", ready), env)
    try:
        poll(ready.exists, 120, 0.05, what="the job to run", abort=lambda: prog.proc.poll() is not None)
        ctl = [sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(sched.socket)]
        moved = subprocess.run([*ctl, "move", str(prog.pid), "--to", GPUS[1][1]], env=harness.native_env(),
                               capture_output=True, text=True, timeout=150)

        def me() -> dict:
            status = json.loads(subprocess.run([*ctl, "status", "--json"], env=harness.native_env(),
                                               capture_output=True, text=True, timeout=30).stdout)
            return next((c for c in status["clients"] if c["pid"] == prog.pid), {})
        if moved.returncode == 0:  # its library attaches GPU 1 once it runs again
            poll(lambda: [g["uuid"] for g in me().get("gpus", [])] == [GPUS[1][1]], 30, 0.2,
                 what="the scheduler to see it on GPU 1")
            after = me()
    finally:
        run = _finish_safely(prog, timeout=240)
    assert moved.returncode == 0, f"{moved.stdout}\n{moved.stderr}\n{sched.log()[-4000:]}"
    result = run.check().result
    assert result["library"] and result["losses"] == native.result["losses"], "losses as native"
    assert (result["uuid_before"], result["uuid_after"]) == (GPUS[0][1], GPUS[1][1]), result
    assert after["move"]["moves"] == 1, after

"""Probe: a whole PyTorch process suspended by the scheduler and resumed at its next request.

A scheduler (mode auto) and one small server under libnvshare.so (a 256 MiB tensor, or a bare
context): the server answers a few requests resident (each reads the tensor and answers with its
SHA-256), goes idle, is suspended with `nvsharectl suspend` (its memory moves out, then the
scheduler's checkpoint worker checkpoints it), and nvidia-smi is read while it is suspended; then a
request arrives, which resumes it on its own. Reported: how long the suspension took, what the GPU
showed of the process while suspended, the first request's latency after the resume against the
resident ones, bit-identical answers, and the cold start of a fresh PyTorch process beside it.
With --idle S the scheduler suspends it by itself (--suspend-idle S) instead of nvsharectl.

GPU safety: the server is small (< 1 GiB), it is never killed while restored (asked to exit; a
server that does not is suspended again first), and the scheduler restores it before it exits.

    python3 bench/probes/suspend_scheduler.py [--bare] [--idle 2] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.probes.checkpoint_vmm import apps, cold_start_ms, gpu_used_mib  # noqa: E402

SERVER = r'''
import sys, time, hashlib, torch
bare = sys.argv[1] == "bare"
x = torch.ones(1, device="cuda") if bare else torch.arange(64 << 20, dtype=torch.float32, device="cuda").mul_(1.5)
torch.cuda.synchronize()
print("READY", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    t = time.perf_counter()
    h = hashlib.sha256((x * 2).sum().cpu().numpy().tobytes()).hexdigest()[:16]
    print(f"done {(time.perf_counter() - t) * 1e3:.2f} {h}", flush=True)
'''


def ctl(sock: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xpushare.cli.ctl", "--socket", str(sock), *args],
                          capture_output=True, text=True, timeout=60)


def client(sock: Path, pid: int) -> dict | None:
    st = json.loads(ctl(sock, "status", "--json").stdout or "{}")
    return next((c for c in st.get("clients", []) if c["pid"] == pid), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bare", action="store_true", help="a bare context instead of a 256 MiB tensor")
    ap.add_argument("--idle", type=float, default=0.0, help="let the scheduler suspend it after S idle seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--lib", default=os.environ.get("NVSHARE_LIBRARY", ""))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="suspend-"))
    sock = tmp / "s.sock"
    sched_log = open(tmp / "scheduler.log", "w")
    extra = ["--suspend-idle", str(args.idle)] if args.idle else []
    sched = subprocess.Popen([sys.executable, "-m", "xpushare.scheduler", "--socket", str(sock), "--mode", "auto",
                              *extra], stdout=sched_log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if ctl(sock, "ping").returncode == 0:
            break
        time.sleep(0.05)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVSHARE_")}
    env.update(LD_PRELOAD=args.lib, NVSHARE_SOCK_PATH=str(sock), NVSHARE_GPU_MEMORY="16GiB",
               NVSHARE_IDLE_RELEASE_MS="100", PYTORCH_CUDA_ALLOC_CONF="expandable_segments:False")
    err = open(tmp / "server.log", "w")
    srv = subprocess.Popen([sys.executable, "-c", SERVER, "bare" if args.bare else "data"], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    out: dict = {"case": "bare" if args.bare else "256 MiB tensor", "by": "idle" if args.idle else "nvsharectl"}
    try:
        assert srv.stdout.readline().split() == ["READY"]

        def ask() -> tuple[float, str, float]:
            t = time.perf_counter()
            srv.stdin.write("req\n")
            srv.stdin.flush()
            _, ms, h = srv.stdout.readline().split()
            return (time.perf_counter() - t) * 1e3, h, float(ms)
        resident = [ask() for _ in range(5)]
        out["resident_ms"] = [round(r[0], 2) for r in resident]
        time.sleep(0.5)
        out["used_mib_running"], out["apps_running"] = gpu_used_mib(), apps().get(srv.pid)
        t0 = time.perf_counter()
        if not args.idle:
            out["ctl"] = ctl(sock, "suspend", str(srv.pid)).stdout.strip()
        while (c := client(sock, srv.pid)) and c["suspend"]["phase"] != "suspended":
            if time.perf_counter() - t0 > 60 or (c["suspend"]["refused"] and c["suspend"]["phase"] is None):
                break
            time.sleep(0.02)
        out["suspend_s"] = round(time.perf_counter() - t0, 3)
        out["status_suspend"] = c and c["suspend"]
        time.sleep(0.5)
        out["used_mib_suspended"], out["apps_suspended"] = gpu_used_mib(), apps().get(srv.pid)
        first = ask()
        out["first_after_resume_ms"] = round(first[0], 2)
        out["after"] = [round(ask()[0], 2) for _ in range(3)]
        out["identical"] = first[1] == resident[0][1]
        out["status_after"] = (client(sock, srv.pid) or {}).get("suspend")
    finally:
        srv.stdin.write("quit\n")
        srv.stdin.flush()
        out["server_exit"] = srv.wait(60)
        sched.terminate()
        out["scheduler_exit"] = sched.wait(60)
    out["cold_start_ms"] = cold_start_ms(sys.executable)
    out["scheduler_log"] = (tmp / "scheduler.log").read_text()[-2500:]
    out["server_log"] = (tmp / "server.log").read_text()[-1500:]
    print(json.dumps({k: v for k, v in out.items() if not k.endswith("_log")}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Added cost per kernel launch under libnvshare.so.

Builds bench/launch_overhead.cu with nvcc, then runs the same binary natively and under the library
(scheduler in mode `off`, so the library holds the GPU lock and takes its fast path), alternating,
several times each; reports the median ns per launch of each side and the difference:
- driver/runtime submit: time inside cuLaunchKernel / <<<>>> only (the CPU cost a program pays);
- driver/runtime total: with a stream synchronize per 100 launches (launch throughput);
- null call: cuLaunchKernel(NULL, ...) rejected at once by the driver: the call path alone.

    python3 bench/launch_overhead.py [--reps 5] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import site
import subprocess
import tempfile
from pathlib import Path

from common import BENCH, alternating, harness, median, require_safe_gpu

METRICS = {  # name -> (mode, path in the program's JSON)
    "driver_submit_ns": ("launches", ("driver", "submit_ns")),
    "driver_total_ns": ("launches", ("driver", "total_ns")),
    "runtime_submit_ns": ("launches", ("runtime", "submit_ns")),
    "runtime_total_ns": ("launches", ("runtime", "total_ns")),
    "null_call_ns": ("null", ("call_ns",)),
}


def find_nvcc() -> str:
    """PATH, $CUDA_HOME, /usr/local/cuda, or the nvcc of a pip-installed toolkit (nvidia-cuda-nvcc)."""
    candidates = [shutil.which("nvcc"), os.environ.get("CUDA_HOME", "") + "/bin/nvcc", "/usr/local/cuda/bin/nvcc"]
    for site_dir in site.getsitepackages():
        candidates += sorted(glob.glob(f"{site_dir}/nvidia/*/bin/nvcc"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise RuntimeError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, site-packages/nvidia)")


def _link_options(nvcc: str) -> list[list[str]]:
    """Ways to link against the driver: a libcuda.so on the default path, the toolkit's stub, or the
    driver's own libcuda.so.1 (where the driver installed no unversioned libcuda.so)."""
    options = [["-lcuda"]]
    toolkits = {Path(nvcc).resolve().parent.parent, Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))}
    for toolkit in sorted(toolkits):
        for stubs in ("lib64/stubs", "lib/stubs", "targets/x86_64-linux/lib/stubs"):
            if (toolkit / stubs / "libcuda.so").exists():
                options.append([f"-L{toolkit / stubs}", "-lcuda"])
    try:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        ldconfig = ""
    for line in ldconfig.splitlines():
        if "libcuda.so.1 " in line and "x86-64" in line:
            options.append([f"-L{Path(line.split('=>')[-1].strip()).parent}", "-l:libcuda.so.1"])
            break
    return options


def _try(cmd: list[str], errors: list[str]) -> bool:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        errors.append(f"$ {' '.join(cmd)}\n{done.stderr[-1500:]}")
    return done.returncode == 0


def build(outdir: Path) -> Path:
    """Compile for the GPU's own architecture (else nvcc's default), then link against the driver."""
    nvcc, obj, binary = find_nvcc(), outdir / "launch_overhead.o", outdir / "launch_overhead"
    errors: list[str] = []
    compile_cmd = [nvcc, "-O2", "-std=c++17", "-c", "-o", str(obj), str(BENCH / "launch_overhead.cu")]
    if not (_try(compile_cmd[:1] + ["-arch=native"] + compile_cmd[1:], errors) or _try(compile_cmd, errors)):
        raise RuntimeError("could not compile launch_overhead.cu:\n" + "\n".join(errors))
    arch = ["-arch=native"] if len(errors) == 0 else []
    for link in _link_options(nvcc):
        if _try([nvcc, *arch, "-o", str(binary), str(obj), *link], errors):
            return binary
    raise RuntimeError("could not link launch_overhead against libcuda:\n" + "\n".join(errors))


def run_binary(binary: Path, env: dict[str, str], mode: str, launches: int) -> dict:
    r = harness.run([str(binary), "--mode", mode, "--launches", str(launches)], env, timeout=300).check()
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(lib: Path, sched, reps: int = 5, launches: int = 200_000) -> dict:
    with tempfile.TemporaryDirectory(prefix="nvs-bench-") as tmp:
        binary = build(Path(tmp))
        envs = {"native": harness.native_env(), "library": harness.library_env(lib, sched.socket)}
        samples: dict[str, dict[str, list[float]]] = {side: {m: [] for m in METRICS} for side in envs}
        null_result: dict[str, str] = {}
        for _, side in alternating(reps):
            for mode in ("launches", "null"):
                try:
                    out = run_binary(binary, envs[side], mode, launches)
                except AssertionError as e:
                    if mode == "launches":
                        raise
                    null_result[side] = f"failed: {str(e)[:300]}"  # keep the launch numbers
                    continue
                null_result[side] = out.get("result", null_result.get(side))
                for name, (metric_mode, path) in METRICS.items():
                    if metric_mode == mode:
                        value = out
                        for key in path:
                            value = value[key]
                        samples[side][name].append(float(value))
    rows = {}
    for name in METRICS:
        native, ours = median(samples["native"][name]), median(samples["library"][name])
        rows[name] = {"native": native, "library": ours, "delta": ours - native,
                      "ratio": ours / native if native else None,
                      "samples": {side: samples[side][name] for side in samples}}
    return {"reps": reps, "launches_per_rep": launches, "metrics": rows,
            "null_call_result": null_result}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--launches", type=int, default=200_000)
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    require_safe_gpu()
    with harness.Scheduler(mode="off") as sched:
        result = measure(harness.library_path(), sched, args.reps, args.launches)
    for name, row in result["metrics"].items():
        print(f"{name:20s} native {row['native']:9.1f}  library {row['library']:9.1f}  "
              f"delta {row['delta']:+8.1f} ns")
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

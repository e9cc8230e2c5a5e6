"""nvcc for the benchmarks' own CUDA programs: where it is (a pip-installed toolkit included), and
how to build a program that calls the driver API directly, on machines whose driver installed no
unversioned libcuda.so."""

from __future__ import annotations

import glob
import os
import shutil
import site
import subprocess
from pathlib import Path


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


def build_driver_program(source: Path, outdir: Path) -> Path:
    """Compile a .cu for the GPU's own architecture (else nvcc's default), then link it against the
    driver (libcuda) and libdl; returns the program, outdir/<source's stem>."""
    nvcc, obj, binary = find_nvcc(), outdir / f"{source.stem}.o", outdir / source.stem
    errors: list[str] = []
    compile_cmd = [nvcc, "-O2", "-std=c++17", "-c", "-o", str(obj), str(source)]
    if not (_try(compile_cmd[:1] + ["-arch=native"] + compile_cmd[1:], errors) or _try(compile_cmd, errors)):
        raise RuntimeError(f"could not compile {source.name}:\n" + "\n".join(errors))
    arch = ["-arch=native"] if len(errors) == 0 else []
    for link in _link_options(nvcc):
        if _try([nvcc, *arch, "-o", str(binary), str(obj), *link, "-ldl"], errors):
            return binary
    raise RuntimeError(f"could not link {source.stem} against libcuda:\n" + "\n".join(errors))

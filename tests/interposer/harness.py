"""Test harness for libnvshare.so: real processes, the mock driver, the real scheduler.

- build_artifacts(): compiles the mock libcuda.so.1 (every room of tests/mock/cuda/, its modelled
  GPU included: mock_cuda_sources()), the scripted test program (cuda_app: every room of
  tests/mock/cuda_app/, cuda_app_sources()), the RTLD_NEXT probe library, the mock
  libnvidia-ml.so.1 and its test program (nvml_app) with gcc.
- Scheduler: `python -m xpushare.scheduler` on a private socket, with status() over the ctl protocol.
- App: one cuda_app process running a script of steps (tests/mock/cuda_app/README.md documents
  them); its stdout is read line by line (one JSON object per step) so a test can wait for a step,
  check the scheduler while the app is paused, and resume it.
- MockLog: the mock driver's call log (one JSON object per driver call, with t0/t1 in ns of
  CLOCK_MONOTONIC, comparable across processes).

Everything that waits polls with generous timeouts: the suite must hold on a loaded 2-core CI box.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from testkit.scheduler import SchedulerProcess
from testkit.waiting import poll  # noqa: F401  (re-exported for the tests)

from .hooks_table import gated_names

REPO = Path(__file__).resolve().parents[2]
MOCK_SRC = REPO / "tests" / "mock"
SRC = REPO / "src"

GIB = 1 << 30
MIB = 1 << 20

# Environment variables a test process must not inherit from the developer's shell.
_SCRUB_PREFIXES = ("NVSHARE_", "MOCK_CUDA_", "MOCK_NVML_", "RTLD_NEXT_PROBE")
# The torch distributed variables name a job to the library (JOB): a test sets them or has none.
_SCRUB = {"LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
          "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}

# Entry points whose calls are GPU work: the GATE and LAUNCH lines of native/src/hooks/hooks.h, every variant.
GATED = gated_names()


def is_gated(fn: str) -> bool:
    return fn in GATED


# What the library's drain calls (it synchronises the contexts it used, or waits on its checkpoints).
DRAIN_CALLS = ("cuCtxSynchronize", "cuEventSynchronize", "cuEventQuery", "cuStreamSynchronize")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)}
    env.update({k: str(v) for k, v in extra.items() if v is not None})
    return env


# ------------------------------------------------------------------------------------------------
# building


@dataclass
class Artifacts:
    dir: Path
    libcuda: Path
    app: Path
    rtld_next_probe: Path
    libnvml: Path
    nvml_app: Path


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def mock_cuda_sources() -> list[Path]:
    """The mock driver's sources: every room of tests/mock/cuda/ (its README.md), what each build of
    libcuda.so.1 compiles, so that a new room needs no edit here."""
    return sorted((MOCK_SRC / "cuda").glob("*.c"))


def cuda_app_sources() -> list[Path]:
    """The scripted test program's sources: every room of tests/mock/cuda_app/ (its README.md),
    what each build of cuda_app compiles, so that a new room needs no edit here."""
    return sorted((MOCK_SRC / "cuda_app").glob("*.c"))


def _mock_library(out: Path, soname: str, sources: list[Path], *flags: str) -> Path:
    """Build a mock shared library as out/SONAME, with the unversioned name (for -l) linked to it."""
    lib = out / soname
    _run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-o", lib, f"-Wl,-soname,{soname}", *sources, *flags])
    link = out / soname.rsplit(".", 1)[0]
    if not link.exists():
        link.symlink_to(soname)
    return lib


def build_artifacts(out: Path, *flags: str) -> Artifacts:
    """The mock driver and the test programs; flags go to every gcc command (the old-glibc test
    builds them with native/src/core/glibc_compat.h, as the library is)."""
    out.mkdir(parents=True, exist_ok=True)
    libcuda = _mock_library(out, "libcuda.so.1", mock_cuda_sources(), "-pthread", *flags)
    app = out / "cuda_app"
    _run(["gcc", "-O1", "-Wall", "-o", app, *cuda_app_sources(), f"-L{out}", "-lcuda", "-ldl",
          "-pthread", *flags])
    probe = out / "librtldnext.so"
    _run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-o", probe, MOCK_SRC / "rtld_next_probe.c", "-ldl",
          *flags])
    libnvml = _mock_library(out, "libnvidia-ml.so.1", [MOCK_SRC / "mock_nvml.c"], *flags)
    nvml_app = out / "nvml_app"
    _run(["gcc", "-O1", "-Wall", "-o", nvml_app, MOCK_SRC / "nvml_app.c", f"-L{out}", "-lcuda", "-lnvidia-ml",
          "-ldl", *flags])
    return Artifacts(out, libcuda, app, probe, libnvml, nvml_app)


def artifacts_in(out: Path) -> Artifacts:
    """What build_artifacts(out) made, found again (the names it gives them)."""
    return Artifacts(out, out / "libcuda.so.1", out / "cuda_app", out / "librtldnext.so",
                     out / "libnvidia-ml.so.1", out / "nvml_app")


def build_mock_variant(out: Path, *defines: str) -> Path:
    """The mock driver built with compile-time switches (e.g. MOCK_CUDA_NO_PREFETCH_V2) into `out`;
    returns the directory to put first on LD_LIBRARY_PATH (cuda_app finds libcuda.so.1 there)."""
    out.mkdir(parents=True, exist_ok=True)
    _run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", *(f"-D{d}" for d in defines), "-o", out / "libcuda.so.1",
          "-Wl,-soname,libcuda.so.1", *mock_cuda_sources(), "-pthread"])
    return out


# ------------------------------------------------------------------------------------------------
# scheduler


class Scheduler(SchedulerProcess):
    """A real nvshare-scheduler on a private socket, with this checkout's xpushare package."""

    def __init__(self, socket_path: Path, log_path: Path, mode: str = "serial", tq: float = 30,
                 extra_args=(), env: dict | None = None):
        env = clean_env(PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
                        **(env or {}))
        super().__init__(socket_path, ["--tq", tq, "--mode", mode, "--no-nvml", *extra_args], env, log_path)
        self.mode, self.tq, self.extra_args = mode, tq, list(extra_args)


# ------------------------------------------------------------------------------------------------
# the scripted test program


class App:
    """One cuda_app process. Steps are its argv; each step prints one JSON line."""

    def __init__(self, binary: Path, steps, env: dict, stderr_path: Path, lookup: str | None = None,
                 ptds: bool = False, cuda_version: int | None = None, cpu: int | None = None):
        # taskset execs the program: the pid stays the program's
        args = ["taskset", "-c", str(cpu), str(binary)] if cpu is not None else [str(binary)]
        if lookup:
            args += ["--lookup", lookup]
        if ptds:
            args.append("--ptds")
        if cuda_version:
            args += ["--cuda-version", str(cuda_version)]
        self.args = args + [str(s) for s in steps]
        self.stderr_path = Path(stderr_path)
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env)
        self._stderr.close()
        self.pid = self.proc.pid
        self.lines: list[dict] = []
        self._cv = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            try:
                obj = json.loads(raw)
            except ValueError:
                obj = {"step": "?", "raw": raw.decode(errors="replace")}
            with self._cv:
                self.lines.append(obj)
                self._cv.notify_all()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def wait_step(self, step: str, timeout: float = 20.0, nth: int = 1, **match) -> dict:
        """The nth output line of `step` whose fields equal `match` (waits for it)."""
        def found():
            hits = [ln for ln in self.lines
                    if ln.get("step") == step and all(ln.get(k) == v for k, v in match.items())]
            return hits[nth - 1] if len(hits) >= nth else None
        deadline = time.monotonic() + timeout
        with self._cv:
            while (hit := found()) is None:
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    raise AssertionError(
                        f"{'exited' if self._eof else 'timed out'} before step {step} {match or ''}"
                        f" (pid {self.pid}, rc {self.proc.poll()}); lines: {self.lines}\n"
                        f"stderr: {self.stderr()}")
                self._cv.wait(min(left, 0.2))
        return hit

    def has_step(self, step: str, **match) -> bool:
        with self._cv:
            return any(ln.get("step") == step and all(ln.get(k) == v for k, v in match.items())
                       for ln in self.lines)

    def steps(self, step: str, **match) -> list[dict]:
        with self._cv:
            return [ln for ln in self.lines
                    if ln.get("step") == step and all(ln.get(k) == v for k, v in match.items())]

    def paused(self, timeout: float = 20.0, nth: int = 1) -> dict:
        return self.wait_step("pause", timeout, nth=nth, state="waiting")

    def resume(self):
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"pid {self.pid} did not finish in {timeout}s; lines: {self.lines}\n"
                                 f"stderr: {self.stderr()}")
        self._reader.join(timeout=5)
        return rc

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def close(self):
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass


# ------------------------------------------------------------------------------------------------
# the mock driver's log


class MockLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def entries(self, pid: int | None = None, fn: str | None = None, **match) -> list[dict]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            if pid is not None and e["pid"] != pid:
                continue
            if fn is not None and e["fn"] != fn:
                continue
            if any(e.get(k) != v for k, v in match.items()):
                continue
            out.append(e)
        return out

    def fns(self, pid: int | None = None) -> list[str]:
        return [e["fn"] for e in self.entries(pid)]

    def work(self, pid: int | None = None) -> list[dict]:
        """Gated calls that really ran (not captured into a graph), in time order."""
        return sorted((e for e in self.entries(pid) if is_gated(e["fn"]) and not e.get("captured")),
                      key=lambda e: e["t0"])

    def errors(self, pid: int | None = None) -> list[dict]:
        return [e for e in self.entries(pid) if "error" in e]


def overlaps(a: list[dict], b: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of calls (one from each list) whose [t0, t1] intervals overlap."""
    out = []
    for x in a:
        for y in b:
            if max(x["t0"], y["t0"]) < min(x["t1"], y["t1"]):
                out.append((x, y))
    return out


def uuid_of(physical_index: int) -> str:
    return f"GPU-00000000-0000-0000-0000-0000000000{physical_index:02x}"


# ------------------------------------------------------------------------------------------------
# the per-test world


@dataclass
class World:
    """What one test uses: artifacts, the library, a private directory, its scheduler(s), its apps."""
    artifacts: Artifacts
    library: Path
    dir: Path
    socket: Path
    log: MockLog
    schedulers: list = field(default_factory=list)
    apps: list = field(default_factory=list)
    base_env: dict = field(default_factory=dict)  # variables every app of the world gets
    _n: int = 0

    def scheduler(self, mode: str = "serial", tq: float = 30, extra_args=(), start: bool = True,
                  env: dict | None = None) -> Scheduler:
        """env: variables the scheduler (and what it starts: the checkpoint worker) gets too."""
        self._n += 1
        s = Scheduler(self.socket, self.dir / f"scheduler{self._n}.log", mode, tq, extra_args, env)
        self.schedulers.append(s)
        return s.start() if start else s

    def env(self, **extra) -> dict:
        base = dict(LD_PRELOAD=str(self.library), LD_LIBRARY_PATH=str(self.artifacts.dir),
                    NVSHARE_SOCK_PATH=str(self.socket), MOCK_CUDA_LOG=str(self.log.path))
        base.update(self.base_env)
        base.update(extra)
        return clean_env(**base)

    def app(self, *steps, env: dict | None = None, lookup: str | None = None, ptds: bool = False,
            cuda_version: int | None = None, preload: bool = True, cpu: int | None = None) -> App:
        """Start cuda_app with `steps`; env holds extra variables (None removes one); cpu pins it
        (all its threads) to that CPU, where taskset exists."""
        self._n += 1
        e = self.env()
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = str(v)
        if not preload:
            e.pop("LD_PRELOAD", None)
        if cpu is not None and shutil.which("taskset") is None:
            cpu = None
        a = App(self.artifacts.app, steps, e, self.dir / f"app{self._n}.stderr", lookup, ptds, cuda_version,
                cpu)
        self.apps.append(a)
        return a

    def run(self, *steps, timeout: float = 30.0, **kw) -> App:
        """Run an app to completion; asserts it exited with 0."""
        a = self.app(*steps, **kw)
        rc = a.finish(timeout)
        assert rc == 0, f"cuda_app exited with {rc}; lines: {a.lines}\nstderr: {a.stderr()}"
        return a

    def teardown(self):
        for a in self.apps:
            a.close()
        for s in self.schedulers:
            s.stop()


def new_world(artifacts: Artifacts, library: Path) -> World:
    # short path: a Unix socket path must fit in 108 bytes
    d = Path(tempfile.mkdtemp(prefix="nvs-"))
    return World(artifacts, library, d, d / "s.sock", MockLog(d / "mock.jsonl"))

"""nvshare-run --gpus N|auto: CUDA_VISIBLE_DEVICES from the scheduler's placement on a node of four
fake GPUs with known load (place_load.py), N read from torchrun-like commands, and the refusals."""

import json
import os
import sys

import pytest

from place_load import ARGS, FOUR, ORDER, loaded_gpus
from sched_harness import FAKE_NVML, SRC, uuid
from test_cli_run import PRINT_ENV, _stop, child_environment, fake_lib, run  # noqa: F401 (a fixture)
from xpushare.cli import run_gpus
from xpushare.cli.client import CtlClient

PRINT = "import os, json; print(json.dumps(dict(os.environ)))"


@pytest.fixture(autouse=True)
def no_choice_made(monkeypatch):
    """The runs start from an environment that has not chosen GPUs already."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


@pytest.fixture
def node(start_scheduler):
    s = start_scheduler(*ARGS, nvml=FOUR)
    with loaded_gpus(s.sock):
        yield s


@pytest.fixture
def launchers(tmp_path):
    """A `torchrun` on PATH and a torch.distributed.run module on PYTHONPATH, each printing the
    environment it got as JSON: the environment to run them with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{PRINT}'\n")
    torchrun.chmod(0o755)
    module = tmp_path / "py" / "torch" / "distributed"
    module.mkdir(parents=True)
    for init in (module / "__init__.py", module.parent / "__init__.py"):
        init.write_text("")
    (module / "run.py").write_text(PRINT + "\n")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": f"{tmp_path / 'py'}:{SRC}"}


def visible(r) -> list[str]:
    return child_environment(r)["CUDA_VISIBLE_DEVICES"].split(",")


def test_n_least_loaded_gpus_by_uuid(fake_lib, node):
    r = run("--socket", node.sock, "--gpus", "2", "--", *PRINT_ENV, lib=fake_lib)
    assert visible(r) == [uuid(2), uuid(3)]
    assert "CUDA_DEVICE_ORDER" not in child_environment(r)  # UUIDs: the order is CUDA's business
    (line,) = r.stderr.splitlines()
    assert line.startswith("nvshare-run: GPUs 2,3 (--gpus 2; least loaded: gpu 2: 80GiB free of "
                           "80GiB, 0 waiting, 0 holding, compute 0 committed; gpu 3: "), line


def test_one_gpu_and_every_gpu(fake_lib, node):
    r = run("--socket", node.sock, "--gpus", "1", "--", *PRINT_ENV, lib=fake_lib)
    assert visible(r) == [uuid(2)] and r.stderr.startswith("nvshare-run: GPU 2 (--gpus 1; ")
    r = run("--socket", node.sock, "--gpus", "4", "--", *PRINT_ENV, lib=fake_lib)
    assert visible(r) == [uuid(i) for i in ORDER]


@pytest.mark.parametrize("launcher,count", [
    (["torchrun", "--nnodes", "1", "--nproc-per-node", "3", "train.py", "--lr", "1"], 3),
    (["torchrun", "--nproc_per_node=2", "train.py"], 2),
    (["torchrun", "--standalone", "--nproc-per-node=gpu", "train.py"], 4),
    (["torchrun", "--nproc_per_node", "auto", "train.py"], 4),
    (["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], 2),
    (["python", "-mtorch.distributed.run", "--nproc-per-node=3", "train.py"], 3),
], ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_auto_reads_torchrun(fake_lib, node, launchers, launcher, count):
    cmd = [sys.executable if launcher[0] == "python" else launcher[0], *launcher[1:]]
    r = run("--socket", node.sock, "--gpus", "auto", "--", *cmd, lib=fake_lib, env=launchers)
    assert visible(r) == [uuid(i) for i in ORDER[:count]], r.stderr
    assert "torchrun --nproc-per-node" in r.stderr


def test_auto_reads_local_world_size_else_takes_one(fake_lib, node):
    r = run("--socket", node.sock, "--gpus", "auto", "--", *PRINT_ENV, lib=fake_lib,
            env={"LOCAL_WORLD_SIZE": "3"})
    assert visible(r) == [uuid(i) for i in ORDER[:3]] and "(LOCAL_WORLD_SIZE=3;" in r.stderr
    r = run("--socket", node.sock, "--gpus", "auto", "--", *PRINT_ENV, lib=fake_lib)
    assert visible(r) == [uuid(2)]


def test_cuda_visible_devices_already_set_is_refused(fake_lib, node):
    for value in ("0,1", ""):
        r = run("--socket", node.sock, "--gpus", "2", "--", "echo", "ran", lib=fake_lib,
                env={"CUDA_VISIBLE_DEVICES": value})
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert "usage: nvshare-run" in r.stderr
        assert f"--gpus chooses CUDA_VISIBLE_DEVICES, which is already set ({value!r})" in r.stderr


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", "", "٣", "2x"])
def test_bad_values_are_usage_errors(fake_lib, value):
    r = run(f"--gpus={value}", "--", "echo", "ran", lib=fake_lib)
    assert r.returncode == 2 and r.stdout == ""
    assert "usage: nvshare-run" in r.stderr and "a positive number of GPUs, or auto" in r.stderr


@pytest.mark.parametrize("env,launcher,text", [
    ({}, ["torchrun", "--nproc-per-node", "cpu", "train.py"],
     "torchrun --nproc-per-node cpu names no number of GPUs"),
    ({"LOCAL_WORLD_SIZE": "two"}, ["echo", "ran"], "LOCAL_WORLD_SIZE='two' is not a positive"),
])
def test_auto_with_a_count_it_cannot_use_is_a_usage_error(fake_lib, launchers, env, launcher, text):
    r = run("--gpus", "auto", "--", *launcher, lib=fake_lib, env={**launchers, **env})
    assert r.returncode == 2 and r.stdout == "" and text in r.stderr, r.stderr


def test_no_scheduler_means_the_command_does_not_run(fake_lib, sockdir):
    sock = sockdir / "none" / "s.sock"
    r = run("--no-start", "--socket", sock, "--gpus", "1", "--", "echo", "ran", lib=fake_lib)
    assert r.returncode == 1 and r.stdout == ""
    assert "error: --gpus needs a scheduler to choose GPUs: no scheduler is running" in r.stderr


def test_more_gpus_than_the_node_has_is_refused(fake_lib, node):
    r = run("--socket", node.sock, "--gpus", "5", "--", "echo", "ran", lib=fake_lib)
    assert r.returncode == 1 and r.stdout == ""
    assert ("the scheduler cannot place the command: asked for 5 GPUs, but the scheduler knows 4 "
            "it can place on (0, 1, 2, 3)") in r.stderr


def test_a_scheduler_it_starts_places_too(fake_lib, sockdir):
    """No scheduler answers: nvshare-run starts one (on four idle fake GPUs), then asks it."""
    sock = sockdir / "run" / "s.sock"
    r = run("--socket", sock, "--gpus", "2", "--", *PRINT_ENV, lib=fake_lib,
            env={"PYTHONPATH": f"{FAKE_NVML}:{SRC}", "FAKE_NVML_GPUS": json.dumps(FOUR)})
    try:
        assert "started a scheduler" in r.stderr
        assert visible(r) == [uuid(0), uuid(1)]  # idle: by index
    finally:
        with CtlClient(sock) as c:
            _stop(c.request("status")["scheduler"]["pid"])


@pytest.mark.parametrize("cmd,args", [
    (["torchrun", "--nproc-per-node", "2", "t.py"], ["--nproc-per-node", "2", "t.py"]),
    (["/usr/bin/python3", "-u", "-m", "torch.distributed.launch", "x"], ["x"]),
    (["python3", "-m", "pip", "install"], None),
    (["python3", "train.py", "-m", "torch.distributed.run"], None),
    (["bash", "-c", "torchrun"], None),
    ([], None),
])
def test_torch_launcher_args(cmd, args):
    assert run_gpus.torch_launcher_args(cmd) == args


def test_summary_and_devices_of_a_reply():
    reply = {"gpus": [{"index": 1, "uuid": uuid(1)}, {"index": None, "uuid": uuid(7)}],
             "why": ["a", "b"]}
    assert run_gpus.visible_devices(reply) == f"{uuid(1)},{uuid(7)}"
    assert run_gpus.summary(reply, "x") == f"GPUs 1,{uuid(7)} (x; least loaded: a; b)"

"""Per-pod GPU settings from annotations: parsing (table-driven, and at the edges of
tests/quota_edges.py that nvsharectl and the library's environment are checked at too). The node's
pod watch against a fake API server is in test_k8s_pod_watch.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import xpushare
from xpushare.kubernetes.pod_settings import (COMPUTE_LIMIT, COMPUTE_SHARE, MEMORY_LIMIT,
                                              PodKey, PodSettings, enabled_from_env, parse_annotations,
                                              pod_key)
from xpushare.kubernetes.pod_watch import PodSettingsWatcher
from tests.quota_edges import COMPUTE_LIMIT_EDGES, COMPUTE_SHARE_EDGES, MEMORY_LIMIT_EDGES, U64

GiB = 1024 ** 3
MiB = 1024 ** 2

# ---------------------------------------------------------------------------------------------
# parsing

VALID = [
    (COMPUTE_LIMIT, "50", "compute_limit", 50.0),
    (COMPUTE_LIMIT, "1", "compute_limit", 1.0),
    (COMPUTE_LIMIT, "0.1", "compute_limit", 0.1),
    (COMPUTE_LIMIT, "0.5%", "compute_limit", 0.5),
    (COMPUTE_LIMIT, "100", "compute_limit", 100.0),
    (COMPUTE_LIMIT, "12.5", "compute_limit", 12.5),
    (COMPUTE_LIMIT, " 75% ", "compute_limit", 75.0),
    (COMPUTE_LIMIT, "none", "compute_limit", None),
    (COMPUTE_LIMIT, "None", "compute_limit", None),
    (COMPUTE_SHARE, "1", "compute_share", 1.0),
    (COMPUTE_SHARE, "2.5", "compute_share", 2.5),
    (COMPUTE_SHARE, "0.1", "compute_share", 0.1),
    (COMPUTE_SHARE, "1000", "compute_share", 1000.0),
    (COMPUTE_SHARE, "0.001", "compute_share", 0.001),
    (COMPUTE_SHARE, "1000000", "compute_share", 1e6),
    (MEMORY_LIMIT, "4GiB", "memory_limit", 4 * GiB),
    (MEMORY_LIMIT, "512MiB", "memory_limit", 512 * MiB),
    (MEMORY_LIMIT, "16G", "memory_limit", 16 * GiB),
    (MEMORY_LIMIT, "1.5GiB", "memory_limit", 3 * GiB // 2),
    (MEMORY_LIMIT, "1073741824", "memory_limit", GiB),
    (MEMORY_LIMIT, str(U64), "memory_limit", U64),
    (MEMORY_LIMIT, "none", "memory_limit", None),
    (MEMORY_LIMIT, "NONE", "memory_limit", None),
]

INVALID = [
    (COMPUTE_LIMIT, "0"), (COMPUTE_LIMIT, "0.09"), (COMPUTE_LIMIT, "101"), (COMPUTE_LIMIT, "150%"),
    (COMPUTE_LIMIT, "-10"), (COMPUTE_LIMIT, "half"), (COMPUTE_LIMIT, ""), (COMPUTE_LIMIT, "nan"),
    (COMPUTE_LIMIT, "inf"), (COMPUTE_LIMIT, "1e2"), (COMPUTE_LIMIT, "50%%"),
    (COMPUTE_SHARE, "0"), (COMPUTE_SHARE, "-1"), (COMPUTE_SHARE, "none"), (COMPUTE_SHARE, "heavy"),
    (COMPUTE_SHARE, ""), (COMPUTE_SHARE, "inf"), (COMPUTE_SHARE, "1e3"), (COMPUTE_SHARE, "0.0005"),
    (COMPUTE_SHARE, "1000001"),
    (MEMORY_LIMIT, "0"), (MEMORY_LIMIT, "0GiB"), (MEMORY_LIMIT, "4 gigs"), (MEMORY_LIMIT, "-1GiB"),
    (MEMORY_LIMIT, "4PiB"), (MEMORY_LIMIT, ""), (MEMORY_LIMIT, "lots"), (MEMORY_LIMIT, "16777216TiB"),
]

ACCEPTED_WORDS = {COMPUTE_LIMIT: "from 0.1 to 100", COMPUTE_SHARE: "from 0.001 to 1000000",
                  MEMORY_LIMIT: f"from 1 to {U64} bytes"}


@pytest.mark.parametrize("annotation,text,field,expected", VALID)
def test_valid_values(annotation, text, field, expected):
    settings, problems = parse_annotations({annotation: text, "other.io/x": "y"})
    assert problems == []
    assert getattr(settings, field) == expected
    assert settings.annotated == frozenset({field})
    others = {"compute_limit", "compute_share", "memory_limit"} - {field}
    assert all(getattr(settings, f) is None for f in others)


@pytest.mark.parametrize("annotation,text", INVALID)
def test_invalid_values_keep_the_previous_value(annotation, text):
    previous, _ = parse_annotations({COMPUTE_LIMIT: "40", COMPUTE_SHARE: "3", MEMORY_LIMIT: "2GiB"})
    settings, problems = parse_annotations({COMPUTE_LIMIT: "40", COMPUTE_SHARE: "3", MEMORY_LIMIT: "2GiB",
                                            annotation: text}, previous)
    assert settings == previous
    (p,) = problems
    assert p.annotation == annotation and p.value == text
    assert annotation in p.message and repr(text) in p.message and ACCEPTED_WORDS[annotation] in p.message
    assert "previous value" in p.message


@pytest.mark.parametrize("annotation,text", INVALID)
def test_invalid_value_without_a_previous_one_sets_nothing(annotation, text):
    settings, problems = parse_annotations({annotation: text})
    assert settings == PodSettings() and settings.annotated == frozenset()
    assert len(problems) == 1 and "ignored" in problems[0].message


SHARED_EDGES = [(COMPUTE_LIMIT, text, ok) for text, ok in COMPUTE_LIMIT_EDGES] + \
               [(COMPUTE_SHARE, text, ok) for text, ok in COMPUTE_SHARE_EDGES] + \
               [(MEMORY_LIMIT, text, ok) for text, ok in MEMORY_LIMIT_EDGES]


@pytest.mark.parametrize("annotation,text,accepted", SHARED_EDGES)
def test_annotations_accept_the_edges_every_interface_accepts(annotation, text, accepted):
    settings, problems = parse_annotations({annotation: text})
    assert (problems == []) == accepted, problems
    if not accepted:
        assert ACCEPTED_WORDS[annotation] in problems[0].message


def test_the_annotation_parser_imports_nothing_of_the_running_scheduler():
    code = ("import sys, xpushare.kubernetes.pod_settings; "
            "print(' '.join(m for m in sys.modules if m.startswith(('xpushare.scheduler', "
            "'xpushare.wire.'))))")
    src = str(Path(xpushare.__file__).resolve().parents[1])  # this checkout's, installed or not
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": src}, timeout=60).stdout.split()
    assert "xpushare.wire.quota_ranges" in loaded  # the ranges come from the contract
    assert not [m for m in loaded if m.startswith("xpushare.scheduler")]


def test_absent_annotations_and_removal():
    assert parse_annotations(None) == (PodSettings(), [])
    assert parse_annotations({}) == (PodSettings(), [])
    previous, _ = parse_annotations({COMPUTE_LIMIT: "40", MEMORY_LIMIT: "1GiB"})
    settings, problems = parse_annotations({MEMORY_LIMIT: "1GiB"}, previous)  # limit removed
    assert problems == [] and settings.compute_limit is None and settings.memory_limit == GiB
    assert settings.annotated == frozenset({"memory_limit"})


def test_effective_precedence_over_the_environment():
    settings, _ = parse_annotations({COMPUTE_LIMIT: "none", MEMORY_LIMIT: "1GiB"})
    assert settings.effective("compute_limit", 30.0) is None       # "none" overrides the env's cap
    assert settings.effective("memory_limit", 8 * GiB) == GiB       # the annotation wins
    assert settings.effective("compute_share", 2.0) == 2.0          # absent: the env's value
    with pytest.raises(KeyError):
        settings.effective("bogus", 1)
    assert str(settings) == "gpu-compute-limit=none, gpu-memory-limit=1GiB"


def test_long_bad_values_are_shortened_in_messages():
    _, (p,) = parse_annotations({MEMORY_LIMIT: "x" * 10000})
    assert p.value == "x" * 10000 and len(p.message) < 300


def test_pod_key_and_mirror_pods():
    pod = {"metadata": {"uid": "u-1", "namespace": "ns", "name": "p"}}
    assert pod_key(pod) == PodKey("u-1", "ns", "p") and str(pod_key(pod)) == "ns/p"
    mirror = {"metadata": {"uid": "u-2", "namespace": "kube-system", "name": "etcd-n",
                           "annotations": {"kubernetes.io/config.mirror": "2f8c5d1e9a7b3c4d6e0f1a2b3c4d5e6f"}}}
    assert pod_key(mirror).uid == "2f8c5d1e9a7b3c4d6e0f1a2b3c4d5e6f"   # the UID in the static pod's cgroup
    assert pod_key({"metadata": {}}) is None


def test_enabled_from_env():
    assert enabled_from_env({"NVSHARE_POD_ANNOTATIONS": "on"})
    assert enabled_from_env({"NVSHARE_POD_ANNOTATIONS": "1"})
    assert not enabled_from_env({"NVSHARE_POD_ANNOTATIONS": "off"})
    assert not enabled_from_env({})


def test_watcher_needs_a_node_name(monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(ValueError, match="NODE_NAME"):
        PodSettingsWatcher(lambda k, s: None, lambda k: None)
    monkeypatch.setenv("NODE_NAME", "n1")
    assert PodSettingsWatcher(lambda k, s: None, lambda k: None).field_selector == "spec.nodeName=n1"

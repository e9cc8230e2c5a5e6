"""bench/core/cpus.py: programs set apart on physical cores of their own, read from a fake sysfs."""

from __future__ import annotations

from bench.core.cpus import physical_cores, set_apart


def _sysfs(root, topology: dict[int, tuple[int, int]]):
    for cpu, (package, core) in topology.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    return root


def test_hardware_threads_of_one_core_are_grouped(tmp_path):
    # 4 cores with 2 threads each, numbered as Linux does on most machines: cpu i and i + 4
    sysfs = _sysfs(tmp_path, {i: (0, i % 4) for i in range(8)})
    assert physical_cores(set(range(8)), sysfs) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert physical_cores({1, 2, 5}, sysfs) == [[1, 5], [2]]


def test_each_role_gets_a_whole_core_and_never_the_first(tmp_path):
    sysfs = _sysfs(tmp_path, {i: (i // 8, i % 4) for i in range(16)})  # 2 packages
    cpus = set_apart(["server", "trainer"], set(range(16)), sysfs)
    assert cpus["server"] == [1, 5] and cpus["trainer"] == [2, 6]
    given = cpus["server"] + cpus["trainer"]
    assert 0 in cpus["rest"] and not set(given) & set(cpus["rest"])
    assert sorted(given + cpus["rest"]) == list(range(16))


def test_too_few_cores_sets_nothing_apart(tmp_path):
    sysfs = _sysfs(tmp_path, {i: (0, i % 3) for i in range(6)})
    assert set_apart(["server", "trainer"], set(range(6)), sysfs) is None
    # unreadable topology: each CPU its own core
    assert physical_cores({0, 1}, tmp_path / "none") == [[0], [1]]

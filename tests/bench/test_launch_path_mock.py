"""bench/launch/launch_path_mock.py end to end with a few launches: it builds the mock and the test
program, runs them natively and under the library with a scheduler in mode off, and reports each
library's ns per launch and the added ns over the native process; bad flags print usage."""

from __future__ import annotations

import json

import pytest

from bench.launch import launch_path_mock
from testkit.build import native_library


def test_a_short_run_reports_every_library_against_native(tmp_path, capsys):
    lib = native_library()
    out = tmp_path / "r.json"
    assert launch_path_mock.main(["--launches", "2000", "--rounds", "2", "--library", f"a={lib}",
                                  "--library", f"b={lib}", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [list(r) for r in result["rounds"]] == [["native", "a", "b"], ["a", "b", "native"]]
    assert set(result["summary"]) == {"native", "a", "b"}
    assert all(s["ns_per_launch"] > 0 for s in result["summary"].values())
    assert "added ns" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--launches", "10"], ["--rounds", "0"], ["--library", "nolabel"],
                                 ["--library", "x=/no/such/file"], ["--library", "native=/bin/sh"]])
def test_bad_flags_print_usage(bad, capsys):
    with pytest.raises(SystemExit) as e:
        launch_path_mock.parse_args(bad)
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err

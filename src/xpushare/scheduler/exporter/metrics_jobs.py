"""The exporter's job series (docs/metrics.md, Jobs): the jobs nvsharectl status shows, copied out
of policy/gang.py's records a piece at a time like the clients (metrics_collect.take_pieces).

Only jobs of more than one member or GPU, or of a known size, have series (status.job_shown, the same
rule as status and top): every process alone is a job of its own, and a set of series for each would
double the scrape for nothing the client series do not already say.

The job's name is the label `job_name`, not `job`: Prometheus gives every series of a target a `job`
label (the scrape's), which a `job` label of ours would either overwrite (honorLabels) or be renamed
away from (exported_job).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

from ..control.status import job_shown as shown  # one rule for which jobs are news, wherever they are shown

JOB = ("job_name", "kind")
TAKE_JOBS = 500  # jobs looked at between two returns to the loop (a few attribute reads each)


class JobRow(NamedTuple):
    labels: tuple[str, str]   # JOB
    members: int
    gpus: int
    state: str                # policy/gangmodel.Phase's value


def take_jobs(registry, rows: list[JobRow]) -> Iterator[None]:
    """Append the shown jobs' rows to `rows`, yielding after each TAKE_JOBS jobs looked at (most
    are processes alone, looked at and left out)."""
    jobs = list(registry.gangs.jobs.values())
    for start in range(0, len(jobs), TAKE_JOBS):
        for j in jobs[start:start + TAKE_JOBS]:
            if shown(j):
                rows.append(JobRow((j.label, j.key[0]), len(j.members), len(j.seats),
                                   j.phase.value))
        yield


def _members(rows):
    family = GaugeMetricFamily("xpushare_job_members", "Client processes in the job.", labels=JOB)
    for r in rows:
        family.add_metric(r.labels, r.members)
    return family


def _gpus(rows):
    family = GaugeMetricFamily("xpushare_job_gpus", "GPUs the job's members attached, together.",
                               labels=JOB)
    for r in rows:
        family.add_metric(r.labels, r.gpus)
    return family


def _state(rows):
    # An info series, as the GPU's mode is (xpushare_gpu_mode_info): one sample, the state a label.
    family = InfoMetricFamily("xpushare_job_state", "The job's state: idle, acquiring (its GPUs, "
                              "one after another), running, dropping.", labels=JOB)
    for r in rows:
        family.add_metric(r.labels, {"state": r.state})
    return family


JOB_FAMILIES = ((_members, 1), (_gpus, 1), (_state, 1))  # as metrics_collect._CLIENT_FAMILIES

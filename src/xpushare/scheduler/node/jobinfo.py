"""Which multi-process job a client belongs to: the JOB message (docs/protocol.md, `job`) checked
and kept as a JobInfo on its connection (`Conn.job_info`), for a policy that grants a job's GPUs
together.

The record is what the client said, cleaned: strings as text, sizes and ranks that cannot be true
turned into None (unknown) rather than refused, so that a job too large for our bounds is still
scheduled, only not as a group of known size. What cannot name a job at all (an unknown kind, a
kind without its key) is a ProtocolError.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...wire.protocol import JOB_EXPLICIT, JOB_TORCH, JOB_UNKNOWN, Job, ProtocolError

MAX_WORLD_SIZE = 1 << 20     # processes in one job, all nodes: beyond any real run
MAX_LOCAL_WORLD_SIZE = 4096  # of them on one node: far above the GPUs a node has
KINDS = {JOB_EXPLICIT: "explicit", JOB_TORCH: "torch"}


@dataclass(frozen=True)
class JobInfo:
    """kind: JOB_EXPLICIT (NVSHARE_JOB) or JOB_TORCH; name: NVSHARE_JOB, or TORCHELASTIC_RUN_ID
    (may be ""); rendezvous: "MASTER_ADDR:MASTER_PORT" (JOB_TORCH), else "". None: not known."""
    kind: int
    name: str
    rendezvous: str
    world_size: int | None
    local_world_size: int | None
    rank: int | None
    local_rank: int | None

    def describe(self) -> str:
        """One log line's words: kind, name, rank/world size ('?' for unknown)."""
        def num(v):
            return "?" if v is None else str(v)
        where = f" at {self.rendezvous}" if self.rendezvous else ""
        return (f"kind={KINDS[self.kind]} name={self.name!r}{where} rank={num(self.rank)}/"
                f"{num(self.world_size)} local_rank={num(self.local_rank)}/"
                f"{num(self.local_world_size)}")


def _text(value: str) -> str:
    # messages.py already decoded the field as UTF-8 (bad bytes replaced) up to its first NUL;
    # a NUL inside can only come from a client that did not pad, so cut there as well.
    return value.split("\0", 1)[0]


def _size(value: int, bound: int) -> int | None:
    return value if 0 < value <= bound else None


def _rank(value: int, size: int | None) -> int | None:
    if value == JOB_UNKNOWN or (size is not None and value >= size):
        return None
    return value


def job_info(msg: Job) -> tuple[JobInfo, list[str]]:
    """The record of a JOB and what in it was set aside as unknown (for one warning); ProtocolError
    when it names no job."""
    if msg.kind not in KINDS:
        raise ProtocolError(f"JOB of unknown kind {msg.kind}")
    name, rendezvous = _text(msg.name), _text(msg.rendezvous)
    if msg.kind == JOB_EXPLICIT and not name:
        raise ProtocolError("JOB of kind explicit without a name")
    if msg.kind == JOB_TORCH and not rendezvous:
        raise ProtocolError("JOB of kind torch without a rendezvous")
    dropped = []
    world = _size(msg.world_size, MAX_WORLD_SIZE)
    local = _size(msg.local_world_size, min(MAX_LOCAL_WORLD_SIZE, world or MAX_LOCAL_WORLD_SIZE))
    rank, local_rank = _rank(msg.rank, world), _rank(msg.local_rank, local)
    for field, sent, kept, unknown in (("world_size", msg.world_size, world, 0),
                                       ("local_world_size", msg.local_world_size, local, 0),
                                       ("rank", msg.rank, rank, JOB_UNKNOWN),
                                       ("local_rank", msg.local_rank, local_rank, JOB_UNKNOWN)):
        if kept is None and sent != unknown:
            dropped.append(f"{field}={sent}")
    info = JobInfo(msg.kind, name, "" if msg.kind == JOB_EXPLICIT else rendezvous, world, local,
                   rank, local_rank)
    return info, dropped

"""node/slicer.py: jobs take turns a slice each, an urgent one (an admin's request) every other
slice while others wait; a message read in a turn is handled before that turn's slice. The order in
which jobs finish, and an event log of steps and reads, are the witnesses."""

import asyncio
import socket

from xpushare.scheduler.node import slicer


def _job(name: str, steps: int, log: list | None = None):
    for i in range(steps):
        if log is not None:
            log.append(f"{name}{i}")
        yield
    return name


def _run(jobs, expect: int, slice_s: float = 0.0):
    """Run the jobs ((name, steps, urgent), or a callable(loop, slicer, done) submitting more) until
    `expect` are done; the names in the order they finished."""
    finished: list[str] = []

    async def run():
        loop = asyncio.get_running_loop()
        s = slicer.Slicer()
        all_done = loop.create_future()

        def done(name):
            finished.append(name)
            if len(finished) == expect and not all_done.done():
                all_done.set_result(None)
        for job in jobs:
            if callable(job):
                job(loop, s, done)
            else:
                name, steps, urgent = job
                s.submit(loop, _job(name, steps), done, urgent=urgent)
            await asyncio.sleep(0)
        await asyncio.wait_for(all_done, 10)
        assert len(s) == 0

    asyncio.run(run())
    return finished


def test_an_urgent_job_finishes_before_the_others_waiting_and_a_short_one_waits_for_none(monkeypatch):
    monkeypatch.setattr(slicer, "SLICE_S", 0.0)  # one step a turn
    finished = _run([("a", 20, False), ("b", 20, False), ("c", 20, False), ("root", 20, True),
                     ("d", 1, False)], expect=5)
    # root: every other slice; d: its one step in its first turn, not after a, b and c whole
    assert finished == ["d", "root", "a", "b", "c"]


def test_an_admin_asking_back_to_back_does_not_hold_other_users_replies(monkeypatch):
    """Each of root's replies sent, its next request comes (conn.resume reads it): with urgent jobs
    always first, the users' replies waited for all of root's requests."""
    monkeypatch.setattr(slicer, "SLICE_S", 0.0)
    chain = iter(range(1, 6))

    def root(loop, s, done):
        def again(name):
            done(name)
            n = next(chain, None)
            if n is not None:
                s.submit(loop, _job(f"root{n}", 10), again, urgent=True)
        s.submit(loop, _job("root0", 10), again, urgent=True)

    finished = _run([root, ("user1", 15, False), ("user2", 15, False)], expect=8)
    assert finished.index("user1") < finished.index("root2")
    assert finished.index("user2") < finished.index("root2")


def test_a_message_read_in_a_turn_is_handled_before_that_turns_slice(monkeypatch):
    """A lock request that arrives while a reply is being built is read and answered before the
    next slice of it: the step after its arrival comes after its read in the event log."""
    monkeypatch.setattr(slicer, "SLICE_S", 0.0)
    log: list[str] = []
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    def steps():
        for i in range(6):
            log.append(f"step{i}")
            if i == 2:
                b.send(b"x")  # the peer's request, there at the next poll
            yield
        return "status"

    async def run():
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        loop.add_reader(a.fileno(), lambda: log.append(f"read {a.recv(1).decode()}"))
        slicer.Slicer().submit(loop, steps(), finished.set_result)
        await asyncio.wait_for(finished, 10)
        loop.remove_reader(a.fileno())

    try:
        asyncio.run(run())
    finally:
        a.close()
        b.close()
    assert log.index("read x") == log.index("step2") + 1, log

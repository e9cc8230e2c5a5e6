"""node/slicer.py: jobs run a slice per turn of the loop, oldest first, an urgent one (an admin's
request) before all that are not: the order in which they finish is the witness."""

import asyncio

from xpushare.scheduler.node import slicer


def _job(name: str, steps: int):
    for _ in range(steps):
        yield
    return name


def test_an_urgent_job_finishes_before_the_others_waiting(monkeypatch):
    monkeypatch.setattr(slicer, "SLICE_S", 0.0)  # one step a turn
    finished: list[str] = []

    async def run():
        loop = asyncio.get_running_loop()
        s = slicer.Slicer()
        all_done = loop.create_future()

        def done(name):
            finished.append(name)
            if len(finished) == 5 and not all_done.done():
                all_done.set_result(None)
        for name in ("a", "b", "c"):
            s.submit(loop, _job(name, 20), done)
        await asyncio.sleep(0)  # a's first steps are done
        s.submit(loop, _job("root", 20), done, urgent=True)
        s.submit(loop, _job("d", 1), done)
        await asyncio.wait_for(all_done, 10)
        assert len(s) == 0

    asyncio.run(run())
    assert finished == ["root", "a", "b", "c", "d"]

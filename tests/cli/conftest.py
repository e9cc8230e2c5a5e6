from sched_fixtures import scheduler, sockdir, start_scheduler  # noqa: F401

"""Process harness shared by the tests and the benchmarks: starting schedulers and programs natively
or under libnvshare.so, waiting for conditions, and the GPU safety checks.

tests/ imports it as `testkit` (pytest puts the repository root on sys.path); bench/ puts the
repository root on sys.path itself. It is not part of the installed xpushare package.
"""

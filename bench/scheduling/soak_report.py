"""The report of bench/scheduling/soak.py: its rows of the headline table and its section of docs/benchmarks.md."""

from __future__ import annotations

from bench.core.render import dig, error_of, error_row, f, goal_row, num

RSS_GOAL_BYTES = 10_000_000  # 10 MB
PROBE_GOAL_US = 10_000.0


def _mb(kib) -> str:
    v = num(kib)
    return "—" if v is None else f"{v * 1024 / 1e6:.1f} MB"


def goals(s: dict) -> list[str]:
    if error_of(s):
        return [error_row("soak: fuzzed frames and requests", error_of(s))]
    rss = s.get("rss_kib") or {}
    probe = dig(s, "probe", "round_trip_us") or {}
    quiet = dig(s, "probe", "quiet_us") or {}
    sent = s.get("sent") or {}
    delta = num(rss.get("delta"))
    what = f"{sent.get('frames', '—')} malformed frames, {sent.get('requests', '—')} fuzzed control requests"
    failures = dig(s, "probe", "failures") or []
    probe_max = num(probe.get("max"))
    logged = (num(dig(s, "log", "Traceback")) or 0) + (num(dig(s, "log", "internal error")) or 0)
    return [
        goal_row(f"soak ({what}): the daemon's RSS, end − start", f"{_mb(delta)} (start {_mb(rss.get('start'))}, "
                 f"max {_mb(rss.get('max'))}, end {_mb(rss.get('end'))})", f"{_mb(rss.get('start'))} (start)",
                 f"{f(num(rss.get('end')) / num(rss.get('start')) if num(rss.get('start')) and num(rss.get('end')) else None, 3)}x",
                 "≤ 10 MB", None if delta is None else delta * 1024 <= RSS_GOAL_BYTES),
        goal_row("soak: a probe's lock round trip (a cycle every 20 ms) during the fuzz, max",
                 f"max {f(probe_max / 1e3 if probe_max is not None else None, 2)} ms (p50 {f(probe.get('p50'))} µs, "
                 f"p99 {f(probe.get('p99'))} µs, {probe.get('n', '—')} cycles"
                 f"{', ' + str(len(failures)) + ' failed' if failures else ''})",
                 f"p50 {f(quiet.get('p50'))} µs, max {f(quiet.get('max'))} µs (the probe alone)",
                 f"{f(probe.get('p50') / quiet['p50'] if num(probe.get('p50')) and num(quiet.get('p50')) else None, 1)}x p50",
                 "every grant ≤ 10 ms", None if probe_max is None else (probe_max <= PROBE_GOAL_US and not failures)),
        goal_row("soak: \"Traceback\" or \"internal error\" in the daemon's log", f"{logged:.0f} "
                 f"(log: {dig(s, 'log', 'lines')} lines)", "—", "—", "none", logged == 0 and s.get("alive_at_end") is True),
    ]


def section(s: dict) -> str:
    p = s.get("parameters") or {}
    sent = s.get("sent") or {}
    rss = s.get("rss_kib") or {}
    pr = s.get("probe") or {}
    rows = ["| measured | value |", "|---|---|",
            f"| malformed frames sent (each on a connection of its own) | {sent.get('frames')} ({sent.get('closed_by_scheduler')} "
            f"closed by the scheduler, {sent.get('timeouts')} timed out, {sent.get('refused')} refused or reset) |",
            f"| fuzzed control requests sent / answered / malformed replies | {sent.get('requests')} / {sent.get('answered')} / "
            f"{sent.get('bad_replies')} on {sent.get('request_connections')} connections |",
            f"| fuzz duration | {f(s.get('fuzz_seconds'))} s |",
            f"| daemon RSS start / max / end (delta) | {_mb(rss.get('start'))} / {_mb(rss.get('max'))} / "
            f"{_mb(rss.get('end'))} ({_mb(rss.get('delta'))}) |",
            f"| daemon RSS growth in the first / second half of the fuzz | "
            f"{' / '.join(_mb(v) for v in rss.get('growth_by_half') or [None, None])} |",
            f"| probe round trip during the fuzz p50 / p99 / max | {f(dig(pr, 'round_trip_us', 'p50'))} / "
            f"{f(dig(pr, 'round_trip_us', 'p99'))} / {f(dig(pr, 'round_trip_us', 'max'))} µs "
            f"({dig(pr, 'round_trip_us', 'n')} cycles, {pr.get('over_10ms')} over 10 ms) |",
            f"| probe alone before the fuzz p50 / p99 / max | {f(dig(pr, 'quiet_us', 'p50'))} / "
            f"{f(dig(pr, 'quiet_us', 'p99'))} / {f(dig(pr, 'quiet_us', 'max'))} µs |",
            f"| probe after the fuzz and the restore p50 / max | {f(dig(pr, 'after_us', 'p50'))} / "
            f"{f(dig(pr, 'after_us', 'max'))} µs ({dig(pr, 'after_us', 'n')} cycles) |",
            f"| probe cycles over 10 ms: when (s after the fuzz began), how long (µs) | "
            f"{', '.join(f'{t} s: {v}' for t, v in (pr.get('slow') or [])[:20]) or 'none'} |",
            f"| probe failures | {len(pr.get('failures') or [])} {'; '.join(pr.get('failures') or [])[:300]} |",
            f"| \"Traceback\" / \"internal error\" in the log | {dig(s, 'log', 'Traceback')} / "
            f"{dig(s, 'log', 'internal error')} ({dig(s, 'log', 'lines')} lines) |",
            f"| daemon alive at the end; settings restored | {s.get('alive_at_end')}; {s.get('restored')} |",
            f"| GPUs the daemon learnt from clients' ATTACH (its log); its status reply at the end | "
            f"{dig(s, 'log', 'gpus_learnt')}; {s.get('gpus_known_at_end')} |"]
    return "\n".join(rows) + (
        "\n\nOne `nvshare-scheduler` (`--no-nvml --gpu-memory 16GiB`, mode auto, no `--log-locks`). The fuzz "
        "(testkit/fuzz.py, seed " f"{p.get('seed')}) is sent by {p.get('workers')} threads of one process: each "
        "malformed frame on a connection of its own, half of them after a valid HELLO + ATTACH; the control "
        f"requests {p.get('requests_per_connection')} to a connection, every reply read. The fuzz runs as the "
        "scheduler's own uid, so fuzzed set_mode / set_tq / set_gpu_memory / set_priority are carried out; the "
        "probe, a process of its own taking the lock every "
        f"{f(p.get('probe_period_ms'), 0)} ms (MEM_UPDATE 1 GiB), is on a GPU of its own, where fuzzed lock "
        "traffic never queues and no mode or quantum delays a lone client; mode, quantum and the fuzz GPU's "
        "capacity are put back at the end, and the probe is served after that too. RSS: VmRSS every second, "
        f"start just before the fuzz, end after a {f(p.get('settle_s'), 0)} s pause after it. The probe's "
        f"baseline is its own round trip in the {f(p.get('quiet_s'), 0)} s before the fuzz. Both processes share "
        "the machine's cores with the scheduler, as clients do. Load average of the machine (1/5/15 min) at "
        f"start {dig(s, 'load_average', 'start')}, at end {dig(s, 'load_average', 'end')}: near or above the "
        "number of cores, other processes competed for them, which shows most in the tails.\n")

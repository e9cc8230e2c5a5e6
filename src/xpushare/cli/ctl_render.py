"""Tables for nvsharectl status and top that fit the terminal by dropping whole columns.

A pid, a size or a quantum cut in half reads as a different value, so no cell of those is ever
shortened: when the columns do not fit, the least important ones go first. Only free text (a command
line) gives way, and then it ends in an ellipsis so the cut shows.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..inert import inert_tree
from ..wire.sizes import format_size

DEFAULT_WIDTH = 80  # of output that is not a terminal, unless --width or COLUMNS says otherwise
COMMAND_WIDTH = 60  # a command line wider than this is shortened even with room to spare
JOB_WIDTH = 40  # so is a job's name (NVSHARE_JOB, a torchrun id: up to 128 characters)
FREE_MIN = 12  # narrowest a free-text column is worth showing; below that it is dropped


_NUMBER_WORD = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) (?=[^\W\d_]|%)")
_NBSP = "\u00a0"


def wrap_hanging(text: str, width: int, indent: int) -> list[str]:
    """`text` in lines of at most `width` characters, broken between words, every line after the
    first indented by `indent` spaces (so that a label's text stays under it), and a number never
    parted from the word after it (`switch 72 ms`, `5 s`): the space between them is made
    non-breaking while wrapping."""
    glued = _NUMBER_WORD.sub(lambda m: m.group(1) + _NBSP, text)
    lines = textwrap.wrap(glued, width=max(width, indent + 10), subsequent_indent=" " * indent,
                          break_on_hyphens=False)
    return [line.replace(_NBSP, " ") for line in lines] or [text]


@dataclass
class Column:
    name: str
    rank: int  # 1 = the last to go
    free: bool = False  # free text: may be shortened with an ellipsis instead of dropped
    wrap: bool = False  # a list of words: may wrap between words, never inside one
    limit: int | None = None  # widest a free column gets even with room to spare


def _needed(col: Column, natural: int, cells: list[str]) -> int:
    if col.free:
        return min(natural, max(FREE_MIN, cell_len(col.name)))
    if col.wrap:  # its longest word, and at least its header
        return max([cell_len(col.name)] + [cell_len(w) for c in cells for w in c.split()])
    return natural


def fit_columns(columns: list[Column], rows: list[list[str]], width: int) -> tuple[list[int], dict]:
    """Which columns (their indices) fit in width, and the width given to each free or wrapping
    one. A rich table with the default box takes 3 cells per column and 1 more."""
    cells = [[r[i] for r in rows] for i in range(len(columns))]
    natural = [max([cell_len(columns[i].name)] + [cell_len(c) for c in cells[i]])
               for i in range(len(columns))]
    natural = [min(n, c.limit or n) for n, c in zip(natural, columns)]
    needed = [_needed(c, natural[i], cells[i]) for i, c in enumerate(columns)]
    keep = list(range(len(columns)))

    def total(idx):
        return sum(needed[i] + 3 for i in idx) + 1
    for i in sorted(keep, key=lambda i: -columns[i].rank):
        if total(keep) <= width or len(keep) == 1:
            break
        keep.remove(i)
    for i in sorted(set(range(len(columns))) - set(keep), key=lambda i: columns[i].rank):
        # A column dropped early comes back where it fits beside the ones kept, the more
        # important of those at their natural width (it must not make a list wrap or a name
        # shorten that fitted without it).
        squeezed = sum(natural[j] - needed[j] for j in keep if columns[j].rank < columns[i].rank)
        if total(keep + [i]) + squeezed <= width:
            keep = sorted(keep + [i])
    spare = width - total(keep)
    widths = {}
    for i in keep:  # spare room goes to the columns that gave way, in order of importance
        if columns[i].free or columns[i].wrap:
            grow = max(0, min(spare, natural[i] - needed[i]))
            widths[i], spare = needed[i] + grow, spare - grow
    return keep, widths


def fitted_table(title: str | None, columns: list[Column], rows: list[list[str]], width: int,
                 **table_args) -> Table:
    keep, widths = fit_columns(columns, rows, width)
    table = Table(title=title, title_justify="left", **table_args)
    for i in keep:
        col = columns[i]
        if col.free:
            table.add_column(col.name, no_wrap=True, overflow="ellipsis", max_width=widths[i])
        elif col.wrap:
            table.add_column(col.name, overflow="fold", max_width=widths[i], min_width=widths[i])
        else:
            table.add_column(col.name, no_wrap=True, overflow="ignore")
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    return table


def make_console(file=None, width: int | None = None, **kw) -> Console:
    """A console for the output: --width, else the terminal's width, else COLUMNS, else 80 (what
    a pipe gets, as from most tools; --width 200 or --json for everything)."""
    import os
    out = file or sys.stdout
    if width is None and not out.isatty():
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH
    # markup and emoji off: a client's GPU or job name such as "[blink]x" or ":fire:" shows as written
    console = Console(file=out, width=width, highlight=False, markup=False, emoji=False, **kw)
    console.on_broken_pipe = _reader_gone  # rich would exit 1 itself; main() answers a closed pipe
    return console


def _reader_gone() -> None:
    raise BrokenPipeError("stdout is closed")


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def tq_cell(g: dict) -> str:
    """The quantum, "auto" when it is the dynamic one: "5s auto" (never wrapped; the switch cost
    it is sized from has a column of its own)."""
    return f"{g['tq']:g}s" + (" auto" if g.get("tq_source") == "dynamic" else "")


def switch_cost_cell(g: dict) -> str:
    cost = g.get("switch_cost")
    return millis(cost) if cost else "-"


UUID_LABEL_MIN = 12  # "GPU-" and 8 hex digits: where a GPU without an index starts to be told apart


def label_gpus(status: dict) -> None:
    """Give every GPU of `status` (and every client's entry for one) the `label` it is shown by:
    its index, or for a GPU NVML did not report, the shortest prefix of its UUID (at least
    UUID_LABEL_MIN characters) that no other GPU's shares, which --gpu accepts as it is."""
    entries = [*status.get("gpus", []), *(d for c in status.get("clients", []) for d in c["gpus"])]
    uuids = {str(d.get("uuid", "")) for d in entries}
    for d in entries:
        if d.get("index") is not None:
            d["label"] = str(d["index"])
            continue
        uuid = str(d.get("uuid") or "-")
        n = min(UUID_LABEL_MIN, len(uuid))
        while n < len(uuid) and any(o != uuid and o.lower().startswith(uuid[:n].lower())
                                    for o in uuids):
            n += 1
        d["label"] = uuid[:n]


def gpu_title(g: dict) -> str:
    """"GPU 0", or the UUID label of a GPU without an index (it says GPU already)."""
    label = gpu_label(g)
    return label if label.startswith("GPU-") else f"GPU {label}"


def gpu_label(g: dict) -> str:
    """What label_gpus chose, else its index ("-" for none)."""
    return g.get("label") or ("-" if g["index"] is None else str(g["index"]))


def pod_cell(c: dict) -> str:
    pod = c.get("pod")
    if pod:
        return f"{pod['namespace']}/{pod['name']}"
    hint = c.get("pod_hint")
    return f"{hint['namespace']}/{hint['name']} (hint)" if hint else "-"


def client_bytes(c: dict) -> int:
    return sum(d["managed_bytes"] + d["other_bytes"] for d in c["gpus"])


def millis(seconds: float) -> str:
    """A switch phase: 0.4ms, 12ms, 1500ms, 12.0s."""
    if seconds >= 10:
        return f"{seconds:.1f}s"
    ms = seconds * 1000
    return f"{ms:.1f}ms" if ms < 10 else f"{ms:.0f}ms"


def last_switch_cell(g: dict, sep: str = " ") -> str:
    """The phases of the GPU's last switch (status's last_switch), those reported: "drain=3.0ms
    out=120ms in=85ms"; "-" before any switch."""
    last = g.get("last_switch")
    if not last:
        return "-"
    parts = [f"{name}={millis(last[key])}" for key, name in
             (("drain", "drain"), ("swap_out", "out"), ("swap_in", "in"))
             if last.get(key) is not None]
    return sep.join(parts) or "-"


def size_or_dash(n) -> str:
    return format_size(n) if n else "-"


def gpu_state_cell(d: dict) -> str:
    """A client's state on one GPU, "0:idle"; "0:reclaiming" while it was sent EVICT and has not
    answered."""
    state = "reclaiming" if d.get("reclaiming") else d["state"]
    return f"{gpu_label(d)}:{state}"


# rank: the order in which columns give way (the highest first) when the width is short.
GPU_COLUMNS = [Column("GPU", 1), Column("UUID", 10), Column("Name", 8, free=True),
               Column("Memory", 6), Column("Capacity", 5), Column("Resident", 11),
               Column("Swapped", 12), Column("Mode", 2), Column("TQ", 7),
               Column("Switch", 9), Column("Last switch", 13, wrap=True),
               Column("Holders", 3, wrap=True), Column("Queue", 4, wrap=True)]
CLIENT_COLUMNS = [Column("PID", 1), Column("UID", 8), Column("Priority", 3), Column("State", 2),
                  Column("Job", 5, free=True, limit=JOB_WIDTH),
                  Column("GPU", 4, wrap=True), Column("Memory", 6, wrap=True),
                  Column("Resident", 11, wrap=True), Column("Swapped", 12, wrap=True),
                  Column("GPU time", 8, wrap=True),
                  Column("Wait", 13, wrap=True), Column("Pod", 7),
                  Column("Quota", 9, wrap=True),
                  Column("Command", 10, free=True, limit=COMMAND_WIDTH)]
JOB_COLUMNS = [Column("Job", 1, free=True, limit=JOB_WIDTH), Column("Kind", 6),
               Column("State", 2), Column("Members", 3), Column("PIDs", 5, wrap=True),
               Column("GPUs", 4, wrap=True)]


def _gpu_row(g: dict) -> list[str]:
    holders = ", ".join(f"{h['pid']} ({duration(h['held_for'])}{', dropping' if h['dropping'] else ''})"
                        for h in g["holders"]) or "-"
    return [gpu_label(g), g["uuid"], g["name"] or "?",
            format_size(g["memory_total"]) if g["memory_total"] else "?",
            format_size(g["capacity"]) if g["capacity"] else "?",
            format_size(g.get("resident_bytes") or 0), size_or_dash(g.get("swapped_bytes")),
            f"{g['mode']}: {g.get('operation', '?')}", tq_cell(g), switch_cost_cell(g),
            last_switch_cell(g), holders,
            " ".join(str(p) for p in g["queue"]) or "-"]


def busy_cell(seconds) -> str:
    """A client's GPU busy time on one GPU (status's gpu_busy_seconds); "-" when not reported."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f}s"
    return f"{seconds:.1f}s" if seconds < 60 else duration(seconds)


def queueing_cell(q: dict | None) -> str:
    """A client's queueing delay on a GPU: p50/p99 of its recent waits for the lock."""
    if not q or q.get("p50") is None:
        return "-"
    return f"{millis(q['p50'])}/{millis(q['p99'])}"


def quota_cell(c: dict) -> str:
    """A client's quota (status's `quota`): "limit 50%", "share 2.5", "mem 4GiB" for what is set
    ("mem 4GiB over" when it holds more on a GPU), "held 12x 0.034s" when latency-sensitive
    clients' bursts held it, "-" for none."""
    q = c.get("quota") or {}
    parts = []
    if q.get("compute_limit") is not None:
        parts.append(f"limit {q['compute_limit']:g}%")
    if q.get("compute_share") not in (None, 1, 1.0):
        parts.append(f"share {q['compute_share']:g}")
    if q.get("latency_sensitive"):
        parts.append("latency-sensitive")
    held = c.get("held") or {}
    if held.get("count"):
        parts.append(f"held {held['count']}x {held.get('seconds', 0):.3g}s")
    if q.get("memory_limit") is not None:
        over = any(d.get("over_memory_limit") for d in c.get("gpus", []))
        parts.append(f"mem {format_size(q['memory_limit'])}" + (" over" if over else ""))
    return " ".join(parts) or "-"


def _client_row(c: dict) -> list[str]:
    gpus = c["gpus"]
    gpu_cells = [gpu_state_cell(d) for d in gpus]
    mem = [format_size(d["managed_bytes"] + d["other_bytes"]) for d in gpus]
    resident = [format_size(d.get("resident_bytes") or 0) for d in gpus]
    swapped = [size_or_dash(d.get("swapped_bytes")) for d in gpus]
    busy = [busy_cell(d.get("gpu_busy_seconds")) for d in gpus]
    waits = [queueing_cell(d.get("queueing_delay")) for d in gpus]
    return [str(c["pid"]), str(c["uid"]), str(c.get("priority", 0)), c["state"],
            c.get("job") or "-", " ".join(gpu_cells) or "-", " ".join(mem) or "-",
            " ".join(resident) or "-", " ".join(swapped) or "-", " ".join(busy) or "-",
            " ".join(waits) or "-", pod_cell(c), quota_cell(c), c["command"] or "?"]


def without_empty(columns: list[Column], rows: list[list[str]], name: str):
    """The column `name` is left out, with its cells, when every cell of it is "-"."""
    i = next(i for i, col in enumerate(columns) if col.name == name)
    if any(r[i] != "-" for r in rows):
        return columns, rows
    return columns[:i] + columns[i + 1:], [r[:i] + r[i + 1:] for r in rows]


def without_job(columns: list[Column], rows: list[list[str]], clients: list[dict]):
    """The Job column says something only when some client is in a job status shows (one of more
    than one member or GPU): otherwise it is left out, with its cells."""
    if any(c.get("job") for c in clients):
        return columns, rows
    i = next(i for i, col in enumerate(columns) if col.name == "Job")
    return columns[:i] + columns[i + 1:], [r[:i] + r[i + 1:] for r in rows]


def job_members_cell(j: dict) -> str:
    """Its members, out of its size when known ("2/4"); "forming" while it waits for the rest."""
    n = len(j.get("members", []))
    text = f"{n}/{j['size']}" if j.get("size") else str(n)
    return text + ("" if j.get("formed", True) else " forming")


def _job_row(j: dict) -> list[str]:
    return [j["job"], j.get("kind", "?"), j.get("state", "?"), job_members_cell(j),
            " ".join(str(p) for p in j.get("members", [])) or "-",
            " ".join(str(g) for g in j.get("gpus", [])) or "-"]


def render_status(status: dict, file=None, width: int | None = None) -> None:
    """Tables (GPUs, clients, and jobs when there are any), each fitted to the console's width.
    Every string in them is made inert first (inert.py): clients name their GPUs, jobs and pods."""
    status = inert_tree(status)
    label_gpus(status)
    console = make_console(file, width)
    sched = status.get("scheduler", {})
    console.print(f"nvshare-scheduler {sched.get('version', '?')} (pid {sched.get('pid', '?')}) on "
                  f"{sched.get('socket', '?')}", overflow="fold")
    gpus = status.get("gpus", [])
    if gpus:
        columns, rows = without_empty(GPU_COLUMNS, [_gpu_row(g) for g in gpus], "Switch")
        console.print(fitted_table("GPUs", columns, rows, console.width))
    else:
        console.print("No GPUs known yet.")
    for g in gpus:
        if g.get("why"):
            for line in wrap_hanging(f"{gpu_title(g)}: {g['why']}", console.width, 2):
                console.print(Text(line))
    clients = status.get("clients", [])
    if clients:
        columns, rows = without_job(CLIENT_COLUMNS, [_client_row(c) for c in clients], clients)
        console.print(fitted_table("Clients", columns, rows, console.width))
    else:
        console.print("No clients." if "other_users_clients" not in status else "No clients of yours.")
    others = status.get("other_users_clients")
    if others:  # a non-admin's status counts other users' clients, listing only its own
        per_gpu = ", ".join(f"{gpu_title(g)}: {g['other_users_clients']}" for g in gpus
                            if g.get("other_users_clients"))
        console.print(Text(f"{others} client(s) of other users or pods, not listed ({per_gpu}); "
                           "an admin sees them all", overflow="fold"))
    jobs = status.get("jobs")  # only jobs of more than one member or GPU, or of a known size
    if jobs:
        console.print(fitted_table("Jobs", JOB_COLUMNS, [_job_row(j) for j in jobs],
                                   console.width))

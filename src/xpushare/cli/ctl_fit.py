"""How much of a `nvsharectl top` frame fits a terminal of a given height.

What must show, whatever the height: the summary line, the clients' table with at least one row
(MIN_ROWS where there are that many), "+K more" when rows are left out, and the legend. The GPUs
get what is left: each in full (its head, memory bar, last switch, why), else the first ones in
full and the others by their head lines, else as many heads as fit and a line counting the others
(on a terminal too short even for that line, none). Then the table gets every line
that remains. Heights are measured by rendering at the width (a row whose lists wrap takes more
than one line), never guessed from string lengths.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

MIN_ROWS = 3
TABLE_FRAME = 5  # lines a table takes besides its rows: title, top rule, header, rule, bottom rule


def height_of(renderable, width: int) -> int:
    """The lines `renderable` takes at `width`."""
    console = Console(file=io.StringIO(), width=width, highlight=False, markup=False, emoji=False)
    return len(console.render_lines(renderable, console.options, pad=False))


def gpu_part(blocks: list[list[list[Text]]], room: int) -> list[Text]:
    """The GPU lines that fit in `room` lines: blocks are per GPU its sections (head first), each
    a list of one-line Texts."""
    full = [t for block in blocks for section in block for t in section]
    if len(full) <= room:
        return full
    heads = [block[0] for block in blocks]
    used = sum(map(len, heads))
    if used <= room:  # the first GPUs in full while they fit, the others by their heads
        lines, whole = [], True
        for block in blocks:
            rest = sum(len(section) for section in block[1:])
            whole = whole and used + rest <= room
            used += rest if whole else 0
            lines.extend(t for section in (block if whole else block[:1]) for t in section)
        return lines
    if room < 1:  # not even the line that would count them: the clients' table comes first
        return []
    shown, n, used = [], 0, 1  # used: the line that counts the GPUs left out
    for head in heads:
        if used + len(head) > room:
            break
        shown.extend(head)
        used, n = used + len(head), n + 1
    return shown + [Text(f"+{len(heads) - n} GPUs (a taller terminal or --height shows them)",
                         overflow="fold")]


def rows_that_fit(table_for, total: int, room: int, width: int) -> int:
    """How many of `total` rows fit in `room` lines with "+K more" below them when some are left
    out; table_for(n) renders the table of the first n rows. At least one."""
    if total <= room - TABLE_FRAME and height_of(table_for(total), width) <= room:
        return total
    n = max(1, min(total, room - 1 - TABLE_FRAME))  # and "+K more"
    while n > 1 and (over := height_of(table_for(n), width) + 1 - room) > 0:
        n = max(1, n - over)
    return n

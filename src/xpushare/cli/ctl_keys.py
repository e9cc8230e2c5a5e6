"""Key presses for nvsharectl top: q leaves. The terminal is put in cbreak mode (keys arrive one by
one, without Enter and without echo; Ctrl-C still interrupts) and put back as it was on the way out,
however the view ends."""

from __future__ import annotations

import os
import select
import time

QUIT_KEYS = frozenset("qQ")


class KeyReader:
    """with KeyReader(stream) as keys: keys.wait_for_quit(seconds) -> True once q was pressed.

    A stream that is not a terminal (a pipe, /dev/null) is read as it is; at its end only the
    timeout is left to wait for."""

    def __init__(self, stream):
        try:
            self.fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.fd = None  # e.g. a replaced sys.stdin without a descriptor
        self.saved = None

    def __enter__(self) -> "KeyReader":
        if self.fd is not None and os.isatty(self.fd):
            import termios
            import tty
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            import termios
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            self.saved = None

    def read(self, timeout: float) -> str | None:
        """What was typed within timeout seconds; None when nothing was (or the input is over)."""
        if self.fd is None:
            time.sleep(max(0.0, timeout))
            return None
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self.fd, 64)
        if not data:  # end of input: nothing more will come from here
            self.fd = None
            return None
        return data.decode(errors="replace")

    def wait_for_quit(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            keys = self.read(left)
            if keys and QUIT_KEYS.intersection(keys):
                return True
        return False

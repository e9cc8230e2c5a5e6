"""The scheduler's log formats: `text` (one line per event, as it always was) and `json` (one object
per line, for log pipelines such as Loki or Elasticsearch).

A JSON line carries the time, level, logger and the text line's message, and the message's own
fields: its first word as `event` when key=value pairs follow it ("grant pid=41 gpu=0 quantum=5s"
becomes event "grant", pid 41, gpu "0", quantum "5s"). Integers become numbers (but `gpu`, an index
or a UUID, is always a string); every other value stays the string the text line shows, units
included, so both formats say the same thing. Fields are read only before the first ": ": what
follows is free text (a reason, a client's command line), and a command line holding "gpu=7" must
not give a line a field it does not have.
"""

from __future__ import annotations

import json
import logging
import re
import time

from ...inert import inert

TEXT_FORMAT = "%(asctime)s nvshare-scheduler %(levelname)s %(message)s"

_FIELD = re.compile(r"(?<![\w=])([a-z_]+)=([^\s,;:()]+)")
_EVENT = re.compile(r"^([a-z_]+) [a-z_]+=")
_RESERVED = frozenset({"time", "level", "logger", "message", "event", "exception"})
_STRINGS = frozenset({"gpu"})  # an index or a UUID: always a string, one type per field


class TextFormatter(logging.Formatter):
    """One line per record, whatever a client put into the message: everything that is not printable
    (a newline in a job's name, an escape sequence in a GPU's) is written as its escape (inert.py).
    A traceback, which is the scheduler's own, keeps its lines."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        safe = inert(message)
        if safe != message:
            record = logging.makeLogRecord({**record.__dict__, "msg": safe, "args": None})
        return super().format(record)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        obj: dict = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                    + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "message": message,
        }
        if m := _EVENT.match(message):
            obj["event"] = m.group(1)
        for key, value in _FIELD.findall(message.split(": ", 1)[0]):
            if key not in _RESERVED and key not in obj:
                numeric = key not in _STRINGS and value.lstrip("-").isdigit()
                obj[key] = int(value) if numeric else value
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def configure(fmt: str, level: int) -> None:
    """Root logging to stderr in `fmt` ("text" or "json").

    Neither format shows where a line was logged from, nor the thread or process that logged
    it, so records do not collect them (the logging module's own switches for this): each line
    is then spared a walk up the stack and a getpid() call."""
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # Python 3.12+: nor the asyncio task (a call per record)
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])

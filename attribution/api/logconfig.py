"""How the service logs: every line with its time (UTC, ISO 8601), host and level, as text or as one JSON object
per line (`attribution serve --log-json`), at the level asked for (`--log-level`). Given to uvicorn as its
logging configuration, so its access and error logs follow it too."""

from __future__ import annotations

import json
import logging
import socket
import time

TEXT_FORMAT = "%(asctime)s %(hostname)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("debug", "info", "warning", "error")


class _HostFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.hostname = socket.gethostname()

    def filter(self, record: logging.LogRecord) -> bool:
        record.hostname = self.hostname
        return True


class UTCFormatter(logging.Formatter):
    converter = time.gmtime

    def formatTime(self, record, datefmt=None):  # noqa: N802 - logging's name
        return time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(record.created)) + f".{int(record.msecs):03d}Z"


class JSONFormatter(UTCFormatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": self.formatTime(record), "host": getattr(record, "hostname", None),
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def log_config(level: str = "info", as_json: bool = False) -> dict:
    """A logging.config.dictConfig document for uvicorn (its loggers and ours)."""
    formatter = {"()": f"{__name__}.JSONFormatter"} if as_json else \
        {"()": f"{__name__}.UTCFormatter", "format": TEXT_FORMAT}
    handler = {"class": "logging.StreamHandler", "formatter": "default", "filters": ["host"],
               "stream": "ext://sys.stderr"}
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"host": {"()": f"{__name__}._HostFilter"}},
        "formatters": {"default": formatter},
        "handlers": {"default": handler},
        "loggers": {name: {"handlers": ["default"], "level": upper, "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "attribution")},
    }

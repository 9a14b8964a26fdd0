"""``run.log`` in the run directory: Python logging to a file for the duration of one run.

Every progress step of the runner and the records of aitb's own loggers (``aitb``,
``testbed``, ``traffic_gen``, ``analysis``, ``workloads``, ``topologies``) at INFO and above
go there with a UTC timestamp, also when the run fails.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["RunLog", "LOGGER_NAMES"]

LOGGER_NAMES = ("aitb", "testbed", "traffic_gen", "analysis", "workloads", "topologies")


class RunLog:
    """A file handler on ``run_dir/run.log`` attached to aitb's loggers until :meth:`close`.

    Side effects: creates/appends ``run.log``; sets those loggers to INFO where unset.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "run.log"
        self.handler = logging.FileHandler(self.path, encoding="utf-8")
        fmt = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s",
                                "%Y-%m-%dT%H:%M:%S")
        fmt.converter = time.gmtime
        self.handler.setFormatter(fmt)
        self.handler.setLevel(logging.INFO)
        self.log = logging.getLogger("aitb.run")
        for name in LOGGER_NAMES:
            lg = logging.getLogger(name)
            if lg.level == logging.NOTSET:
                lg.setLevel(logging.INFO)
            lg.addHandler(self.handler)

    def wrap(self, progress: Callable[[str], None]) -> Callable[[str], None]:
        """``progress`` that also logs each step to run.log."""
        def step(message: str) -> None:
            self.log.info(message)
            progress(message)
        return step

    def close(self) -> None:
        """Detach and close the handler."""
        for name in LOGGER_NAMES:
            logging.getLogger(name).removeHandler(self.handler)
        self.handler.close()

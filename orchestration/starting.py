"""One lock for starting processes on a shared lab: workloads that run at once
(:mod:`orchestration.run.concurrent`) and ``kind: app`` processes (:mod:`orchestration.apps.run`)
start their children one at a time, because the lab's registry and its children are written by
one starter at a time."""

from __future__ import annotations

import threading

__all__ = ["START_LOCK"]

START_LOCK = threading.Lock()

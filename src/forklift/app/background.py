"""The app's background workers (training jobs, auto-label runs): a thread each that works when told and
otherwise looks rarely. Training shares the machine's cores with the app, and a thread that wakes often costs a
running job's synchronised threads more than its own CPU time, so nothing here polls fast."""

from __future__ import annotations

import logging
import threading

LOG = logging.getLogger(__name__)


class Follower:
    """A thread that runs `step` when `notify` is called (a route queued work, a process ended) and otherwise every
    `pause()` seconds; `recover` runs first at each start (what the app's last stop left behind)."""

    name = "forklift-follower"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Follow (again: an app's lifespan may start and stop more than once)."""
        if self.thread is not None and self.thread.is_alive():
            return
        self.recover()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(10)

    def notify(self) -> None:
        self.wake.set()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception:  # one step's failure (a full disk, a database gone for a moment) must not end the
                LOG.exception("%s: a step failed; trying again", self.name)  # worker: it tries again later
            self.wake.wait(self.pause())
            self.wake.clear()

    def recover(self) -> None:
        """What to mend at start; nothing by default."""

    def step(self) -> None:
        raise NotImplementedError

    def pause(self) -> float:
        raise NotImplementedError

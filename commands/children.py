"""A worker command as a child process of ``ldptel serve`` (which restarts it when it dies):
``ChildCommand("aggregate" | "shuffle", config_path, redis_url)``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from ldptel import process


class ChildCommand:
    """``ldptel <command> --config <path>`` in a child process, in a session of its own: only
    its parent stops it (a Ctrl-C reaches the parent, which stops its children in order), and
    SIGTERM when its parent dies (``ldptel.process``; so create it from a thread-free process).
    The Redis URL goes in the environment, not in ``ps``. ``stop()`` sends SIGTERM — the worker
    finishes its current step — and waits, then kills after ``timeout``."""

    def __init__(self, command: str, config_path: str, redis_url: str) -> None:
        self.command = command
        self.proc = subprocess.Popen([sys.executable, "-m", "ldptel.commands.cli", command, "--config",
                                      str(config_path)],
                                     env={**os.environ, "REDIS_URL": redis_url}, start_new_session=True,
                                     preexec_fn=process.die_with_parent)

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

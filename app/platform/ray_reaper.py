"""A local Ray runtime ends with the process that started it, however that process ends.

Killed outright (SIGKILL, the OOM killer), the starter cannot shut Ray down. Its GCS server and raylet die with it
(the kernel's parent-death signal), but Ray's dashboard and runtime-env agents then spend about two minutes reporting
the raylet's death to the dead GCS before they exit (measured: `minutia batch` killed 25 s in, both agents still
there 60 s later). The reaper is a small child process: it notes the starter's descendants every second and, when
the starter's end of a pipe closes without a word, kills those still running. A runtime shut down cleanly says
"done" first, and the reaper leaves quietly.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

DONE = b"d"


class Reaper:
    """The starter's side: ``stop()`` after a clean shutdown; dying without it has the reaper end Ray's processes."""

    def __init__(self, interval: float = 1.0) -> None:
        read, self._write = os.pipe()  # both ends close-on-exec: no process Ray starts holds the pipe open
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "app.platform.ray_reaper", str(os.getpid()),
                                             str(interval)], stdin=read, start_new_session=True)
        finally:
            os.close(read)

    def stop(self) -> None:
        if self._write is None:
            return
        try:
            os.write(self._write, DONE)
        finally:
            os.close(self._write)
            self._write = None
        self.process.wait(timeout=10)


def watch(starter_pid: int, interval: float) -> list[int]:
    """Until the pipe on stdin closes: note ``starter_pid``'s descendants every ``interval`` s. Returns the pids
    killed: none when the starter said it was done, else the noted descendants still running (a pid the system
    gave to another process since is left alone: psutil checks the process's start time)."""
    import psutil

    try:
        starter = psutil.Process(starter_pid)
    except psutil.NoSuchProcess:
        return []
    me, noted, said = os.getpid(), {}, b""
    while True:
        ready, _, _ = select.select([sys.stdin.fileno()], [], [], interval)
        if ready:
            byte = os.read(sys.stdin.fileno(), 1)
            if not byte:
                break
            said += byte
            continue
        try:
            noted.update((child.pid, child) for child in starter.children(recursive=True) if child.pid != me)
        except psutil.NoSuchProcess:
            break
    if said == DONE:
        return []
    killed = []
    for process in noted.values():
        try:
            if process.is_running():
                process.kill()
                killed.append(process.pid)
        except psutil.Error:
            pass
    return killed


if __name__ == "__main__":
    watch(int(sys.argv[1]), float(sys.argv[2]))

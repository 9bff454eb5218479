"""app/platform/ray_reaper.py (issue 49): a process killed outright takes the processes it started with it, as a
local Ray runtime's agents must; one that stopped its reaper after a clean shutdown leaves the others alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

STARTER = """
import subprocess, sys, time
from app.platform.ray_reaper import Reaper
reaper = Reaper(interval=0.2)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
time.sleep(1.0)  # the reaper notes it
if sys.argv[1] == "clean":
    reaper.stop()
print(child.pid, reaper.process.pid, flush=True)
time.sleep(300)
"""


def _start(how: str) -> tuple[subprocess.Popen, int, int]:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, how], stdout=subprocess.PIPE, text=True)
    child, reaper = map(int, starter.stdout.readline().split())
    return starter, child, reaper


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_a_starter_killed_outright_takes_what_it_started_with_it():
    starter, child, reaper = _start("killed")
    os.kill(starter.pid, signal.SIGKILL)
    starter.wait()
    assert _gone(child, 10), "the killed starter's child outlived it"
    assert _gone(reaper, 10)


def test_a_clean_stop_leaves_the_rest_alone():
    starter, child, reaper = _start("clean")
    try:
        assert _gone(reaper, 10)  # it left when told
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        assert not _gone(child, 1.5), "a clean stop still killed the starter's child"
    finally:
        os.kill(child, signal.SIGKILL)

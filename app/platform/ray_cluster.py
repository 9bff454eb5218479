"""Joining a Ray cluster, or starting a local Ray runtime, for the parts of minutia that run on Ray
(``minutia batch``: app/batch/cluster.py; rooms as actors: app/rooms/room_fleet.py)."""

from __future__ import annotations

import logging
import os

from app.platform.ray_reaper import Reaper
from encoders.errors import InputError

_reaper: Reaper | None = None  # of the local runtime this process started


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a HOST:PORT nobody answers on at once (ray.init would retry for minutes)."""
    import socket

    host, sep, port = address.replace("ray://", "").rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--ray-address must be 'auto' or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise InputError(f"no Ray cluster answers at {address} ({exc.strerror or exc})") from None


def join_ray(address: str | None) -> bool:
    """Join the cluster at ``address``, or start a local runtime; True when this call started or joined it
    (the caller shuts it down), False when this process was on Ray already."""
    import ray

    if ray.is_initialized():
        return False
    if address and address != "auto":
        check_reachable(address)
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")  # no C++ stack dump on a plain SIGTERM
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=True)
    try:
        if address:
            ray.init(address=address, **quiet)
        else:  # a new runtime of our own (never a stale one another process left in /tmp/ray); a small object
            # store: only paths, audio chunks and short reports travel through it
            ray.init(address="local", num_cpus=os.cpu_count() or 1, object_store_memory=128 * 1024 * 1024, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a local runtime"
        raise InputError(f"cannot start Ray ({where}): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    if not address:
        global _reaper
        _reaper = Reaper()  # this process killed outright takes the runtime's processes with it
    return True


def leave_ray() -> None:
    """Shut down what :func:`join_ray` started or joined (and the reaper of a local runtime)."""
    import ray

    global _reaper
    ray.shutdown()
    if _reaper is not None:
        _reaper.stop()
        _reaper = None

"""What a live meeting uses of the machine, metered as it runs, for its cost (app/platform/cost.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from app.platform.cost import REMOTE_TIERS, Usage, UsageMeter, machine

if TYPE_CHECKING:
    from app.llm.context import MeetingContext

log = logging.getLogger("minutia.session")


def usage_meter(settings: Any, earlier: dict | None = None) -> UsageMeter:
    """A meeting's meter, recording the cores and GPUs it runs on (the config's, else this machine's); ``earlier``:
    what a resumed meeting used before, which it adds to."""
    cores, gpus = machine(settings.cost) if getattr(settings, "cost", None) is not None else (0, 0)
    if earlier is None:
        return UsageMeter(cores=cores, gpus=gpus)
    return UsageMeter(Usage.from_dict(earlier), cores=cores, gpus=gpus)


def measure(meter: UsageMeter, meeting: Any, context: MeetingContext, force: bool = False) -> None:
    """Add the time since the last measure to ``meeting``'s use (every few seconds, from its LLM worker): its share
    of the machine among the runtime's meetings still running, the KV it holds, the bytes its cold tier moved to or
    from a remote tier (app/platform/metrics.py reads them off ``meeting``, a MeetingSession)."""
    if not (force or meter.due()):
        return
    from app.platform.metrics import placement_transfers

    try:  # a figure that cannot be read is left out; it never stops the meeting
        remote = sum(n for (a, b), (n, _) in placement_transfers(meeting).items() if a in REMOTE_TIERS or b in REMOTE_TIERS)
        running = sum(1 for s in meeting.runtime.sessions() if s.running) or 1  # finished meetings share no more
        meter.tick(context.stats(), running, meeting.stream_seconds, remote)
    except Exception:
        log.exception("session %s: its use could not be measured", meeting.session_id)

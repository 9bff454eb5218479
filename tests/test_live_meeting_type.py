"""One live-meeting type: the local session and the bot's remote session both are a LiveMeeting, method for method
(the bot's Meetings and the page depend on the protocol, not on either class)."""

from __future__ import annotations

import inspect

import pytest

from app.live.meeting import LiveMeeting
from app.live.session import MeetingSession
from app.rooms.remote_session import RemoteSession

MEMBERS = [name for name in dir(LiveMeeting) if not name.startswith("_")]


def _accepts(implementation, protocol) -> list[str]:
    """What ``implementation`` lacks to be called as ``protocol`` is: each parameter, by name and in order, with a
    default wherever the protocol has one; parameters of its own need defaults."""
    wanted = [p for p in inspect.signature(protocol).parameters.values() if p.name != "self"]
    given = [p for p in inspect.signature(implementation).parameters.values() if p.name != "self"]
    faults = []
    for i, p in enumerate(wanted):
        if i >= len(given) or given[i].name != p.name:
            faults.append(f"parameter {i + 1} should be {p.name!r}")
        elif p.default is not inspect.Parameter.empty and given[i].default is inspect.Parameter.empty:
            faults.append(f"{p.name!r} needs a default")
    faults += [f"its own {p.name!r} needs a default" for p in given[len(wanted):]
               if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return faults


def test_the_protocol_names_the_surface():
    assert {"feed_audio", "feed_video", "finish", "ask", "snapshot", "transcript", "subscribe", "close",
            "state"} <= set(MEMBERS)


@pytest.mark.parametrize("cls", [MeetingSession, RemoteSession])
def test_each_live_meeting_has_every_member_with_a_compatible_signature(cls):
    faults = {}
    for name in MEMBERS:
        if not hasattr(cls, name):
            faults[name] = ["missing"]
            continue
        member, wanted = getattr(cls, name), getattr(LiveMeeting, name)
        if isinstance(wanted, property):
            if not isinstance(member, property):
                faults[name] = ["should be a property"]
            continue
        if found := _accepts(member, wanted):
            faults[name] = found
    assert faults == {}


def test_the_signature_check_sees_a_mismatch():
    class Narrow:
        def ask(self, text): ...

        def finish(self): ...

        def feed_audio(self, samples, sample_rate, frames): ...

    assert _accepts(Narrow.ask, LiveMeeting.ask) == ["parameter 1 should be 'question'"]
    assert _accepts(Narrow.finish, LiveMeeting.finish) == ["parameter 1 should be 'timeout'"]
    assert _accepts(Narrow.feed_audio, LiveMeeting.feed_audio) == ["its own 'frames' needs a default"]

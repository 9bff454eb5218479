"""Where the room bot's meetings run: in the bot's own process, or as Ray actors over a cluster.

:class:`LocalMeetings` makes each room's :class:`~app.live.session.MeetingSession` from the bot's shared
:class:`~app.live.runtime.Runtime` (models loaded once in the bot). :class:`ClusterMeetings` opens each room as a
:class:`~app.rooms.room_fleet.RoomActor` on the Ray cluster at ``--ray-address`` (models loaded in the actor, the meeting
checkpointed to the session store, taken over on another node when its node dies) and gives the bot a
:class:`~app.rooms.remote_session.RemoteSession` for it. The bot itself (WebRTC, the mixer, admission, the data channel)
is the same either way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from app.live.meeting import LiveMeeting
from app.rooms.mixer import ASR_RATE

if TYPE_CHECKING:
    from app.platform.config import Settings
    from app.rooms.participants import Participants
    from app.rooms.room_fleet import FleetOptions, RoomFleet
    from app.live.runtime import Runtime
    from app.live.session import MeetingSession
    from app.rooms.remote_session import RemoteSession
    from app.text.transcript import Transcript

log = logging.getLogger("minutia.bot")


class Meetings(Protocol):
    """What the bot asks of the place its rooms' meetings run."""

    def open(self, room_name: str) -> LiveMeeting: ...  # a new meeting for a room

    # the room's named participants in a session that has heard nothing yet (their names kept, their microphones
    # labelling their words)
    def install(self, session: LiveMeeting, participants: "Participants") -> None: ...

    # 16 kHz audio and who spoke in each 20 ms frame of it (app/rooms/participants.py)
    def feed(self, session: LiveMeeting, samples: np.ndarray, frames: list, participants: "Participants") -> None: ...

    def go_on(self, room_name: str, old: LiveMeeting) -> LiveMeeting: ...  # new audio after a room's meeting finished

    def alive(self, session: LiveMeeting) -> bool: ...  # the session can still take audio

    # (the session going on, the report)
    def forget(self, session: LiveMeeting, speaker: str) -> tuple[LiveMeeting, Any]: ...

    def close(self) -> None: ...


class LocalMeetings:
    """Rooms' sessions in the bot's process, from the shared runtime."""

    def __init__(self, runtime: "Runtime", autosave: bool) -> None:
        self.runtime, self.autosave = runtime, autosave

    def open(self, room_name: str, earlier: "Transcript | None" = None) -> "MeetingSession":
        """A room's session; ``earlier`` (a transcript) is the meeting so far when a finished room goes on."""
        session = self.runtime.new_session(source=f"webrtc:{room_name}", autosave=self.autosave, library=True)
        session.title = f"room {room_name}"  # what the meeting library lists it as when it ends
        if earlier is not None and earlier.turns:
            session.add_transcript(earlier)
        return session

    def go_on(self, room_name: str, old: "MeetingSession") -> "MeetingSession":
        """A saved session is resumed from the store (same id, times go on, KV and slides kept); otherwise a new
        session starts from the old one's transcript (its lines are prefilled again)."""
        from encoders.errors import InputError

        try:
            old.save_changes()  # a rename since the end goes on with the meeting
        except Exception:  # the store failed: the meeting goes on without that rename rather than not at all
            log.exception("saving the room's session before it goes on failed", extra={"room": room_name})
        self.runtime.close_session(old.session_id)
        if old.autosave and old.state == "finished":
            try:
                return self.runtime.resume_session(old.session_id, autosave=True)
            except InputError as exc:
                log.warning("cannot resume the room's session", extra={"room": room_name, "error": str(exc)})
        return self.open(room_name, old.transcript())

    def install(self, session: "MeetingSession", participants: "Participants") -> None:
        session.diarizer_for = participants.diarizer
        session.keep_names({name: name for name in participants.names.values()})

    def feed(self, session: "MeetingSession", samples: np.ndarray, frames: list, participants: "Participants") -> None:
        participants.queue(frames)  # before the audio: the recogniser's thread may take it at once
        try:
            session.feed_audio(samples, ASR_RATE)
        except Exception:
            participants.unqueue(len(frames))
            raise

    def alive(self, session: "MeetingSession") -> bool:
        return session in self.runtime.sessions()

    def forget(self, session: "MeetingSession", speaker: str):
        from app.live.forget import forget_in_live_meeting

        return forget_in_live_meeting(self.runtime, session, speaker)

    def close(self) -> None:
        """The sessions stay with the runtime (its owner closes it: nothing transcribed is lost)."""


class ClusterMeetings:
    """Rooms as Ray actors (app/rooms/room_fleet.py); each room's meeting lives in one actor for the bot's lifetime. The
    frames' speakers travel with the audio: the host labels the words of named participants by them."""

    def __init__(self, settings: "Settings", options: "FleetOptions", fleet: "RoomFleet | None" = None) -> None:
        from app.rooms.room_fleet import RoomFleet

        self.settings = settings
        self.fleet = fleet if fleet is not None else RoomFleet(settings, options)
        self.sessions: list["RemoteSession"] = []

    def open(self, room_name: str) -> "RemoteSession":
        from app.rooms.remote_session import RemoteSession

        session = RemoteSession(self.fleet.open(room_name), self.settings)
        self.sessions.append(session)
        return session

    def go_on(self, room_name: str, old: "RemoteSession") -> "RemoteSession":
        old.go_on()
        return old

    def install(self, session: "RemoteSession", participants: "Participants") -> None:
        session.keep_names({name: name for name in participants.names.values()})

    def feed(self, session: "RemoteSession", samples: np.ndarray, frames: list, participants: "Participants") -> None:
        session.feed_audio(samples, ASR_RATE, frames)

    def alive(self, session: "RemoteSession") -> bool:
        return session.state != "error"

    def forget(self, session: "RemoteSession", speaker: str):
        return session, session.forget(speaker)

    def close(self) -> None:
        """Stop collecting events and hand the actors back; the meetings are saved in the session store."""
        for session in self.sessions:
            session.close()
        self.fleet.close()

"""A room of the WebRTC bot: its meeting session, its mixer and its peers (each peer's connection and data channel)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from aiortc import RTCPeerConnection

from app.rooms.mixer import AudioMixer
from app.rooms.participants import Participants

if TYPE_CHECKING:
    from aiortc import RTCDataChannel

    from app.live.session import MeetingSession

log = logging.getLogger("minutia.bot")


@dataclasses.dataclass
class Peer:
    peer_id: str
    room: "Room"
    pc: RTCPeerConnection
    client: str
    channel: "RTCDataChannel | None" = None
    tasks: set[asyncio.Task] = dataclasses.field(default_factory=set)
    asking: bool = False
    connected: bool = False
    pending_forget: tuple[str, float] | None = None  # a forget asked for (what, when): 'forget: yes' does it

    def send(self, message: dict) -> bool:
        channel = self.channel
        if channel is None or channel.readyState != "open":
            return False
        try:
            channel.send(json.dumps(message, ensure_ascii=False))
            return True
        except Exception as exc:  # a channel closing under us is the peer's problem, not the room's
            log.debug("send to %s failed: %s", self.peer_id, exc)
            return False


class Room:
    """A room's meeting session and the peers in it; lives on the bot's event loop."""

    def __init__(self, name: str, session: "MeetingSession", mixer: AudioMixer) -> None:
        self.name = name
        self.session = session
        self.peers: dict[str, Peer] = {}
        self.mixer = mixer  # every peer's audio, summed on the room's clock
        self.mix_task: asyncio.Task | None = None
        self.wakeup = asyncio.Event()  # new audio, or a lane that ended
        self.finished = False  # the session was finished: new audio continues the meeting in a new session
        # Held by a question while it reads the session and by a continuation while it swaps sessions: the
        # swap closes the old session, which must not happen under a question (nor a question reach a closed one).
        self.session_lock = asyncio.Lock()
        self.unsubscribe: Any = None
        self.recent_words: collections.deque = collections.deque(maxlen=400)  # committed words with labels
        self.held_lines: list[Any] = []  # closed lines waiting for their last words' labels
        # audio (with its frames' speakers) that arrives while a forget rebuilds the meeting
        self.parked: list[tuple[np.ndarray, list]] | None = None
        self.participants = Participants()  # peers that joined with a name: their microphone says who speaks

    def broadcast(self, message: dict) -> None:
        for peer in list(self.peers.values()):
            peer.send(message)

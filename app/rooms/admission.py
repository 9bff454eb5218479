"""Who may join the room bot, and when: room tokens, join rates, and the load limits that shed a new room before
it hurts the rooms already served."""

from __future__ import annotations

import asyncio
import collections
import hmac
from typing import TYPE_CHECKING, Any, Iterable

from prometheus_client import Gauge

from app.rooms.signaling import JoinRefused, RateLimiter

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from app.rooms.bot_settings import BotSettings


class Admission:
    """The checks a join passes before the bot negotiates with the peer; refusals raise :class:`JoinRefused`.

    Rooms are read as the bot holds them: ``peers`` (a dict) and ``session.backlog_seconds``.
    """

    def __init__(self, settings: BotSettings, registry: CollectorRegistry) -> None:
        self.settings = settings
        self._limiter = RateLimiter(settings.joins_per_second, settings.join_burst)
        # Failures are counted per address over all room names (200 made-up rooms are 200 failures), apart
        # from valid joins, so that an address that failed cannot lock out the right token.
        self._failures = RateLimiter(settings.failed_joins_per_second, settings.failed_join_burst)
        self.loop_lag = 0.0  # seconds the event loop ran late, max over the last 5 s (watch_loop)
        self._loop_lag_gauge = Gauge("minutia_bot_loop_lag_seconds", "how late the bot's event loop ran a 0.25 s "
                                     "timer, max over 5 s (past ~1 s, WebRTC consent checks start to fail)",
                                     registry=registry)
        self._stopped = False

    def authorize(self, room: str, token: str | None) -> None:
        """An unknown room and a wrong token get the same 403, so room names cannot be probed without a token."""
        if not token:
            raise JoinRefused(401, "a bearer token for the room is required")
        expected = self.settings.rooms.get(room)
        # compared even for an unknown room, so the time taken does not tell either
        matches = hmac.compare_digest(token.encode(), (expected if expected is not None else "\0" + token).encode())
        if expected is None or not matches:
            raise JoinRefused(403, "unknown room or wrong token")

    def screen(self, room: str, token: str | None, sdp: str, client: str) -> None:
        """Token, join rates (429) and the offer's shape (400), before any room is touched."""
        try:
            self.authorize(room, token)
        except JoinRefused:
            if not self._failures.allow(client):
                raise JoinRefused(429, "too many failed joins from this address; slow down") from None
            raise
        if not self._limiter.allow((client, room)):
            raise JoinRefused(429, "too many join requests; slow down")
        media = [line for line in sdp.splitlines() if line.startswith("m=")]
        if not sdp.startswith("v=0") or not any(m.startswith(("m=audio", "m=video", "m=application")) for m in media):
            raise JoinRefused(400, "malformed SDP offer: it needs 'v=0' and an audio, video or data media section")

    def check_load(self, rooms: dict[str, Any], room: str, peers: int) -> None:
        """The limit of ``peers`` over all rooms, and for a room that is not active yet, the capacity (503)."""
        if peers >= self.settings.max_peers:
            raise JoinRefused(503, f"the bot is full ({self.settings.max_peers} peers)")
        existing = rooms.get(room)
        if existing is None or not existing.peers:
            self._check_capacity(rooms.values())

    def check_room(self, room: str, peers: int) -> None:
        if peers >= self.settings.max_peers_per_room:
            raise JoinRefused(503, f"room {room!r} is full ({self.settings.max_peers_per_room} peers)")

    def _check_capacity(self, rooms: Iterable[Any]) -> None:
        """Shed load before it hurts the rooms already served: a room that becomes active is refused (503)
        when the bot is at its room limit (rooms with peers, or with audio still waiting for the recogniser),
        its event loop runs late, or a room's audio waits on the recogniser too long.
        Peers joining an active room are not refused here (the per-room and total peer limits apply)."""
        rooms = list(rooms)
        # busy: peers in it, or audio still waiting for the recogniser after they left
        active = [room for room in rooms if room.peers or room.session.backlog_seconds > 0]
        limit = self.settings.max_rooms
        if len(active) >= limit:
            raise JoinRefused(503, f"the bot is at capacity ({len(active)} active rooms of {limit}); try again later")
        if self.loop_lag > self.settings.max_loop_lag_seconds:
            raise JoinRefused(503, f"the bot is overloaded (its event loop runs {self.loop_lag:.2f} s late); "
                                   "try again later")
        behind = max((room.session.backlog_seconds for room in rooms), default=0.0)
        if behind > self.settings.max_backlog_seconds:
            raise JoinRefused(503, f"the bot is behind (a room's audio waits {behind:.0f} s for transcription); "
                                   "try again later")

    async def watch_loop(self, period: float = 0.25, window: int = 20) -> None:
        """How late the event loop runs a ``period`` timer, max over the last ``window`` ticks: the signal that
        the bot has more rooms than CPU (measured on 2 cores: 8 rooms, peers dropped at 60-90 s)."""
        loop = asyncio.get_running_loop()
        lags: collections.deque[float] = collections.deque(maxlen=window)
        while not self._stopped:
            started = loop.time()
            await asyncio.sleep(period)
            lags.append(max(0.0, loop.time() - started - period))
            self.loop_lag = max(lags)
            self._loop_lag_gauge.set(self.loop_lag)

    def stop(self) -> None:
        self._stopped = True

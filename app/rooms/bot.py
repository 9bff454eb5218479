"""The WebRTC room bot: joins rooms as an aiortc peer, listens and watches, posts captions, answers.

One :class:`MeetingSession` per room (from the shared :class:`Runtime`, or in a Ray actor on a cluster with
``--ray-address``: app/rooms/bot_meetings.py), any number of peers per
room up to a limit. Every peer's audio (48 kHz stereo Opus) is resampled to 16 kHz mono, and the
room's :class:`AudioMixer` sums the speakers on one clock before the session hears them; video
frames are fed at a low rate; a data channel opened by the peer carries JSON messages from the bot
(``joined``, ``caption``, ``line``, ``tentative``, ``slide``, ``answer``, ``state``, ``error``) and
the peer's requests (``ask: <question>``, ``forget: <speaker>``, ``rename: <speaker> = <name>``:
app/rooms/requests.py). When the room's last audio track ends, the session is
finished (the recogniser's tail is committed) and the room stays open for questions; a speaker who
comes back starts a continuation of the meeting. A peer that misbehaves gets an error and is
dropped; the room's session, and every other room, carry on.

Parts with a job of their own: the settings (app/rooms/bot_settings.py), who may join (app/rooms/admission.py), a
room and its peers (app/rooms/room.py), the room's mixer (app/rooms/mixer.py), the addresses offered to peers
(app/rooms/ice.py), the messages peers get (app/rooms/room_messages.py), what peers ask (app/rooms/requests.py),
where the meetings run (app/rooms/bot_meetings.py), and the HTTP server around the bot (app/rooms/bot_server.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from app.rooms.admission import Admission
from app.rooms.bot_meetings import LocalMeetings, Meetings
from app.rooms.bot_settings import BotSettings
from app.live.events import Failed, LineClosed, SessionEvent, SlideShown, StateChanged, TentativeChanged, WordsCommitted
from app.platform.metrics import Metrics
from app.rooms.mixer import ASR_RATE, MIX_FRAME, AudioMixer
from app.rooms.ice import ice_configuration, restrict_ice_hosts
from app.rooms.requests import PeerRequests
from app.rooms.room import Peer, Room
from app.rooms.participants import display_name
from app.rooms.room_messages import captions, jsonable, line_message, majority_label
from app.rooms.signaling import JoinRefused

if TYPE_CHECKING:
    from aiortc import RTCDataChannel

    from app.live.runtime import Runtime
    from app.live.session import MeetingSession

log = logging.getLogger("minutia.bot")


def _shown(name: str, limit: int = 64) -> str:
    """A peer-chosen name as logs and replies show it: at most ``limit`` characters (a 60,000-character room
    name was logged whole)."""
    return name if len(name) <= limit else f"{name[:limit]}... ({len(name)} chars)"


class RoomBot:
    """Rooms, peers and the plumbing between aiortc tracks and meeting sessions."""

    def __init__(self, runtime: "Runtime | None", settings: BotSettings, metrics: Metrics | None = None,
                 meetings: Meetings | None = None) -> None:
        if meetings is None and runtime is None:
            raise ValueError("the bot needs a runtime for its rooms' meetings, or where else they run")
        self.runtime = runtime  # None when the meetings run elsewhere (a Ray cluster)
        self.meetings: Meetings = meetings or LocalMeetings(runtime, settings.autosave)
        self.settings = settings
        self.rooms: dict[str, Room] = {}
        self.metrics = metrics or Metrics(self.sessions, self.peer_counts)
        self.admission = Admission(settings, self.metrics.registry)
        self.ask_pool = ThreadPoolExecutor(settings.ask_workers, thread_name_prefix="bot-ask")
        # finish() blocks until a room's backlog is transcribed; its own pool, so that shutting down never waits
        self.finish_pool = ThreadPoolExecutor(max(1, len(settings.rooms)), thread_name_prefix="bot-finish")
        self.requests = PeerRequests(self)  # what peers ask on their data channels (app/rooms/requests.py)
        self._room_lock = asyncio.Lock()
        self._join_lock = asyncio.Lock()  # a new room's first peer is counted before the next new room is checked
        self._closed = False
        if settings.ice_hosts is not None:
            restrict_ice_hosts(settings.ice_hosts)

    # ------------------------------------------------------------------ views (any thread)
    def sessions(self) -> list[tuple[str, "MeetingSession"]]:
        return [(name, room.session) for name, room in list(self.rooms.items())]

    def peer_counts(self) -> dict[str, int]:
        return {name: len(room.peers) for name, room in list(self.rooms.items())}

    def peer_total(self) -> int:
        return sum(len(room.peers) for room in list(self.rooms.values()))

    # ------------------------------------------------------------------ joining
    async def join(self, room_name: str, token: str | None, sdp: str, client: str = "?",
                   name: str | None = None) -> tuple[str, str]:
        """Check, negotiate, and return (peer id, SDP answer); raises :class:`JoinRefused`. A peer with a ``name``
        is that participant: what its microphone says is attributed to them (app/rooms/participants.py)."""
        from encoders.errors import InputError

        outcome = "refused"
        try:
            if self._closed:
                raise JoinRefused(503, "the bot is shutting down")
            self.admission.screen(room_name, token, sdp, client)
            try:
                name = display_name(name) if name is not None else None
            except InputError as exc:
                raise JoinRefused(422, str(exc)) from None
            async with self._join_lock:
                self.admission.check_load(self.rooms, room_name, self.peer_total())
                room = await self._room(room_name)
                self.admission.check_room(room_name, len(room.peers))
                peer_id = uuid.uuid4().hex[:10]
                if name is not None:
                    try:
                        room.participants.add(peer_id, name)
                    except InputError as exc:
                        raise JoinRefused(409, str(exc)) from None
                    room.session.keep_names({name: name})
                pc = RTCPeerConnection(ice_configuration())
                peer = Peer(peer_id, room, pc, client)
                room.peers[peer.peer_id] = peer  # counted now, so concurrent joins respect the limits
            try:
                self._wire(peer)
                await pc.setRemoteDescription(RTCSessionDescription(sdp, "offer"))
                await pc.setLocalDescription(await pc.createAnswer())
            except Exception as exc:
                await self._drop(peer, f"negotiation failed: {exc}")
                raise JoinRefused(400, f"cannot answer this offer: {exc or type(exc).__name__} "
                                       "(supported: Opus/PCMU/PCMA/G722 audio, VP8/H264 video)") from None
            self.spawn(peer, self._reap_unconnected(peer))
            outcome = "joined"
            log.info("peer joined", extra={"room": room_name, "peer": peer.peer_id, "client": client})
            return peer.peer_id, pc.localDescription.sdp
        except JoinRefused as exc:
            outcome = "rate_limited" if exc.status == 429 else outcome
            log.info("join refused", extra={"room": _shown(room_name), "client": client, "status": exc.status,
                                            "reason": exc.message})
            raise
        finally:
            self.metrics.joins.labels(outcome).inc()

    async def _room(self, name: str) -> Room:
        async with self._room_lock:
            room = self.rooms.get(name)
            if room is None:
                loop = asyncio.get_running_loop()
                try:
                    session = await loop.run_in_executor(None, self._new_session, name)
                except Exception as exc:
                    log.exception("session for room %s failed", name)
                    raise JoinRefused(503, f"cannot start a meeting session: {exc}") from None
                mixer = AudioMixer(deadline=self.settings.mix_deadline_seconds,
                                   max_deadline=self.settings.mix_max_deadline_seconds,
                                   backlog=self.settings.mix_backlog_seconds)
                room = Room(name, session, mixer)
                self._install(room, session)
                self._listen(room)
                self.rooms[name] = room
            return room

    def _new_session(self, room_name: str) -> "MeetingSession":
        session = self.meetings.open(room_name)
        session.on_transfer = self.metrics.record_transfer
        return session

    def _listen(self, room: Room) -> None:
        loop = asyncio.get_running_loop()
        session = room.session
        room.unsubscribe = session.subscribe(
            lambda event: loop.call_soon_threadsafe(self._on_event, room, session, event))

    def spawn(self, peer: Peer, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        peer.tasks.add(task)
        task.add_done_callback(peer.tasks.discard)

    def _wire(self, peer: Peer) -> None:
        pc = peer.pc

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self.spawn(peer, self._consume_audio(peer, track))
            elif track.kind == "video":
                self.spawn(peer, self._consume_video(peer, track))

        @pc.on("datachannel")
        def on_datachannel(channel: "RTCDataChannel") -> None:
            peer.channel = channel

            @channel.on("open")
            def on_open() -> None:
                self._greet(peer)

            @channel.on("message")
            def on_message(message: str | bytes) -> None:
                self.requests.on_message(peer, message)

            if channel.readyState == "open":
                self._greet(peer)

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            if pc.connectionState == "connected":
                peer.connected = True
            elif pc.connectionState in ("failed", "closed"):
                await self._drop(peer, f"connection {pc.connectionState}")

    def _greet(self, peer: Peer) -> None:
        transcript = peer.room.session.transcript()
        peer.send({"type": "joined", "room": peer.room.name, "peer_id": peer.peer_id,
                   "max_message_bytes": self.settings.max_message_bytes})
        backlog = [w for turn in transcript.turns for w in turn.words]
        for caption in captions(backlog):
            peer.send(caption)

    async def _reap_unconnected(self, peer: Peer) -> None:
        await asyncio.sleep(self.settings.connect_timeout)
        if not peer.connected:
            await self._drop(peer, "did not connect in time")

    async def _drop(self, peer: Peer, reason: str) -> None:
        room = peer.room
        if room.peers.pop(peer.peer_id, None) is None:
            return
        room.participants.leave(peer.peer_id)
        log.info("peer left", extra={"room": room.name, "peer": peer.peer_id, "reason": reason})
        current = asyncio.current_task()
        for task in list(peer.tasks):
            if task is not current:
                task.cancel()
        try:
            await peer.pc.close()
        except Exception as exc:  # aiortc fails to close a connection whose negotiation broke half-way
            log.warning("peer connection did not close cleanly", extra={"peer": peer.peer_id, "error": repr(exc)})

    # ------------------------------------------------------------------ media
    async def _consume_audio(self, peer: Peer, track: MediaStreamTrack) -> None:
        """48 kHz stereo Opus frames -> 16 kHz mono -> this peer's lane of the room's mixer, until the track ends."""
        room = peer.room
        resampler = av.AudioResampler(format="s16", layout="mono", rate=ASR_RATE)
        lane = f"{peer.peer_id}:{track.id}"
        try:
            while True:
                try:
                    frame = await track.recv()
                except MediaStreamError:  # the peer hung up this track, or left
                    break
                for out in resampler.resample(frame):
                    room.mixer.push(lane, out.to_ndarray().reshape(-1).astype(np.float32) / 32768.0)
                room.wakeup.set()
                if room.mix_task is None or room.mix_task.done():
                    room.mix_task = asyncio.ensure_future(self._mix(room))
        finally:
            room.mixer.end(lane)
            room.wakeup.set()

    async def _mix(self, room: Room) -> None:
        """The room's clock: mixed audio to the session in chunks; when the room's audio has ended, finish
        the session so the recogniser commits its tail (nothing heard is lost). Runs while there is audio."""
        chunk = int(self.settings.audio_chunk_seconds * ASR_RATE)
        pending: list[np.ndarray] = []
        speakers: list = []  # who spoke in each 20 ms frame of the pending audio (app/rooms/participants.py)
        held, fed, dropped, gaps = 0, False, room.mixer.dropped, room.mixer.gaps
        while True:
            room.wakeup.clear()  # before pulling: audio pushed from here on wakes the wait below
            mixed = room.mixer.pull()
            speakers.extend(room.participants.speakers_of(room.mixer.take_activity()))
            if room.mixer.dropped > dropped:
                lost, dropped = room.mixer.dropped - dropped, room.mixer.dropped
                self.metrics.dropped_frames.labels(room.name, "audio").inc(lost / MIX_FRAME)
            if room.mixer.gaps > gaps:
                self.metrics.late_audio_frames.labels(room.name).inc(room.mixer.gaps - gaps)
                gaps = room.mixer.gaps
            self.metrics.mix_wait.labels(room.name).set(room.mixer.wait)
            if len(mixed):
                pending.append(mixed)
                held += len(mixed)
            if pending and (held >= chunk or room.mixer.idle):
                fed = await self._feed_audio(room, np.concatenate(pending), speakers) or fed
                pending, speakers, held = [], [], 0
            if room.mixer.idle:
                if fed:
                    fed = False
                    await self._end_of_stream(room)
                if room.mixer.idle:  # nobody started talking while the session finished
                    return
                continue
            try:
                await asyncio.wait_for(room.wakeup.wait(), room.mixer.wait_time())
            except asyncio.TimeoutError:
                pass

    async def _feed_audio(self, room: Room, samples: np.ndarray, speakers: list) -> bool:
        if room.parked is not None:  # a forget is rebuilding the meeting: the audio waits for the rebuilt session
            room.parked.append((samples, speakers))
            return True
        if room.finished:  # a speaker after the end: the meeting goes on in a new session
            await self._continue_room(room)
        try:
            self.meetings.feed(room.session, samples, speakers, room.participants)
            return True
        except Exception as exc:
            self.metrics.dropped_frames.labels(room.name, "audio").inc(len(samples) / MIX_FRAME)
            log.warning("audio refused by session", extra={"room": room.name, "error": str(exc)})
            return False

    async def _end_of_stream(self, room: Room) -> None:
        """The last audio track of the room ended: commit what the recogniser still holds, keep the room."""
        log.info("room audio ended; finishing its session", extra={"room": room.name})
        if room.parked is not None:  # finish the session a forget is building, not the one it replaces
            async with room.session_lock:
                pass
        room.finished = True
        try:
            await asyncio.get_running_loop().run_in_executor(self.finish_pool, room.session.finish)
        except Exception as exc:
            log.warning("finishing the room's session failed", extra={"room": room.name, "error": str(exc)})

    async def _continue_room(self, room: Room) -> None:
        """New audio in a finished room: the meeting goes on in a new session (questions still see all of it).
        Questions in flight finish on the old session first; those asked meanwhile wait for the new one."""
        async with room.session_lock:
            session = await asyncio.get_running_loop().run_in_executor(None, self.next_session, room.name,
                                                                       room.session)
            self.swap(room, session)
        log.info("room continues in a new session", extra={"room": room.name, "session": session.session_id})

    def next_session(self, room_name: str, old: "MeetingSession") -> "MeetingSession":
        """The room's meeting going on after its end (app/rooms/bot_meetings.py: resumed from its save)."""
        return self.meetings.go_on(room_name, old)

    async def _consume_video(self, peer: Peer, track: MediaStreamTrack) -> None:
        """Every frame is received (aiortc queues them unbounded otherwise); a few a second are fed."""
        room = peer.room
        period, last = 1.0 / self.settings.video_fps, None
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                break
            now = time.monotonic()  # the peer's timestamps are not to be trusted for pacing
            if last is not None and now - last < period:
                continue
            last = now
            if room.finished:  # the room's audio ended and so did its session: frames until someone speaks again
                self.metrics.dropped_frames.labels(room.name, "video").inc()
                continue
            try:
                room.session.feed_video(frame.to_ndarray(format="rgb24"))
            except Exception as exc:
                self.metrics.dropped_frames.labels(room.name, "video").inc()
                log.warning("video frame refused by session", extra={"room": room.name, "error": str(exc)})

    def swap(self, room: Room, session: "MeetingSession") -> None:
        """The room goes on in ``session`` (call with the room's session lock held); the same session (a meeting
        on Ray goes on in its actor) keeps its listener, so no event falls between two subscriptions."""
        same = session is room.session
        if room.unsubscribe is not None and not same:
            room.unsubscribe()
        session.on_transfer = self.metrics.record_transfer
        room.session, room.finished = session, False
        self._install(room, session)
        if not same:
            self._listen(room)

    def _install(self, room: Room, session: "MeetingSession") -> None:
        """The room's named participants in a session that has heard nothing yet: their microphones label their
        words, their names are kept. Frames still queued were the old session's (it is done): dropped."""
        room.participants.clear()
        self.meetings.install(session, room.participants)

    # ------------------------------------------------------------------ session events (from session threads)
    def _on_event(self, room: Room, session: "MeetingSession", event: SessionEvent) -> None:
        """The one place session events become data-channel messages."""
        if session is not room.session:  # the room went on in a new session
            return
        match event:
            case WordsCommitted(words):
                room.recent_words.extend(words)
                for caption in captions(words):
                    room.broadcast(caption)
                self._release_lines(room)
            case LineClosed(line) if line.modality == "audio":
                # The session closes a line before it reports the line's last words: label it once they are here.
                room.held_lines.append(line)
                asyncio.get_running_loop().call_later(0.5, self._release_lines, room)
            case TentativeChanged(text):
                room.broadcast({"type": "tentative", "text": text})
            case SlideShown(slide):
                room.broadcast({"type": "slide", **jsonable(slide)})
            case StateChanged(value) | Failed(value):
                self._release_lines(room)
                room.broadcast({"type": event.kind, "value": value})

    def _release_lines(self, room: Room) -> None:
        lines, room.held_lines = room.held_lines, []
        for line in lines:
            room.broadcast(line_message(line, majority_label(room.recent_words, line.start, line.end)))

    # ------------------------------------------------------------------ shutdown
    async def close(self) -> None:
        """Hang up on every peer; sessions stay with the runtime (nothing transcribed is lost)."""
        self._closed = True
        self.admission.stop()
        for room in list(self.rooms.values()):
            if room.mix_task is not None:
                room.mix_task.cancel()
            for peer in list(room.peers.values()):
                await self._drop(peer, "bot shutting down")
            if room.unsubscribe is not None:
                room.unsubscribe()
        self.ask_pool.shutdown(wait=False, cancel_futures=True)
        self.finish_pool.shutdown(wait=False, cancel_futures=True)  # the runtime closing the sessions ends them

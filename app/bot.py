"""The WebRTC room bot: joins rooms as an aiortc peer, listens and watches, posts captions, answers.

One :class:`MeetingSession` per room (from the shared :class:`Runtime`), any number of peers per
room up to a limit. A peer's audio (48 kHz stereo Opus) is resampled to 16 kHz mono and fed to the
room's session; video frames are fed at a low rate; a data channel opened by the peer carries JSON
messages from the bot (``joined``, ``caption``, ``tentative``, ``slide``, ``answer``, ``error``) and
the peer's questions (``ask: <question>``). A peer that misbehaves gets an error and is dropped;
the room's session, and every other room, carry on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fractions
import hmac
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from pydantic import BaseModel, ConfigDict, Field

from app.metrics import Metrics
from app.signaling import JoinRefused, RateLimiter, create_app

if TYPE_CHECKING:
    from aiortc import RTCDataChannel

    from app.runtime import Runtime
    from app.session import MeetingSession

log = logging.getLogger("minutia.bot")

ASK_PREFIX = "ask:"
ASR_RATE = 16000


class BotSettings(BaseModel):
    """What an operator sets: the rooms and their tokens, and the limits that protect the bot."""

    model_config = ConfigDict(extra="forbid")

    rooms: dict[str, str] = Field(default_factory=dict, description="room name -> bearer token")
    max_peers_per_room: int = Field(4, gt=0)
    max_peers: int = Field(32, gt=0, description="peers over all rooms")
    joins_per_second: float = Field(1.0, gt=0, description="join rate per client address and room")
    join_burst: int = Field(5, gt=0)
    connect_timeout: float = Field(20.0, gt=0, description="seconds for a peer to connect after its offer")
    max_message_bytes: int = Field(4096, gt=0, description="largest data-channel message accepted")
    video_fps: float = Field(1.0, gt=0, description="video frames a second given to the session")
    audio_chunk_seconds: float = Field(0.2, gt=0, description="audio fed to the session in chunks this long")
    ask_workers: int = Field(2, gt=0, description="questions answered at once over all rooms")
    ice_hosts: list[str] | None = Field(None, description="host candidate addresses (e.g. ['127.0.0.1']); None: all")

    @classmethod
    def from_file(cls, path: str | Path) -> "BotSettings":
        """YAML (or JSON) with the fields above; ``rooms`` maps names to tokens."""
        import yaml

        from encoders.errors import InputError

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
            return cls(**data)
        except (OSError, yaml.YAMLError, TypeError, ValueError) as exc:
            raise InputError(f"bot settings {path}: {exc}") from exc


def restrict_ice_hosts(addresses: Sequence[str]) -> None:
    """Offer only these host candidates (process-wide: aioice reads its module function).

    aioice skips 127.0.0.1 by default; on loopback the bot and its peers need exactly that and no
    STUN server (see DESIGN.md).
    """
    import aioice.ice

    chosen = list(addresses)
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: list(chosen)


def ice_configuration() -> RTCConfiguration:
    return RTCConfiguration(iceServers=[])


def jsonable(value: Any) -> Any:
    """Dataclasses, numpy values and arrays as plain JSON values (thumbnails are left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not isinstance(getattr(value, f.name), np.ndarray)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if not isinstance(v, np.ndarray)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _float_or_none(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def captions(words: Sequence[Any]) -> list[dict]:
    """Committed words -> one caption per run of one speaker."""
    out: list[dict] = []
    for word in words:
        speaker, text = getattr(word, "speaker", ""), str(getattr(word, "text", word)).strip()
        start, end = getattr(word, "start", None), getattr(word, "end", None)
        if out and out[-1]["speaker"] == speaker:
            out[-1]["text"] = f"{out[-1]['text']} {text}".strip()
            out[-1]["end"] = end
        else:
            out.append({"type": "caption", "speaker": speaker, "start": start, "end": end, "text": text})
    return out


def answer_message(answer: Any, seconds: float) -> dict:
    return {
        "type": "answer",
        "question": answer.question,
        "text": answer.text,
        "citations": [{"start": c.start, "label": c.label, "speaker": c.speaker, "text": c.text}
                      for c in answer.citations],
        "seconds": round(seconds, 3),
    }


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

    def __init__(self, name: str, session: "MeetingSession") -> None:
        self.name = name
        self.session = session
        self.peers: dict[str, Peer] = {}
        self.audio_source: str | None = None  # the peer whose audio the session hears
        self.unsubscribe: Any = None

    def broadcast(self, message: dict) -> None:
        for peer in list(self.peers.values()):
            peer.send(message)


class RoomBot:
    """Rooms, peers and the plumbing between aiortc tracks and meeting sessions."""

    def __init__(self, runtime: "Runtime", settings: BotSettings, metrics: Metrics | None = None) -> None:
        self.runtime = runtime
        self.settings = settings
        self.rooms: dict[str, Room] = {}
        self.metrics = metrics or Metrics(self.sessions, self.peer_counts)
        self._limiter = RateLimiter(settings.joins_per_second, settings.join_burst)
        self._ask_pool = ThreadPoolExecutor(settings.ask_workers, thread_name_prefix="bot-ask")
        self._room_lock = asyncio.Lock()
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
    def authorize(self, room: str, token: str | None) -> None:
        expected = self.settings.rooms.get(room)
        if expected is None:
            raise JoinRefused(404, f"unknown room {room!r}")
        if not token:
            raise JoinRefused(401, "a bearer token for the room is required")
        if not hmac.compare_digest(token.encode(), expected.encode()):
            raise JoinRefused(403, "wrong token for this room")

    async def join(self, room_name: str, token: str | None, sdp: str, client: str = "?") -> tuple[str, str]:
        """Check, negotiate, and return (peer id, SDP answer); raises :class:`JoinRefused`."""
        outcome = "refused"
        try:
            if self._closed:
                raise JoinRefused(503, "the bot is shutting down")
            if not self._limiter.allow((client, room_name)):
                outcome = "rate_limited"
                raise JoinRefused(429, "too many join requests; slow down")
            self.authorize(room_name, token)
            media = [line for line in sdp.splitlines() if line.startswith("m=")]
            if not sdp.startswith("v=0") or not any(m.startswith(("m=audio", "m=video", "m=application")) for m in media):
                raise JoinRefused(400, "malformed SDP offer: it needs 'v=0' and an audio, video or data media section")
            if self.peer_total() >= self.settings.max_peers:
                raise JoinRefused(503, f"the bot is full ({self.settings.max_peers} peers)")
            room = await self._room(room_name)
            if len(room.peers) >= self.settings.max_peers_per_room:
                raise JoinRefused(503, f"room {room_name!r} is full ({self.settings.max_peers_per_room} peers)")
            pc = RTCPeerConnection(ice_configuration())
            peer = Peer(uuid.uuid4().hex[:10], room, pc, client)
            room.peers[peer.peer_id] = peer  # counted now, so concurrent joins respect the limits
            try:
                self._wire(peer)
                await pc.setRemoteDescription(RTCSessionDescription(sdp, "offer"))
                await pc.setLocalDescription(await pc.createAnswer())
            except Exception as exc:
                await self._drop(peer, f"negotiation failed: {exc}")
                raise JoinRefused(400, f"cannot answer this offer: {exc or type(exc).__name__} "
                                       "(supported: Opus/PCMU/PCMA/G722 audio, VP8/H264 video)") from None
            self._spawn(peer, self._reap_unconnected(peer))
            outcome = "joined"
            log.info("peer joined", extra={"room": room_name, "peer": peer.peer_id, "client": client})
            return peer.peer_id, pc.localDescription.sdp
        except JoinRefused as exc:
            log.info("join refused", extra={"room": room_name, "client": client, "status": exc.status,
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
                    session = await loop.run_in_executor(None, lambda: self.runtime.new_session(source=f"webrtc:{name}"))
                except Exception as exc:
                    log.exception("session for room %s failed", name)
                    raise JoinRefused(503, f"cannot start a meeting session: {exc}") from None
                room = Room(name, session)
                room.unsubscribe = session.subscribe(
                    lambda event, room=room: loop.call_soon_threadsafe(self._on_event, room, event))
                self.rooms[name] = room
            return room

    def _spawn(self, peer: Peer, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        peer.tasks.add(task)
        task.add_done_callback(peer.tasks.discard)

    def _wire(self, peer: Peer) -> None:
        pc = peer.pc

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self._spawn(peer, self._consume_audio(peer, track))
            elif track.kind == "video":
                self._spawn(peer, self._consume_video(peer, track))

        @pc.on("datachannel")
        def on_datachannel(channel: "RTCDataChannel") -> None:
            peer.channel = channel

            @channel.on("open")
            def on_open() -> None:
                self._greet(peer)

            @channel.on("message")
            def on_message(message: str | bytes) -> None:
                self._on_message(peer, message)

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
        log.info("peer left", extra={"room": room.name, "peer": peer.peer_id, "reason": reason})
        if room.audio_source == peer.peer_id:
            room.audio_source = None
        current = asyncio.current_task()
        for task in list(peer.tasks):
            if task is not current:
                task.cancel()
        await peer.pc.close()

    # ------------------------------------------------------------------ media
    async def _consume_audio(self, peer: Peer, track: MediaStreamTrack) -> None:
        """48 kHz stereo Opus frames -> 16 kHz mono int16 chunks -> session.feed_audio."""
        room = peer.room
        resampler = av.AudioResampler(format="s16", layout="mono", rate=ASR_RATE)
        chunk = int(self.settings.audio_chunk_seconds * ASR_RATE)
        pending: list[np.ndarray] = []
        held = 0
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                break
            if room.audio_source is None:
                room.audio_source = peer.peer_id
            if room.audio_source != peer.peer_id:
                self.metrics.dropped_frames.labels(room.name, "audio").inc()  # one speaker source per room
                continue
            for out in resampler.resample(frame):
                samples = out.to_ndarray().reshape(-1)
                pending.append(samples)
                held += samples.size
            if held >= chunk:
                self._feed_audio(peer, np.concatenate(pending))
                pending, held = [], 0
        if pending:
            self._feed_audio(peer, np.concatenate(pending))

    def _feed_audio(self, peer: Peer, samples: np.ndarray) -> None:
        try:
            peer.room.session.feed_audio(samples, ASR_RATE)
        except Exception as exc:
            self.metrics.dropped_frames.labels(peer.room.name, "audio").inc()
            log.warning("audio refused by session", extra={"room": peer.room.name, "error": str(exc)})

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
            try:
                room.session.feed_video(frame.to_ndarray(format="rgb24"))
            except Exception as exc:
                self.metrics.dropped_frames.labels(room.name, "video").inc()
                log.warning("video frame refused by session", extra={"room": room.name, "error": str(exc)})

    # ------------------------------------------------------------------ data channel
    def _on_message(self, peer: Peer, message: str | bytes) -> None:
        size = len(message.encode() if isinstance(message, str) else message)
        if size > self.settings.max_message_bytes:
            peer.send({"type": "error", "message": f"message of {size} bytes is over the limit of "
                                                   f"{self.settings.max_message_bytes}"})
            return
        if isinstance(message, bytes):
            peer.send({"type": "error", "message": "binary messages are not understood; send 'ask: <question>'"})
            return
        if not message.lower().startswith(ASK_PREFIX):
            peer.send({"type": "error", "message": "unknown message; send 'ask: <question>'"})
            return
        question = message[len(ASK_PREFIX):].strip()
        if peer.asking:
            peer.send({"type": "error", "message": "one question at a time, please"})
            return
        peer.asking = True
        self._spawn(peer, self._answer(peer, question))

    async def _answer(self, peer: Peer, question: str) -> None:
        from encoders.errors import InputError

        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            answer = await loop.run_in_executor(self._ask_pool, peer.room.session.ask, question)
        except InputError as exc:
            self.metrics.questions.labels("refused").inc()
            peer.send({"type": "error", "message": str(exc), "question": question})
            return
        except Exception as exc:
            self.metrics.questions.labels("failed").inc()
            log.exception("question failed", extra={"room": peer.room.name})
            peer.send({"type": "error", "message": f"the question failed: {exc}", "question": question})
            return
        finally:
            peer.asking = False
        elapsed = time.perf_counter() - started
        self.metrics.questions.labels("answered").inc()
        self.metrics.question_seconds.observe(elapsed)
        ttft = _float_or_none((await loop.run_in_executor(None, peer.room.session.snapshot)).kv.get("question_ttft"))
        self.metrics.question_ttft.observe(ttft if ttft is not None else elapsed)
        peer.send(answer_message(answer, elapsed))

    # ------------------------------------------------------------------ session events (from session threads)
    def _on_event(self, room: Room, event: Any) -> None:
        kind, payload = getattr(event, "kind", None), getattr(event, "payload", None)
        if kind == "words":
            for caption in captions(payload or []):
                room.broadcast(caption)
        elif kind == "tentative":
            room.broadcast({"type": "tentative", "text": str(payload or "")})
        elif kind == "slide":
            room.broadcast({"type": "slide", **(jsonable(payload) if isinstance(jsonable(payload), dict) else
                                                {"text": str(payload)})})
        elif kind in ("state", "error"):
            room.broadcast({"type": kind, "value": jsonable(payload)})

    # ------------------------------------------------------------------ shutdown
    async def close(self) -> None:
        """Hang up on every peer; sessions stay with the runtime (nothing transcribed is lost)."""
        self._closed = True
        for room in list(self.rooms.values()):
            for peer in list(room.peers.values()):
                await self._drop(peer, "bot shutting down")
            if room.unsubscribe is not None:
                room.unsubscribe()
        self._ask_pool.shutdown(wait=False, cancel_futures=True)


class BotServer:
    """The bot's HTTP server on its own thread and event loop (the CLI blocks on it; tests start and stop it)."""

    def __init__(self, runtime: "Runtime", settings: BotSettings, host: str = "127.0.0.1", port: int = 8080) -> None:
        import socket

        import uvicorn

        self.bot = RoomBot(runtime, settings)
        self.app = create_app(self.bot)
        self._socket = socket.create_server((host, port), reuse_port=False)
        self.host, self.port = self._socket.getsockname()[:2]
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off"))
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            await self.bot.close()

    def serve_forever(self) -> None:
        asyncio.run(self._serve())

    def start(self, timeout: float = 30.0) -> "BotServer":
        self._thread = threading.Thread(target=self.serve_forever, name="bot-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the bot server did not start")
            time.sleep(0.05)
        return self

    def call(self, coroutine: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the bot's loop (tests inspect rooms this way)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "BotServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_bot(runtime: "Runtime", settings: BotSettings, host: str = "127.0.0.1", port: int = 8080,
            console: Any = None) -> None:
    """`minutia bot`: serve until interrupted, then hang up and close the sessions."""
    server = BotServer(runtime, settings, host, port)
    if console is not None:
        rooms = ", ".join(settings.rooms) or "(none)"
        console.print(f"[green]minutia bot[/] on {server.url}: rooms {rooms}; POST /rooms/<room>/offer, GET /metrics")
    try:
        server.serve_forever()
    finally:
        runtime.close()


# ---------------------------------------------------------------------- the peer side (tests, smoke checks)
class FileAudioTrack(MediaStreamTrack):
    """A recording's audio as a WebRTC track: 20 ms frames of 48 kHz stereo s16, paced at ``speed`` x real time,
    then ``tail_seconds`` of silence (so the recogniser commits the last words), then the end of the track."""

    kind = "audio"
    RATE, FRAME = 48000, 960

    def __init__(self, path: str | Path, speed: float = 1.0, start: float = 0.0, seconds: float | None = None,
                 tail_seconds: float = 2.0, loop: bool = False) -> None:
        super().__init__()
        resampler = av.AudioResampler(format="s16", layout="stereo", rate=self.RATE)
        with av.open(str(path)) as container:
            pcm = np.concatenate([out.to_ndarray().reshape(-1, 2) for frame in container.decode(audio=0)
                                  for out in resampler.resample(frame)])
        if loop and seconds is not None:  # play the recording again until `seconds` are covered
            pcm = np.concatenate([pcm] * (1 + int((start + seconds) * self.RATE) // len(pcm)))
        end = len(pcm) if seconds is None else min(len(pcm), int((start + seconds) * self.RATE))
        silence = np.zeros((int(tail_seconds * self.RATE), 2), np.int16)
        self.pcm = np.concatenate([pcm[int(start * self.RATE):end], silence])
        self.speed = speed
        self.sent = 0
        self._started: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live" or self.sent >= len(self.pcm):
            self.stop()
            raise MediaStreamError
        self._started = self._started or time.perf_counter()
        delay = self._started + self.sent / self.RATE / self.speed - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        block = self.pcm[self.sent:self.sent + self.FRAME]
        if len(block) < self.FRAME:
            block = np.concatenate([block, np.zeros((self.FRAME - len(block), 2), np.int16)])
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(block).reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate, frame.pts = self.RATE, self.sent
        frame.time_base = fractions.Fraction(1, self.RATE)
        self.sent += self.FRAME
        return frame


class FileVideoTrack(MediaStreamTrack):
    """A recording's video frames as a WebRTC track, paced at ``speed`` x real time from ``start`` for ``seconds``."""

    kind = "video"

    def __init__(self, path: str | Path, speed: float = 1.0, start: float = 0.0, seconds: float | None = None) -> None:
        super().__init__()
        self.speed, self.start = speed, start
        self.end = float("inf") if seconds is None else start + seconds
        self._container = av.open(str(path))
        self._frames = self._container.decode(video=0)
        self._started: float | None = None
        self.sent = 0

    async def recv(self) -> av.VideoFrame:
        for frame in self._frames:
            if frame.time is None or frame.time < self.start:
                continue
            if frame.time > self.end or self.readyState != "live":
                break
            self._started = self._started or time.perf_counter()
            offset = frame.time - self.start
            delay = self._started + offset / self.speed - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            out = av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
            out.pts, out.time_base = int(offset / self.speed * 90000), fractions.Fraction(1, 90000)
            self.sent += 1
            return out
        self._container.close()
        self.stop()
        raise MediaStreamError


def slide_image(lines: Sequence[str], size: tuple[int, int] = (640, 360)) -> np.ndarray:
    """A plain slide (dark text on white) as HxWx3 uint8 RGB."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    try:
        font = ImageFont.truetype("DejaVuSans-Bold.ttf", 28)
    except OSError:
        font = ImageFont.load_default()
    for row, line in enumerate(lines):
        draw.text((30, 30 + row * 48), line, fill="black", font=font)
    return np.asarray(image)


class ImageTrack(MediaStreamTrack):
    """A video track that shows one still image at a few frames a second."""

    kind = "video"

    def __init__(self, image: np.ndarray, fps: float = 5.0) -> None:
        super().__init__()
        self.image, self.fps = image, fps
        self.frames = 0
        self._started: float | None = None

    async def recv(self) -> av.VideoFrame:
        self._started = self._started or time.perf_counter()
        delay = self._started + self.frames / self.fps - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        frame = av.VideoFrame.from_ndarray(self.image, format="rgb24")
        frame.pts, frame.time_base = int(self.frames * 90000 / self.fps), fractions.Fraction(1, 90000)
        self.frames += 1
        return frame


class RoomClient:
    """A peer that joins a room over HTTP signaling and collects the bot's data-channel messages."""

    def __init__(self, url: str, room: str, token: str | None, tracks: Sequence[Any] = ()) -> None:
        self.url, self.room, self.token = url.rstrip("/"), room, token
        self.pc = RTCPeerConnection(ice_configuration())
        for track in tracks:
            self.pc.addTrack(track)
        self.channel = self.pc.createDataChannel("minutia")
        self.messages: list[dict] = []
        self.peer_id: str | None = None
        self._arrived = asyncio.Event()
        self._open = asyncio.Event()
        self.channel.on("open", self._open.set)
        self.channel.on("message", self._on_message)

    def _on_message(self, message: str) -> None:
        self.messages.append(json.loads(message))
        self._arrived.set()

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def join(self, timeout: float = 20.0) -> "RoomClient":
        """Post the offer; raises httpx.HTTPStatusError with the bot's message on refusal."""
        import httpx

        sdp = await self.offer()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token is not None else {}
        async with httpx.AsyncClient(timeout=timeout) as http:
            response = await http.post(f"{self.url}/rooms/{self.room}/offer", json={"sdp": sdp, "type": "offer"},
                                       headers=headers)
        response.raise_for_status()
        body = response.json()
        self.peer_id = body["peer_id"]
        await self.pc.setRemoteDescription(RTCSessionDescription(body["sdp"], body["type"]))
        await asyncio.wait_for(self._open.wait(), timeout)
        return self

    def send(self, text: str) -> None:
        self.channel.send(text)

    async def wait_for(self, predicate: Any, timeout: float) -> dict:
        """The first message (old or new) for which ``predicate`` is true."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for message in self.messages[seen:]:
                if predicate(message):
                    return message
            seen = len(self.messages)
            self._arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message in {timeout} s; last: {self.messages[-3:]}")
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def close(self) -> None:
        await self.pc.close()

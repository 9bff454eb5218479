"""The other end of the room bot: WebRTC peers that play recordings and slides into a room and collect
the bot's messages. Tests and benchmarks use them; the bot itself never imports this package."""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from pathlib import Path
from typing import Any, Sequence

import av
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from app.rooms.ice import ice_configuration


class FileAudioTrack(MediaStreamTrack):
    """A recording's audio as a WebRTC track: 20 ms frames of 48 kHz stereo s16, paced at ``speed`` x real time:
    ``lead_seconds`` of silence (a participant who speaks later), the recording from ``start`` for ``seconds``,
    ``tail_seconds`` of silence, then the end of the track. ``stalls``: (track second, wall seconds) pairs, a network
    hiccup: the frame at that point of the track is held that long, then the held frames go out at once."""

    kind = "audio"
    RATE, FRAME = 48000, 960

    def __init__(self, path: str | Path, speed: float = 1.0, start: float = 0.0, seconds: float | None = None,
                 tail_seconds: float = 2.0, loop: bool = False, lead_seconds: float = 0.0,
                 stalls: Sequence[tuple[float, float]] = ()) -> None:
        super().__init__()
        resampler = av.AudioResampler(format="s16", layout="stereo", rate=self.RATE)
        with av.open(str(path)) as container:
            pcm = np.concatenate([out.to_ndarray().reshape(-1, 2) for frame in container.decode(audio=0)
                                  for out in resampler.resample(frame)])
        if loop and seconds is not None:  # play the recording again until `seconds` are covered
            pcm = np.concatenate([pcm] * (1 + int((start + seconds) * self.RATE) // len(pcm)))
        end = len(pcm) if seconds is None else min(len(pcm), int((start + seconds) * self.RATE))
        lead, tail = (np.zeros((int(t * self.RATE), 2), np.int16) for t in (lead_seconds, tail_seconds))
        self.pcm = np.concatenate([lead, pcm[int(start * self.RATE):end], tail])
        self.speed = speed
        self.stalls = sorted(stalls)
        self.sent = 0
        self._started: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live" or self.sent >= len(self.pcm):
            self.stop()
            raise MediaStreamError
        self._started = self._started or time.perf_counter()
        delay = self._started + self.sent / self.RATE / self.speed - time.perf_counter()
        if self.stalls and self.sent / self.RATE >= self.stalls[0][0]:
            delay = max(delay, 0.0) + self.stalls.pop(0)[1]  # the pace is not moved: what was held bursts out
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

    def __init__(self, url: str, room: str, token: str | None, tracks: Sequence[Any] = (),
                 name: str | None = None) -> None:
        self.url, self.room, self.token, self.name = url.rstrip("/"), room, token, name
        self.pc = RTCPeerConnection(ice_configuration())
        for track in tracks:
            sender = self.pc.addTrack(track)
            # A track that ends hangs up its sender (RTCP BYE), so the bot sees the end of that stream.
            track.on("ended", lambda sender=sender: asyncio.ensure_future(sender.stop()))
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
            offer = {"sdp": sdp, "type": "offer", **({"name": self.name} if self.name is not None else {})}
            response = await http.post(f"{self.url}/rooms/{self.room}/offer", json=offer, headers=headers)
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

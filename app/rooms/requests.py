"""What a peer asks the room bot on its data channel: a question, a forget (said back first, done on 'forget: yes'),
a rename. Each request runs as one of the peer's tasks, one at a time per peer; its answer or error goes to that peer,
and what changes the meeting (a forget, a rename) goes to everyone in the room."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from concurrent.futures import Executor
from typing import Any, Protocol

import numpy as np

from app.live.forget import FORGET_CONFIRM_S
from app.platform.metrics import Metrics
from app.rooms.bot_meetings import Meetings
from app.rooms.bot_settings import BotSettings
from app.rooms.room import Peer, Room
from app.rooms.room_messages import answer_message, float_or_none, line_message

log = logging.getLogger("minutia.bot")

ASK_PREFIX = "ask:"
FORGET_PREFIX = "forget:"  # "forget: <speaker>" or "forget: screen": the meeting goes on without them (app/live/forget.py)
FORGET_CONFIRM = "yes"  # "forget: yes" does the forget the peer asked for last
RENAME_PREFIX = "rename:"  # "rename: <speaker> = <name>": the name people know that speaker by


class Bot(Protocol):
    """What requests need of the room bot (app/rooms/bot.RoomBot), which imports this module."""

    settings: BotSettings
    metrics: Metrics
    meetings: Meetings
    ask_pool: Executor  # questions: the model's time, a few at once
    finish_pool: Executor  # finishing and rebuilding meetings: never behind the questions

    def spawn(self, peer: Peer, coroutine: Any) -> None: ...

    def swap(self, room: Room, session: Any) -> None: ...

    def next_session(self, room_name: str, old: Any) -> Any: ...


class PeerRequests:
    """The requests of a room bot's peers, served against the bot's rooms and where their meetings run."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    def on_message(self, peer: Peer, message: str | bytes) -> None:
        size = len(message.encode() if isinstance(message, str) else message)
        if size > self.bot.settings.max_message_bytes:
            peer.send({"type": "error", "message": f"message of {size} bytes is over the limit of "
                                                   f"{self.bot.settings.max_message_bytes}"})
            return
        if isinstance(message, bytes):
            peer.send({"type": "error", "message": "binary messages are not understood; send 'ask: <question>'"})
            return
        lowered = message.lower()
        if not lowered.startswith((ASK_PREFIX, FORGET_PREFIX, RENAME_PREFIX)):
            peer.send({"type": "error", "message": "unknown message; send 'ask: <question>', "
                                                   "'rename: <speaker> = <name>' or 'forget: <speaker or screen>'"})
            return
        if peer.asking:
            peer.send({"type": "error", "message": "one request at a time, please"})
            return
        peer.asking = True
        if lowered.startswith(FORGET_PREFIX):
            what = message[len(FORGET_PREFIX):].strip()
            if what.lower() == FORGET_CONFIRM:
                pending, peer.pending_forget = peer.pending_forget, None
                if pending is None or time.monotonic() - pending[1] > FORGET_CONFIRM_S:
                    peer.asking = False
                    peer.send({"type": "error", "message": "nothing to confirm: send 'forget: <speaker or screen>' "
                                                           "first", "forget": what})
                    return
                self.bot.spawn(peer, self.forget(peer, pending[0]))
            else:
                self.bot.spawn(peer, self.ask_to_confirm(peer, what))
        elif lowered.startswith(RENAME_PREFIX):
            self.bot.spawn(peer, self.rename(peer, message[len(RENAME_PREFIX):]))
        else:
            self.bot.spawn(peer, self.answer(peer, message[len(ASK_PREFIX):].strip()))

    async def answer(self, peer: Peer, question: str) -> None:
        from encoders.errors import InputError

        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        room = peer.room
        try:
            async with room.session_lock:  # never the session a continuation is closing
                session = room.session
                answer = await loop.run_in_executor(self.bot.ask_pool, session.ask, question)
                elapsed = time.perf_counter() - started
                snapshot = await loop.run_in_executor(None, session.snapshot)
        except InputError as exc:
            self.bot.metrics.questions.labels("refused").inc()
            peer.send({"type": "error", "message": str(exc), "question": question})
            return
        except Exception as exc:
            self.bot.metrics.questions.labels("failed").inc()
            log.exception("question failed", extra={"room": peer.room.name})
            peer.send({"type": "error", "message": f"the question failed: {exc}", "question": question})
            return
        finally:
            peer.asking = False
        self.bot.metrics.questions.labels("answered").inc()
        self.bot.metrics.question_seconds.observe(elapsed)
        ttft = float_or_none(snapshot.kv.get("question_ttft"))
        self.bot.metrics.question_ttft.observe(ttft if ttft is not None else elapsed)
        peer.send(answer_message(answer, elapsed))

    async def ask_to_confirm(self, peer: Peer, speaker: str) -> None:
        """A forget is destructive: the bot first says what will go, and does it on 'forget: yes' from the same peer
        within FORGET_CONFIRM_S (issue 49). A speaker the meeting does not have is refused at once."""
        from app.live.lineage import is_screen

        try:
            if not speaker:
                peer.send({"type": "error", "message": "say what to forget: 'forget: <speaker>' (a name or a label "
                                                       "such as SPEAKER_01) or 'forget: screen'", "forget": speaker})
                return
            if not is_screen(speaker) and not re.fullmatch(r"SPEAKER_\d+", speaker):
                loop = asyncio.get_running_loop()
                async with peer.room.session_lock:
                    transcript = await loop.run_in_executor(None, peer.room.session.transcript)
                speakers = list(dict.fromkeys(t.speaker for t in transcript.turns))
                if not any(s.lower() == speaker.lower() for s in speakers):
                    peer.send({"type": "error", "message": f"no speaker {speaker!r} in this meeting; its speakers are "
                                                           f"{', '.join(speakers) or 'none yet'}", "forget": speaker})
                    return
            peer.pending_forget = (speaker, time.monotonic())
            what = ("the slides read so far" if is_screen(speaker) else f"everything {speaker} said so far")
            peer.send({"type": "confirm", "forget": speaker,
                       "message": f"forget {speaker}? This removes {what} from the meeting and the model's memory for "
                                  f"everyone in the room. Send 'forget: {FORGET_CONFIRM}' to do it."})
        finally:
            peer.asking = False

    async def forget(self, peer: Peer, speaker: str) -> None:
        """Forget one speaker while the meeting goes on (any peer of the room may: each joined with its token).
        The room's meeting is rebuilt without that speaker's words and goes on in the rebuilt session; audio that
        arrives meanwhile waits and is fed to it. Everyone in the room is sent the rebuilt transcript."""
        from encoders.errors import InputError

        room, loop = peer.room, asyncio.get_running_loop()
        try:
            if not speaker:
                raise InputError("say what to forget: 'forget: <speaker>' (a name or a label such as SPEAKER_01) "
                                 "or 'forget: screen'")
            async with room.session_lock:
                was_finished, room.parked = room.finished, []
                try:
                    session, report = await loop.run_in_executor(
                        self.bot.finish_pool, self.bot.meetings.forget, room.session, speaker)
                    self.bot.swap(room, session)
                    room.held_lines = []  # lines of the old session, the forgotten speaker's among them
                finally:
                    parked, room.parked = room.parked, None
                    await self._settle(room, parked, was_finished)
                transcript = room.session.transcript()
        except InputError as exc:
            peer.send({"type": "error", "message": str(exc), "forget": speaker})
            return
        except Exception:
            log.exception("forget failed", extra={"room": room.name})
            peer.send({"type": "error", "message": "the forget failed on an unexpected error (the details are in "
                                                   "the bot's log)", "forget": speaker})
            return
        finally:
            peer.asking = False
        log.info("source forgotten", extra={"room": room.name, "source": report.forgotten,
                                            "words_removed": report.words_removed, "blocks": report.blocks})
        room.recent_words.clear()
        room.broadcast({"type": "forgot", "source": report.forgotten, "speaker": report.speaker, "name": report.name,
                        "words_removed": report.words_removed, "slides_removed": report.slides_removed,
                        "lines": [line_message(turn, None) for turn in transcript.turns]})

    async def rename(self, peer: Peer, request: str) -> None:
        """'rename: SPEAKER_01 = Dana': everyone in the room gets the transcript with the new name. Under the
        room's session lock, so that a forget swapping sessions meanwhile cannot lose the name."""
        from encoders.errors import InputError

        speaker, sep, name = request.partition("=")
        room = peer.room
        try:
            if not sep or not speaker.strip():
                raise InputError("say whom to rename and how: 'rename: <speaker> = <name>'")
            async with room.session_lock:
                label = room.session.rename_speaker(speaker.strip(), name)
                transcript = room.session.transcript()
        except InputError as exc:
            peer.send({"type": "error", "message": str(exc), "rename": request.strip()})
            return
        finally:
            peer.asking = False
        room.broadcast({"type": "renamed", "speaker": label, "name": " ".join(name.split()),
                        "lines": [line_message(turn, None) for turn in transcript.turns]})

    async def _settle(self, room: Room, parked: list[tuple[np.ndarray, list]], was_finished: bool) -> None:
        """After a forget, done or refused (call with the room's session lock held): the audio that waited goes to
        the room's session; a session the forget closed, or finished while audio waited, is continued as after
        the end of the stream; a room that had finished stays finished."""
        loop = asyncio.get_running_loop()
        session = room.session
        if not self.bot.meetings.alive(session) or (parked and session.state == "finished"):
            session = await loop.run_in_executor(None, self.bot.next_session, room.name, session)
            self.bot.swap(room, session)
        if parked:
            self.bot.meetings.feed(session, np.concatenate([samples for samples, _ in parked]),
                                   [s for _, speakers in parked for s in speakers], room.participants)
        elif was_finished or session.state == "finished":
            await loop.run_in_executor(self.bot.finish_pool, session.finish)
            room.finished = True


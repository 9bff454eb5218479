"""The room bot served over HTTP (app/rooms/signaling.py's endpoints) on a thread and event loop of its own:
`minutia bot` blocks on it, tests start and stop it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

from app.rooms.bot import RoomBot
from app.rooms.bot_meetings import LocalMeetings, Meetings
from app.rooms.bot_settings import BotSettings
from app.rooms.signaling import create_app

if TYPE_CHECKING:
    from app.live.runtime import Runtime


class BotServer:
    """The bot's HTTP server on its own thread and event loop (the CLI blocks on it; tests start and stop it)."""

    def __init__(self, runtime: "Runtime | None", settings: BotSettings, host: str = "127.0.0.1", port: int = 8080,
                 meetings: Meetings | None = None) -> None:
        import socket

        import uvicorn

        self.bot = RoomBot(runtime, settings, meetings=meetings)
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
        watcher = asyncio.ensure_future(self.bot.admission.watch_loop())
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            watcher.cancel()
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


def run_bot(runtime: "Runtime | None", settings: BotSettings, host: str = "127.0.0.1", port: int = 8080,
            console: Any = None, meetings: Meetings | None = None) -> None:
    """`minutia bot`: serve until interrupted, then hang up and close the sessions (or the rooms' actors)."""
    server = BotServer(runtime, settings, host, port, meetings=meetings)
    if console is not None:
        rooms = ", ".join(settings.rooms) or "(none)"
        where = "" if meetings is None or isinstance(meetings, LocalMeetings) else "; meetings on the Ray cluster"
        console.print(f"[green]minutia bot[/] on {server.url}: rooms {rooms}; POST /rooms/<room>/offer, GET /metrics"
                      f"{where}")
    try:
        server.serve_forever()
    finally:
        if meetings is not None:
            meetings.close()
        if runtime is not None:
            runtime.close()

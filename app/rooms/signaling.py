"""HTTP signaling for the room bot: a peer posts an SDP offer to a room and gets the bot's answer.

FastAPI, so the endpoints have an OpenAPI schema (the tests fuzz it). Errors are JSON
``{"detail": "..."}`` with a status that says whose fault it is: 400 bad offer, 401 no token,
422 a body that is not an offer (or a name that cannot be a participant's), 409 a name another peer in the room has,
403 unknown room or wrong token (the same answer, so names cannot be probed), 413 offer too large, 429 too many joins, 503 room or bot full.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Literal, Protocol

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from app.platform.metrics import Metrics

log = logging.getLogger("minutia.signaling")

MAX_SDP_CHARS = 65536


class Offer(BaseModel):
    sdp: str = Field(..., max_length=MAX_SDP_CHARS, description="the peer's SDP offer")
    type: Literal["offer"] = "offer"
    name: str | None = Field(None, max_length=200, description="the participant's name: what this peer's microphone "
                             "says is attributed to it (app/rooms/participants.py); without one, the voice diarizer decides")


class Answer(BaseModel):
    sdp: str
    type: Literal["answer"] = "answer"
    peer_id: str = Field(..., description="the bot's id for this peer (in logs and data-channel messages)")


class Problem(BaseModel):
    detail: str


class BodyLimit:
    """ASGI middleware: a request body is read here, at most ``limit`` bytes, before the app sees it. A larger
    one gets 413 as soon as it passes the limit, whether it came with a Content-Length or chunked (a chunked
    body of 100 MB would otherwise be read whole and parsed)."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await self._refuse(send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    async def _refuse(self, send) -> None:
        # Connection: close, so the server drops the connection instead of draining the rest of the body.
        await JSONResponse({"detail": f"request body over {self.limit} bytes"}, status_code=413,
                           headers={"connection": "close"})({"type": "http"}, _no_receive, send)


async def _no_receive():
    return {"type": "http.disconnect"}


class JoinRefused(Exception):
    """A join the bot turns down; ``status`` is the HTTP status the peer gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RateLimiter:
    """Token bucket per key: ``rate`` joins a second on average, bursts of ``burst``."""

    def __init__(self, rate: float, burst: int, max_keys: int = 10000) -> None:
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: dict[object, tuple[float, float]] = {}

    def allow(self, key: object, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if len(self._buckets) >= self.max_keys and key not in self._buckets:
            self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < self.burst / self.rate}
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1.0, now)
        return True


class Bot(Protocol):
    """What the endpoints call (app.rooms.bot.RoomBot, which serves them: the bot imports this module, never the
    other way round)."""

    metrics: Metrics

    async def join(self, room_name: str, token: str | None, sdp: str, client: str = "?",
                   name: str | None = None) -> tuple[str, str]: ...

    def peer_counts(self) -> dict[str, int]: ...


_bearer = HTTPBearer(auto_error=False, description="the room's token")
_ERRORS = {code: {"model": Problem} for code in (400, 401, 403, 404, 409, 413, 429, 503)}


def create_app(bot: Bot) -> FastAPI:
    """The signaling API for one bot; /metrics serves the bot's Prometheus registry."""
    api = FastAPI(title="minutia room bot", version="1", docs_url=None, redoc_url=None)

    api.add_middleware(BodyLimit, limit=2 * MAX_SDP_CHARS)

    @api.exception_handler(RequestValidationError)
    async def not_an_offer(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 says what is wrong, never echoing the input back (it may be large, or not the sender's own)."""
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return JSONResponse({"detail": f"not an offer: {where}: {first.get('msg', 'invalid')}"}, status_code=422)

    @api.post("/rooms/{room}/offer", response_model=Answer, responses=_ERRORS)
    async def offer(room: str, body: Offer, request: Request,
                    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Answer:
        client = request.client.host if request.client else "?"
        token = credentials.credentials if credentials is not None else None
        try:
            peer_id, sdp = await bot.join(room, token, body.sdp, client, name=body.name)
        except JoinRefused as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, exc.message, headers=headers) from None
        return Answer(sdp=sdp, peer_id=peer_id)

    @api.get("/healthz")
    def healthz() -> dict[str, object]:
        counts = bot.peer_counts()  # no room names: they are not for anyone without a token
        return {"ok": True, "rooms": len(counts), "peers": sum(counts.values())}

    @api.get("/metrics", response_class=Response)
    def metrics() -> Response:
        payload, content_type = bot.metrics.render()
        return Response(payload, media_type=content_type)

    return api

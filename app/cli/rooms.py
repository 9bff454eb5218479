"""The room bot: bot (WebRTC rooms, locally or as Ray actors)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from app.cli.common import ASROpt, ConfigOpt, LLMOpt, _settings, app, err
from encoders.errors import InputError


def _bot_rooms(rooms: list[str]) -> dict[str, str]:
    import os

    pairs = list(rooms) + [p for p in os.environ.get("MINUTIA_BOT_ROOMS", "").split(",") if p.strip()]
    parsed: dict[str, str] = {}
    for pair in pairs:
        name, sep, token = pair.strip().partition("=")
        if not sep or not name or not token:
            raise InputError(f"room {pair!r} must be NAME=TOKEN")
        parsed[name] = token
    return parsed


@app.command()
def bot(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    room: Annotated[Optional[list[str]], typer.Option("--room", help="NAME=TOKEN, repeatable (also MINUTIA_BOT_ROOMS)")] = None,
    rooms_file: Annotated[Optional[Path], typer.Option("--rooms", help="YAML bot settings: rooms (name: token) and limits")] = None,
    ice_host: Annotated[Optional[list[str]], typer.Option("--ice-host", help="only these ICE host addresses (default: the --host address unless it is 0.0.0.0)")] = None,
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="run each room's meeting as an actor on this Ray cluster (auto or HOST:PORT; 'local' starts one here); the store must be redis")] = None,
    cpus_per_room: Annotated[float, typer.Option("--cpus-per-room", help="CPUs Ray reserves for each room's actor")] = 1.0,
    config: ConfigOpt = None, llm: LLMOpt = None, asr_model: ASROpt = None,
) -> None:
    """Serve WebRTC rooms: captions, slides and answers over a data channel; /metrics for Prometheus."""
    from app.live.runtime import Runtime
    from app.platform.metrics import configure_json_logging
    from app.rooms.bot_server import run_bot
    from app.rooms.bot_settings import BotSettings
    from app.rooms.ice import listen_ice_hosts

    bot_settings = BotSettings.from_file(rooms_file) if rooms_file else BotSettings()
    bot_settings.rooms.update(_bot_rooms(room or []))
    if room:
        err.print("[yellow]note:[/] tokens given with --room show in the process list; MINUTIA_BOT_ROOMS or "
                  "--rooms FILE keep them out of it", soft_wrap=True)
    if ice_host:
        bot_settings.ice_hosts = list(ice_host)
    elif bot_settings.ice_hosts is None:
        bot_settings.ice_hosts = listen_ice_hosts(host)
    if not bot_settings.rooms:
        raise InputError("no rooms: give --room NAME=TOKEN, --rooms FILE or MINUTIA_BOT_ROOMS")
    configure_json_logging()
    settings = _settings(config, llm, asr_model)
    if ray_address is not None:
        run_bot(None, bot_settings, host, port, console=err,
                meetings=_cluster_meetings(settings, ray_address, cpus_per_room))
        return
    runtime = Runtime(settings)
    with err.status("loading models"):
        runtime.warm_up()
    run_bot(runtime, bot_settings, host, port, console=err)


def _cluster_meetings(settings, ray_address: str, cpus_per_room: float):
    """The bot's rooms as Ray actors; they survive a lost node only through a store every node reads (Redis)."""
    from app.rooms.bot_meetings import ClusterMeetings
    from app.rooms.room_fleet import FleetOptions

    if settings.store.backend != "redis" and ray_address != "local":
        raise InputError("rooms on a Ray cluster keep their meetings in Redis: set store.backend: redis and "
                         "store.redis_url (a disk store is not shared between nodes; --ray-address local may use it)")
    options = FleetOptions(ray_address=None if ray_address == "local" else ray_address, cpus_per_room=cpus_per_room)
    with err.status("joining the Ray cluster"):
        return ClusterMeetings(settings, options)

"""Which network addresses the bot offers its WebRTC peers (ICE host candidates; no STUN server: see DESIGN.md)."""

from __future__ import annotations

from typing import Sequence

from aiortc import RTCConfiguration


def restrict_ice_hosts(addresses: Sequence[str]) -> None:
    """Offer only these host candidates (process-wide: aioice reads its module function).

    aioice skips 127.0.0.1 by default; on loopback the bot and its peers need exactly that and no
    STUN server (see DESIGN.md).
    """
    import aioice.ice

    chosen = list(addresses)
    aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: list(chosen)


def listen_ice_hosts(listen_host: str) -> list[str] | None:
    """ICE host candidates for a bot listening on ``listen_host``: that interface alone (a bot bound to
    127.0.0.1 must not open media sockets on every interface); None (all) for a wildcard address."""
    import socket

    from encoders.errors import InputError

    if listen_host in ("", "0.0.0.0", "::"):
        return None
    try:
        infos = socket.getaddrinfo(listen_host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InputError(f"cannot resolve the listen address {listen_host!r}: {exc.strerror or exc}") from None
    return list(dict.fromkeys(info[4][0] for info in infos))  # IPv4 and IPv6, in the resolver's order


def ice_configuration() -> RTCConfiguration:
    return RTCConfiguration(iceServers=[])

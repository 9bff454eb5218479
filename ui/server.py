"""Serving the live page: loopback unless remote access is asked for (and then behind a password), a port
checked before any model loads, and the running server's handle."""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr

from encoders.errors import InputError
from ui.app import LivePage
from ui.page import build_page
from ui.page_text import CSS, HEAD
from ui.settings import UISettings

if TYPE_CHECKING:
    from app.live.runtime import Runtime

def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def check_bind(host: str, allow_remote: bool, auth: tuple[str, str] | None) -> None:
    """Only loopback unless remote access is asked for explicitly, and then only behind a password."""
    if is_loopback(host):
        return
    if not allow_remote:
        raise InputError(f"refusing to listen on {host}: only loopback is served unless remote access is asked for explicitly (--allow-remote)")
    if not auth or not auth[1]:
        raise InputError(f"refusing to listen on {host} without a password: give --share-password")


def check_port(host: str, port: int) -> None:
    """The port is free to serve on; else a one-line error that says what to do (before any model loads)."""
    import socket

    if not 0 < port < 65536:
        raise InputError(f"--port {port} is not a TCP port (1-65535)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server sets it: a closed one's wait is no clash
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise InputError(f"cannot serve on {host}:{port}: {exc.strerror or exc} (another program, or another "
                             "minutia-ui, may be using it: choose another with --port)") from None


@dataclass
class Server:
    """A running page: its address, the Blocks, and how to stop it."""

    url: str
    demo: gr.Blocks

    @property
    def page(self) -> LivePage:
        return self.demo.live  # type: ignore[attr-defined]

    def close(self) -> None:
        self.page.close()
        self.demo.close()


def serve(
    runtime: Runtime | None = None,
    host: str = "127.0.0.1",
    port: int = 7860,
    auth: tuple[str, str] | None = None,
    allow_remote: bool = False,
    ui_settings: UISettings | None = None,
    block: bool = True,
) -> Server:
    """Serve the page. Loopback by default; any other interface needs ``allow_remote`` and ``auth``."""
    check_bind(host, allow_remote, auth)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if runtime is None:
        from app.platform.config import load_settings
        from app.live.runtime import Runtime

        runtime = Runtime(load_settings())
    ui_settings = ui_settings or UISettings()
    demo = build_page(runtime, ui_settings)
    demo.queue(default_concurrency_limit=None)
    check_port(host, port)
    _, url, _ = demo.launch(
        server_name=host, server_port=port, auth=auth, prevent_thread_lock=True, quiet=True, ssr_mode=False,
        share=False, max_file_size=f"{ui_settings.max_upload_mb:g}mb", footer_links=[], css=CSS, head=HEAD,
        allowed_paths=[str(demo.live.media_root)],  # type: ignore[attr-defined]  # the players' recordings only
    )
    server = Server(url=url or f"http://{host}:{port}/", demo=demo)
    if block:
        try:
            demo.block_thread()
        finally:
            server.close()
    return server

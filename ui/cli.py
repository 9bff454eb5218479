"""`python -m ui` / `ui.cli:main`: serve the live meeting page (loopback unless asked otherwise)."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from encoders.errors import InputError

err = Console(stderr=True)


def ui(
    host: Annotated[str, typer.Option(help="interface to listen on; anything but loopback needs --allow-remote")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 7860,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="allow a non-loopback --host (then a password is required)")] = False,
    share_password: Annotated[
        Optional[str], typer.Option("--share-password", envvar="MINUTIA_UI_PASSWORD", help="password for user 'minutia' (Gradio auth)")
    ] = None,
    config: Annotated[Optional[str], typer.Option("--config", "-c", help="preset name (configs/*.yaml) or YAML path")] = None,
    llm: Annotated[Optional[str], typer.Option("--llm", help="LLM: 'gemma-3-270m', a local HF folder or a cached hub id")] = None,
) -> None:
    """Serve the live meeting page: the bundled sample ready to replay, microphone, webcam, Q&A, KV dashboard."""
    from app.platform.config import load_settings
    from app.live.runtime import Runtime
    from ui.server import check_bind, check_port, serve

    auth = ("minutia", share_password) if share_password else None
    check_bind(host, allow_remote, auth)  # before loading any model
    check_port(host, port)
    runtime = Runtime(load_settings(config, {"llm": {"model": llm}}))
    with err.status("loading Whisper and the LLM"):
        runtime.warm_up()
    server = serve(runtime, host=host, port=port, auth=auth, allow_remote=allow_remote, block=False)
    err.print(f"[green]minutia live page:[/] {escape(server.url)}  (Ctrl+C to stop)")
    try:
        server.demo.block_thread()
    finally:
        server.close()
        runtime.close()


def main() -> None:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        typer.run(ui)
    except InputError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

"""The `minutia` command: one module per command group (recordings, live, rooms, store); each command parses its
flags, calls the app and prints. ``main`` turns a bad input into one line and a non-zero exit."""

from __future__ import annotations

import sys

from rich.markup import escape

# Each group registers its commands on app, in the order --help lists them.
from app.cli import recordings  # noqa: F401, I001
from app.cli import library, live, rooms, store  # noqa: F401, I001
from app.cli.common import _remove_empty_outputs, app, err
from app.cli.recordings import ask, summarize, transcribe  # noqa: F401  (the commands as functions, for callers)
from encoders.errors import InputError


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")  # webrtcvad, via resemblyzer
    try:
        try:
            app()
        except InputError as exc:
            # One line, whatever the console width; paths and messages are text, never console markup.
            err.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            sys.exit(2)
        except KeyboardInterrupt:
            err.print("[red]interrupted[/]")
            sys.exit(130)
    except SystemExit as exit_:  # every failing end (typer's own exits too) leaves no empty folder it made
        if exit_.code not in (0, None):
            _remove_empty_outputs()
        raise


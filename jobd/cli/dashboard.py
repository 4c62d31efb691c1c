"""`job ui`: sign in to the broker's web dashboard (docs/dashboard.md).

Asks the broker for a one-time code (with the token `job` uses), prints the login URL
carrying it and, where a browser plausibly exists, opens it without waiting for it. The
URL works once, within a minute; the session it starts is the token's, with its scope.
"""

from __future__ import annotations

import os
import sys

import click

from jobd.cli.options import client, output_option, print_documents

__all__ = ["VERBS"]


def _browser_plausible() -> bool:
    """A graphical session: on Linux and the BSDs, a display. Over SSH, or on a headless
    box, `webbrowser` would pick a text browser that takes over the terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _open(url: str) -> bool:
    import webbrowser

    try:
        return webbrowser.open(url, new=2)
    except webbrowser.Error:
        return False


@click.command()
@click.option("--no-open", is_flag=True, help="Print the URL only; do not open a browser.")
@output_option("text")
def ui(no_open: bool, output: str) -> None:
    """Print (and open) a login URL for the web dashboard at /ui.

    The URL works once, within a minute; the dashboard then shows what this token may
    see, for 12 hours or until the token is revoked. With `-o json` it prints
    `{"url": ..., "expires_in_s": ...}`.
    """
    with client() as broker:
        answer = broker.login_code()
        url = broker.server + answer["path"]
    if output == "text":
        click.echo(url)
    else:  # for a script that opens it itself: the URL and how long it works
        print_documents([{"url": url, "expires_in_s": answer["expires_in_s"]}], output, single=True)
    opened = not no_open and _browser_plausible() and _open(url)
    if not opened and output == "text":
        click.echo(
            f"Open this URL in a browser within {answer['expires_in_s']:g} s; it works once.",
            err=True,
        )


VERBS = [ui]

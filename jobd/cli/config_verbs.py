"""`job config ...` (contexts, as `kubectl config`) and `job completion SHELL`.

Neither talks to a broker, and both must work while the config file is broken, since they
are how a user repairs it: `job`'s group skips resolving a connection for them (STANDALONE).
What a context is and how the settings are resolved is in contexts.py.
"""

from __future__ import annotations

import os

import click
from click.shell_completion import CompletionItem, get_completion_class

from jobd.cli import render
from jobd.cli.failure import Failure

__all__ = ["STANDALONE", "VERBS", "complete_context"]

SHELLS = ("bash", "zsh", "fish")


def context_names(incomplete: str) -> list[CompletionItem]:
    """The contexts starting with `incomplete`, for shell completion (none if unreadable)."""
    from jobd.cli.contexts import ConfigError, load_config

    try:
        names = load_config().contexts
    except ConfigError:
        return []
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def complete_context(
    _ctx: click.Context, _param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """`shell_complete` of an option or argument naming a context."""
    return context_names(incomplete)


class _ConfigGroup(click.Group):
    """The contexts' errors as `job`'s one line."""

    def invoke(self, ctx: click.Context) -> object:
        from jobd.cli.contexts import ConfigError

        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise Failure(str(exc)) from None


@click.group(cls=_ConfigGroup)
def config() -> None:
    """Contexts: named brokers with their token files, as kubeconfig's.

    \b
    The file: $JOBD_CONFIG, else $XDG_CONFIG_HOME/jobd/config.yaml, else
    ~/.config/jobd/config.yaml. It holds token file paths, never tokens.
    Each setting: its flag, then its environment variable (JOBD_URL, JOBD_TOKEN,
    JOBD_TOKEN_FILE), then the context (--context, JOBD_CONTEXT, current_context),
    then the default.

    \b
    Examples:
      job config set-context lab --server https://gpu1.lab:8765 \\
          --token-file ~/.config/jobd/lab.token --project vision
      job config use-context lab
      job --context local get
    """


@config.command()
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def view(output: str) -> None:
    """Print the config file: contexts and the current one (never a token)."""
    from jobd.api.manifests import dump_yaml
    from jobd.cli.contexts import load_config

    document = load_config().model_dump(exclude_none=True)
    click.echo(render.to_json(document) if output == "json" else dump_yaml([document]), nl=False)
    if output == "json":
        click.echo()


@config.command("get-contexts")
@click.option("-o", "--output", type=click.Choice(["table", "name", "json"]), default="table")
def get_contexts(output: str) -> None:
    """List the contexts; the current one is marked *."""
    from jobd.cli.contexts import load_config

    loaded = load_config()
    if output == "json":
        click.echo(render.to_json(loaded.model_dump(exclude_none=True)["contexts"]))
        return
    if output == "name":
        click.echo("".join(f"{name}\n" for name in sorted(loaded.contexts)), nl=False)
        return
    rows = [["CURRENT", "NAME", "SERVER", "TOKEN FILE", "PROJECT"]]
    for name, context in sorted(loaded.contexts.items()):
        mark = "*" if name == loaded.current_context else ""
        fields = (context.server, context.token_file, context.project)
        rows.append([mark, name, *(value or "" for value in fields)])
    click.echo(_table(rows))


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


@config.command("current-context")
def current_context() -> None:
    """Print the current context's name."""
    from jobd.cli.contexts import load_config

    name = load_config().current_context
    if not name:
        raise Failure("no current context: job config use-context NAME")
    click.echo(name)


@config.command("use-context")
@click.argument("name", shell_complete=complete_context)
def use_context(name: str) -> None:
    """Make NAME the current context."""
    from jobd.cli.contexts import load_config, save_config

    loaded = load_config()
    loaded.context(name)  # refuses a name that is not a context
    loaded.current_context = name
    save_config(loaded)
    click.echo(f"Switched to context {name!r}.")


@config.command("set-context")
@click.argument("name", shell_complete=complete_context)
@click.option("--server", "--broker", "server", metavar="URL", help="The broker's URL.")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="The file holding its token (mode 0600); stored as a path, made absolute.",
)
@click.option("--project", "-p", help="The project `job submit` and `job get` default to.")
@click.option("--current", is_flag=True, help="Also make it the current context.")
def set_context(
    name: str, server: str | None, token_file: str | None, project: str | None, current: bool
) -> None:
    """Create context NAME, or change the fields given of an existing one."""
    from pydantic import ValidationError

    from jobd.cli.contexts import Context, load_config, save_config

    loaded = load_config()
    given = {"server": server, "project": project}
    if token_file is not None:
        given["token_file"] = _absolute(token_file)
    merged = loaded.contexts.get(name, Context()).model_dump() | {
        k: v for k, v in given.items() if v is not None
    }
    try:
        loaded.contexts[name] = Context.model_validate(merged)
    except ValidationError as exc:
        raise Failure(f"--server: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    if current or loaded.current_context is None:
        loaded.current_context = name
    path = save_config(loaded)
    click.echo(f"Context {name!r} set in {path}.")


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


@config.command("delete-context")
@click.argument("name", shell_complete=complete_context)
def delete_context(name: str) -> None:
    """Remove context NAME (its token file stays where it is)."""
    from jobd.cli.contexts import load_config, save_config

    loaded = load_config()
    loaded.context(name)
    del loaded.contexts[name]
    if loaded.current_context == name:
        loaded.current_context = None
    save_config(loaded)
    click.echo(f"Context {name!r} deleted.")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish (click's own).

    \b
    bash: eval "$(job completion bash)"          (in ~/.bashrc)
    zsh:  eval "$(job completion zsh)"           (in ~/.zshrc)
    fish: job completion fish > ~/.config/fish/completions/job.fish
    """
    root = click.get_current_context().find_root()
    prog = root.info_name or "job"
    complete_var = f"_{prog.replace('-', '_').upper()}_COMPLETE"
    shell_class = get_completion_class(shell)
    assert shell_class is not None  # every name of SHELLS is one of click's
    click.echo(shell_class(root.command, {}, prog, complete_var).source(), nl=False)


VERBS = [completion, config]
STANDALONE = frozenset({"completion", "config"})

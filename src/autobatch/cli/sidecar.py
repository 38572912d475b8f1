"""Sidecar commands: run the controller, read a running one's status."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from autobatch.cli.app import app, err, out, print_json
from autobatch.errors import ConfigError

_LOG_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
}


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="Sidecar YAML (see examples/sidecar.yaml).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Decide and log, but change nothing on the server.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    model: Annotated[
        str | None,
        typer.Option(envvar="AUTOBATCH_MODEL",
                     help="The model, when the config leaves `model` out (the deploy overlays set it)."),
    ] = None,
) -> None:
    """Run the sidecar: watch the model, decide, swap profiles; SIGTERM stops it.

    Example: autobatch run --config examples/sidecar.yaml --dry-run

    Example: AUTOBATCH_MODEL=dense_mlp autobatch run --config deploy/k8s/overlays/reload/config/sidecar.yaml
    """
    from autobatch.controller.app import run_sidecar
    from autobatch.controller.config import load_sidecar_config

    level = _LOG_LEVELS.get(log_level.lower())
    if level is None:  # not getattr(logging, ...): that takes CRITICAL, NOTSET, FATAL, WARN too
        raise ConfigError(f"--log-level = {log_level!r}: must be debug, info, warning or error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per HTTP request to Triton is noise at info level.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))
    cfg = load_sidecar_config(config, model=model)

    async def main_async() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        def started(sidecar: Any) -> None:
            # logrotate's postrotate sends SIGHUP: start a new decision log file.
            loop.add_signal_handler(signal.SIGHUP, sidecar.controller.reopen_log)
            mode = "dry run" if dry_run else cfg.actuator.kind
            err.print(
                f"autobatch sidecar for {cfg.model} ({mode}) on {sidecar.url}: "
                f"/metrics /healthz /readyz /status POST /profile"
            )

        await run_sidecar(cfg, stop=stop, ready=started, dry_run=dry_run)
        err.print("sidecar stopped")

    asyncio.run(main_async())


@app.command()
def status(
    url: Annotated[str, typer.Option(help="The sidecar's address.")] = "http://127.0.0.1:9400",
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
    token_file: Annotated[
        Path | None, typer.Option(help="The sidecar's token file, if it protects /status.")
    ] = None,
) -> None:
    """Print a running sidecar's /status.

    Example: autobatch status --url http://127.0.0.1:9400 --json
    """
    from autobatch.cli.views import status_table
    from autobatch.controller.exposure import read_token
    from autobatch.controller.http import fetch_status

    try:
        data = fetch_status(url, token=read_token(token_file))
    except ConfigError as exc:
        if exc.field == "token" and token_file is None:
            raise ConfigError(f"{exc} (set with --token-file)", field="token") from exc
        raise
    if as_json:
        print_json(data)
        return
    out.print(status_table(data))

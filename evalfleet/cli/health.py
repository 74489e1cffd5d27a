"""``evalfleet worker-health``: ask a running worker whether it is live or ready (exec probes)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import click

from evalfleet.cli.context import CliState, pass_state


@click.command("worker-health")
@click.option("--live", "check", flag_value="livez", default=True,
              help="Is the worker live (work waits and it does nothing)? The default.")
@click.option("--ready", "check", flag_value="readyz",
              help="Is it ready (broker, database and judge answer; not shutting down)?")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="The worker's health port (default: EVALFLEET_HEALTH_PORT).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=10.0,
              show_default=True, help="Seconds to wait for the answer.")
@pass_state
def worker_health(state: CliState, check: str, host: str, port: int | None,
                  timeout_s: float) -> None:
    """Print a worker's /livez or /readyz answer; exit 0 when it is live (ready), else 1.

    For exec probes (Docker healthchecks); Kubernetes can probe the same endpoints with
    httpGet. The worker must run with EVALFLEET_HEALTH_PORT set.
    """
    port = port or state.settings.worker.health_port
    if not port:
        raise click.UsageError("no health port: set EVALFLEET_HEALTH_PORT or pass --port")
    url = f"http://{host}:{port}/{check}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:  # 503: answered, not live or not ready
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        click.echo(f"{url}: no answer ({exc})", err=True)
        raise SystemExit(1) from None
    click.echo(_summary(body, key="live" if check == "livez" else "ready"))
    raise SystemExit(0 if status == 200 else 1)


def _summary(body: bytes, *, key: str) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return body.decode(errors="replace")
    verdict = key if answer.get(key) else f"not {key}"
    return f"{verdict}: {answer.get('reason', '')}\n{json.dumps(answer, indent=2)}"

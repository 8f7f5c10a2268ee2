"""The container's entrypoint: tritonserver with the kit's two-tier cache, restarted when a model stops answering.

    python3 /opt/fastpath/serve.py [--settings FILE] -- tritonserver --model-repository=/models ...

1. The response cache: `fastpath deploy build-container` writes `tritonserver.json` beside the
   repository: the `--cache-config fastpath,...` arguments of the kit's cache (L1 size, the
   repository's namespace, TTLs, Redis timeouts, as `fastpath serve` passes them) and the top-level
   models to probe. The Redis URL comes from `FASTPATH_REDIS_URL` (the compose network's or the
   cluster's Redis); its password from the file named by `FASTPATH_REDIS_PASSWORD_FILE` (a compose or
   Kubernetes secret), handed to tritonserver in its environment (`FASTPATH_REDIS_PASSWORD`, never on
   its command line, where `ps` would show it). No Redis URL: the cache runs its in-process L1 only.
2. The watchdog: once the server is ready, every `--interval-s` each top-level model gets a tiny
   real inference (`health_probe.py`, the compose healthcheck's and the Kubernetes probes' own code:
   Triton 2.51 keeps a model READY after one of its Python stubs died). After `--failures` rounds in
   a row with a model not answering, tritonserver is stopped (SIGTERM, then SIGKILL after
   `--stop-timeout-s`) and this process exits 1, so compose's `restart: unless-stopped` (or the
   kubelet) starts the container again: Docker itself never restarts an unhealthy container.
   tritonserver exiting on its own ends this process with its exit status.

Standard library only: it runs in the NGC image's python3, beside health_probe.py. `--help` lists
the options; `FASTPATH_WATCHDOG=off` turns the watchdog off (the server is then only supervised by
the probes of whoever runs the container).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:  # in the image: copied beside this file (/opt/fastpath/health_probe.py)
    import health_probe
except ImportError:  # from a checkout (the tests run it so): the same file in the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from triton_fastpath.serve import health as health_probe

DEFAULT_SETTINGS = Path("/opt/fastpath/tritonserver.json")
PASSWORD_ENV = "FASTPATH_REDIS_PASSWORD"  # the cache reads it (native/fastpath_cache, password_env)
PASSWORD_FILE_ENV = "FASTPATH_REDIS_PASSWORD_FILE"
REDIS_URL_ENV = "FASTPATH_REDIS_URL"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def say(message: str) -> None:
    print(f"[fastpath-serve] {message}", file=sys.stderr, flush=True)


def load_settings(path: Path) -> dict:
    """The build's `tritonserver.json`: {"cache_args": [...], "models": [...], "http_port": 8000}.

    Raises:
        SystemExit: the file is missing or malformed, naming it and the build command that writes it.
    """
    try:
        settings = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(
            f"fastpath-serve: cannot read {path} ({error}); `make build-container` writes it beside the repository"
        ) from error
    if not isinstance(settings.get("cache_args"), list) or not isinstance(settings.get("models"), list):
        raise SystemExit(
            f"fastpath-serve: {path} has no cache_args / models lists; rebuild with `make build-container`"
        )
    return settings


def server_command(server: list[str], settings: dict, environ: dict[str, str]) -> list[str]:
    """`server` (tritonserver and its arguments) with the kit's cache arguments, and the Redis URL
    from the environment when one is set."""
    if any(arg.startswith("--cache-config") for arg in server):
        raise SystemExit(
            "fastpath-serve: the command already has --cache-config; the kit's cache arguments come from "
            "tritonserver.json (leave --cache-config out)"
        )
    command = [*server, *settings["cache_args"]]
    redis_url = environ.get(REDIS_URL_ENV, "").strip()
    if redis_url:
        if "@" in redis_url.partition("://")[2].partition("/")[0]:
            raise SystemExit(
                f"fastpath-serve: {REDIS_URL_ENV} holds credentials; give the password in a file named by "
                f"{PASSWORD_FILE_ENV} instead (a URL shows in tritonserver's command line)"
            )
        command += ["--cache-config", f"fastpath,redis_url={redis_url}"]
    return command


def server_environment(environ: dict[str, str]) -> dict[str, str]:
    """tritonserver's environment: ours, plus the Redis password read from its secret file."""
    env = dict(environ)
    password_file = environ.get(PASSWORD_FILE_ENV)
    if password_file:
        try:
            env[PASSWORD_ENV] = Path(password_file).read_text().strip()
        except OSError as error:
            raise SystemExit(f"fastpath-serve: {PASSWORD_FILE_ENV}={password_file}: {error}") from error
    return env


def ready(http_url: str, timeout_s: float = 2.0) -> bool:
    try:
        with _NO_PROXY.open(f"{http_url}/v2/health/ready", timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop(process: subprocess.Popen, timeout_s: float) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def supervise(process: subprocess.Popen, http_url: str, models: list[str], args: argparse.Namespace) -> int:
    """Probe until tritonserver exits (its status) or its models stop answering (stopped; 1)."""
    started = time.monotonic()
    while not ready(http_url):
        if process.poll() is not None:
            return process.returncode
        if time.monotonic() - started > args.start_timeout_s:
            say(f"not ready after {args.start_timeout_s:.0f}s: stopping tritonserver")
            stop(process, args.stop_timeout_s)
            return 1
        time.sleep(1.0)
    say(f"ready; probing {', '.join(models)} every {args.interval_s:g}s ({args.failures} failed rounds restart)")
    failed_rounds = 0
    while True:
        deadline = time.monotonic() + args.interval_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return process.returncode
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        results = health_probe.probe(http_url, models, attempts=args.attempts, timeout_s=args.probe_timeout_s)
        broken = [r for r in results if not r.ok]
        failed_rounds = failed_rounds + 1 if broken else 0
        for result in broken:
            say(f"probe {failed_rounds}/{args.failures}: {result.model}: {result.detail}")
        if failed_rounds >= args.failures:
            say(f"{', '.join(r.model for r in broken)} stopped answering: stopping tritonserver for a restart")
            stop(process, args.stop_timeout_s)
            return 1


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        usage="serve.py [options] -- tritonserver [arguments]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--settings", type=Path, default=DEFAULT_SETTINGS, help="the build's tritonserver.json")
    parser.add_argument("--http-url", default="http://127.0.0.1:8000", help="where the probes reach tritonserver")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between probe rounds (default 10)")
    parser.add_argument("--failures", type=int, default=3, help="failed rounds in a row that restart (default 3)")
    parser.add_argument("--attempts", type=int, default=2, help="inferences per model and round (default 2)")
    parser.add_argument("--probe-timeout-s", type=float, default=5.0, help="bound of one probe inference")
    parser.add_argument("--start-timeout-s", type=float, default=600.0, help="loading and warmup allowance")
    parser.add_argument("--stop-timeout-s", type=float, default=35.0, help="SIGTERM to SIGKILL")
    args = parser.parse_args(argv[:split])
    server = argv[split + 1 :]
    if not server:
        parser.error("no tritonserver command: give it after --")
    return args, server


def main(argv: list[str] | None = None) -> int:
    args, server = parse(list(sys.argv[1:] if argv is None else argv))
    settings = load_settings(args.settings)
    command = server_command(server, settings, dict(os.environ))
    process = subprocess.Popen(command, env=server_environment(dict(os.environ)))

    def forward(signum, _frame) -> None:
        if process.poll() is None:
            process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    if os.environ.get("FASTPATH_WATCHDOG", "on") == "off":
        return process.wait()
    return supervise(process, args.http_url, list(settings["models"]), args)


if __name__ == "__main__":
    sys.exit(main())

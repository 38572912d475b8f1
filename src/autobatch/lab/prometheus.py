"""Start a real Prometheus (Debian package ``prometheus``) on loopback, for tests and benchmarks.

``PrometheusServer({"a": "127.0.0.1:8002"})`` scrapes each target every
``scrape_interval_s`` under ``job="triton"`` with a ``replica`` label naming it;
``start()`` returns once every target has been scraped up.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from autobatch.errors import ServeError
from autobatch.lab.process import ManagedProcess, Server, poll_until
from autobatch.lab.serve import free_port

__all__ = ["PrometheusServer", "prometheus_binary", "query"]


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise ServeError("the prometheus binary is missing: run scripts/system-deps.sh "
                         "(Debian package 'prometheus', listed in scripts/apt-packages.txt)")
    return path


def query(url: str, promql: str, *, at_s: float | None = None) -> list[dict[str, Any]]:
    """An instant query's result vector; empty when Prometheus is unreachable or refuses it."""
    params: dict[str, Any] = {"query": promql}
    if at_s is not None:
        params["time"] = at_s
    try:
        r = httpx.get(f"{url}/api/v1/query", params=params, timeout=5)
    except httpx.HTTPError:
        return []
    return r.json()["data"]["result"] if r.status_code == 200 else []


class PrometheusServer(Server):
    """A Prometheus process scraping ``{replica: host:port}`` targets, as a context manager."""

    def __init__(
        self,
        targets: Mapping[str, str],
        *,
        job: str = "triton",
        scrape_interval_s: float = 1.0,
        extra_jobs: Mapping[str, Sequence[str]] | None = None,
        rule_files: Sequence[str | Path] = (),
        evaluation_interval_s: float | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.targets = dict(targets)
        self.job = job
        self.scrape_interval_s = scrape_interval_s
        self.extra_jobs = {k: list(v) for k, v in (extra_jobs or {}).items()}
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.evaluation_interval_s = evaluation_interval_s or scrape_interval_s
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp = tempfile.TemporaryDirectory(prefix="autobatch-prometheus-")
        self.config_path = Path(self._tmp.name) / "prometheus.yml"
        self.config_path.write_text(self.config_text(), encoding="utf-8")
        self._proc = ManagedProcess("prometheus", Path(self._tmp.name) / "prometheus.log")

    def config_text(self) -> str:
        every = f"{self.scrape_interval_s:g}s"
        lines = [
            "global:",
            f"  scrape_interval: {every}",
            f"  scrape_timeout: {every}",
            f"  evaluation_interval: {self.evaluation_interval_s:g}s",
        ]
        if self.rule_files:
            lines.append("rule_files:")
            lines += [f"  - {p}" for p in self.rule_files]
        lines += ["scrape_configs:", f"  - job_name: {self.job}",
                  "    static_configs:" if self.targets else "    static_configs: []"]
        for replica, target in self.targets.items():
            lines += [f'      - targets: ["{target}"]', f"        labels: {{replica: {replica}}}"]
        for name, targets in self.extra_jobs.items():
            lines += [f"  - job_name: {name}", "    static_configs:" if targets else "    static_configs: []"]
            if targets:
                lines.append(f"      - targets: [{', '.join(repr(t) for t in targets)}]")
        return "\n".join(lines) + "\n"

    def running(self) -> bool:
        return self._proc.running()

    def retarget(
        self, targets: Mapping[str, str], extra_jobs: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        """Scrape these targets from now on, as a service discovery that changed would: the
        config is rewritten and reloaded (SIGHUP). The series of a target no longer listed go
        stale at once, so ``absent()`` sees them gone (a stopped target only reads ``up == 0``).
        Keep a job's name with no targets (``{"autobatch": []}``): a job removed whole leaves
        its last samples visible for the 5 min lookback (seen with Debian's Prometheus 2.x)."""
        self.targets = dict(targets)
        self.extra_jobs = {k: list(v) for k, v in (extra_jobs or {}).items()}
        self.config_path.write_text(self.config_text(), encoding="utf-8")
        self._proc.signal(signal.SIGHUP)

    def query(self, promql: str, *, at_s: float | None = None) -> list[dict[str, Any]]:
        return query(self.url, promql, at_s=at_s)

    def start(self) -> PrometheusServer:
        if self.running():
            return self
        data = Path(self._tmp.name) / "data"
        self._proc.start([
            prometheus_binary(), f"--config.file={self.config_path}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ])
        want = len(self.targets)
        try:
            poll_until(lambda: self.query(f'count(up{{job="{self.job}"}} == 1) == {want}'),
                       timeout_s=self.startup_timeout_s, interval_s=0.1,
                       what="every target to be scraped",
                       check=lambda: self._proc.check_alive("at start-up"))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._proc.stop(15.0)

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

# timed: a bound on the seconds a stop takes (tests/conftest.py).
pytestmark = pytest.mark.timed

REPO_ROOT = Path(__file__).resolve().parents[2]
QUERY = "{ assetNodes { assetKey { path } } }"
EXPECTED = {
    "search_space", "workload_design", "profiling_shard", "profiling_runs", "predictor_bundle",
    "data_version",
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _asset_nodes(port: int) -> set[str] | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": QUERY}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = json.load(response)
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None
    nodes = (body.get("data") or {}).get("assetNodes") or []
    return {"/".join(n["assetKey"]["path"]) for n in nodes} or None


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_ui_serves_the_assets_and_stops_with_all_children(tmp_path, stop_signal):
    port = _free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PORT": str(port)}
    env["SCALEDL_DATA_DIR"] = str(tmp_path / "data")
    log = (tmp_path / "ui.log").open("w")
    wrapper = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "scripts" / "ui.py")],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    procs: list[psutil.Process] = []
    try:
        deadline, assets = time.monotonic() + 90, None
        while time.monotonic() < deadline and wrapper.poll() is None:
            assets = _asset_nodes(port)
            if assets:
                break
            time.sleep(1)
        assert assets, f"no answer from the UI in 90 s:\n{(tmp_path / 'ui.log').read_text()}"
        assert EXPECTED <= assets
        procs = [psutil.Process(wrapper.pid), *psutil.Process(wrapper.pid).children(True)]
        assert len(procs) >= 4  # wrapper, dagster dev, webserver, daemon (+ code server)
        assert (tmp_path / "home" / "dagster.yaml").exists()
        started = time.monotonic()
        wrapper.send_signal(stop_signal)
        wrapper.wait(timeout=60)
        _, alive = psutil.wait_procs(procs[1:], timeout=20)
        stop_s = time.monotonic() - started
        assert not alive, f"still running after {stop_signal!r}: {[p.pid for p in alive]}"
        assert stop_s < 30
    finally:
        for proc in procs:
            try:
                proc.kill()
            except psutil.Error:
                pass
        if wrapper.poll() is None:
            wrapper.kill()
        log.close()

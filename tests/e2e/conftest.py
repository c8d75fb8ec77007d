"""The built-in lab (deploy/lab/lab.sh) with sluice running, shared by the end-to-end tests of one session: real
clients in sl-client, real servers in sl-backend1..3, sluice in sl-gw. The lab runs on a copy of config/lab.yaml
that tests may rewrite (reloads); every test leaves it as it found it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/integration"))  # sluice_harness: wait_until, Telemetry

LAB = str(ROOT / "deploy/lab/lab.sh")


def lab(*args, check=True, timeout=120):
    return subprocess.run([LAB, *args], capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture(scope="session")
def lab_env(tmp_path_factory):
    state = tmp_path_factory.mktemp("lab")
    config = state / "lab.yaml"
    shutil.copy(ROOT / "config/lab.yaml", config)
    env = {"SLUICE_LAB_CONFIG": str(config), "SLUICE_LAB_STATE": str(state / "run")}
    os.environ.update(env)
    lab("up")
    lab("start")
    yield {"config": config, "original": config.read_text(), "state": state / "run"}
    lab("down", check=False)

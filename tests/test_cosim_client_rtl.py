"""Faults of the RTL client, injected deterministically: a simulator that stopped reading, a
launcher killed under it, closing a stopped simulator, folders of hosts that died.

Every fault must surface within its timeout plus a bounded grace, and leave no process behind.
The engine is the HPU configuration of ``tests/test_hpu_device_rtl.py`` (shared build).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tandem.host.backend.cosim import (
    CLOSE_GRACE_S,
    FOLDER_PREFIX,
    HOST_PID_FILE,
    remove_stale_folders,
)
from tandem.host.common.errors import CosimError, CosimTimeoutError
from tandem.host.hpu.device import HpuDevice

from .rtl import need
from .test_hpu_device_rtl import MEMORY, P


def started_device(cache, run_dir) -> HpuDevice:
    dev = HpuDevice(
        P, memory_bytes=MEMORY, backend="rtl", simulator="verilator", cache_dir=cache,
        run_dir=run_dir, timeout_s=60,
    )  # fmt: skip
    dev.backend.memory.read(0, 64)  # starts it
    assert dev.backend.started
    return dev


def group_is_gone(pgid: int, within_s: float = 5.0) -> bool:
    """True once no process of group ``pgid`` is left (the kernel reaps the killed ones)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.rtl
def test_a_stopped_simulator_cannot_block_a_large_write(sim_cache, tmp_path):
    need("verilator")
    dev = started_device(sim_cache, tmp_path)
    pgid = dev.backend.process_group
    os.killpg(pgid, signal.SIGSTOP)  # nobody reads the socket any more
    dev.backend.timeout_s = 1.0
    start = time.monotonic()
    with pytest.raises(CosimTimeoutError, match="did not take 'write' within 1 s"):
        dev.backend.memory.write(0, bytes(MEMORY))  # far more than the socket buffers
    assert time.monotonic() - start < 1.0 + 5.0
    assert not dev.backend.started and group_is_gone(pgid)
    dev.close()


@pytest.mark.rtl
def test_a_killed_launcher_is_noticed_and_its_simulator_killed(sim_cache, tmp_path):
    need("verilator")
    dev = started_device(sim_cache, tmp_path)
    launcher = dev.backend.process_group
    os.kill(launcher, signal.SIGKILL)  # the launcher only: its simulator is orphaned
    time.sleep(0.2)
    with pytest.raises(CosimError, match="died"):
        dev.backend.memory.read(0, 64)
    assert not dev.backend.started and group_is_gone(launcher)
    dev.close()


@pytest.mark.rtl
def test_closing_a_stopped_simulator_takes_at_most_its_grace(sim_cache, tmp_path):
    need("verilator")
    dev = started_device(sim_cache, tmp_path)
    pgid = dev.backend.process_group
    folder = dev.backend.folder
    os.killpg(pgid, signal.SIGSTOP)
    start = time.monotonic()
    dev.close()
    assert time.monotonic() - start < CLOSE_GRACE_S + 3.0
    assert group_is_gone(pgid) and not folder.exists()


def test_folders_of_dead_hosts_are_removed_and_live_ones_kept():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    (stale / HOST_PID_FILE).write_text(dead.stdout.strip())
    (stale / "cosim.sock").write_text("")
    live = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    (live / HOST_PID_FILE).write_text(str(os.getpid()))
    foreign = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))  # no pid file: not ours to judge
    try:
        remove_stale_folders()
        assert not stale.exists()
        assert live.exists() and foreign.exists()
    finally:
        for folder in (stale, live, foreign):
            if folder.exists():
                for item in folder.iterdir():
                    item.unlink()
                folder.rmdir()

"""The datapath-free RTL client: one simulator subprocess serving a design over a socket.

:class:`CosimClient` exchanges transactions with a cocotb server module
(:mod:`tandem.sim.cosim.hpu_server` for the ``hpu``, :mod:`tandem.sim.cosim.stream_server` for
the stream engines) over a Unix socket in a private temporary folder:

* **Lazy start.** Nothing runs until the first transaction. Then the host listens on the
  socket and starts ``python -m tandem.sim.cosim.launch`` in its own process group; the
  launcher builds the Verilog for these parameters once (cached in ``~/.cache/tandem/sim``
  with ``tandem sim`` builds) and starts Verilator (default) or Icarus, whose cocotb test
  connects back.
* **Errors and timeouts.** A server-side failure arrives as :class:`CosimError`; a simulator
  that dies raises :class:`CosimError` with the tail of its log; a call that takes longer than
  ``timeout_s`` (start-up: ``start_timeout_s``, which covers the first build) kills the
  simulator and raises :class:`CosimTimeoutError`. Nothing waits for ever.
* **Bounded.** Every send and receive is bounded by ``timeout_s`` (a simulator that stopped
  reading cannot block a large write for ever), and the launcher's liveness is checked before
  every transaction (a killed launcher is noticed, and its orphaned simulator killed).
* **Shutdown.** :meth:`CosimClient.close` (also at interpreter exit and when the client is
  garbage collected) asks the server to finish, waits for the simulator to exit at most
  :data:`CLOSE_GRACE_S` in all, and kills its process group. A client's temporary folder names
  its host process; the next client removes the folders of hosts that died.

:class:`StreamClient` adds the stream server's one message (a request of steps on the
design's stream ports, see :mod:`tandem.sim.cosim.stream_server`) and
:class:`RtlStreamBackend` turns any stream datapath into a
:class:`~tandem.host.backend.backend.Backend` given its codec (:class:`StreamCodec`): requests
to port beats, beats to results. The ``hpu``'s RTL backend (device memory plus descriptor
batches) is :class:`tandem.host.hpu.rtl_backend.RtlHpuBackend`.
"""

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import weakref
from abc import ABC, abstractmethod
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NoReturn

from tandem.host.common.errors import CosimError, CosimTimeoutError

from .backend import Backend, Call

__all__ = [
    "BUDGET_FIXED",
    "BUDGET_PER_BEAT",
    "CLOSE_GRACE_S",
    "HARNESSES",
    "CosimClient",
    "RtlStreamBackend",
    "StreamClient",
    "StreamCodec",
    "StreamJob",
    "remove_stale_folders",
]

#: How the simulator meets the host: the C++ harness of :mod:`tandem.sim.native`, or cocotb.
HARNESSES = ("native", "cocotb")
#: Longest wait for the simulator to finish when a client closes, in all (then it is killed).
CLOSE_GRACE_S = 10.0
#: Prefix of the private temporary folder of each client (socket, launcher log).
FOLDER_PREFIX = "tandem-cosim-"
#: File in that folder naming the host process, so a later client can remove the folder of a
#: host that died.
HOST_PID_FILE = "host.pid"

#: Wall-clock-independent cycle budget of one stream request: every beat may take this many
#: cycles...
BUDGET_PER_BEAT = 50
#: ...plus this many for pipeline fill and drain.
BUDGET_FIXED = 5000


class _Process:
    """The launcher subprocess and its socket; closed by :func:`_shutdown` (also via finalize)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.folder: tempfile.TemporaryDirectory | None = None
        self.log = None


def _shutdown(state: _Process, grace_s: float = CLOSE_GRACE_S) -> None:
    """Ask the server to finish, wait at most ``grace_s`` in all, then kill what is left.

    The launcher's whole process group is killed at the end whatever happened, so a simulator
    orphaned by a killed launcher does not outlive the client.
    """
    deadline = time.monotonic() + grace_s

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    if state.conn is not None:
        try:
            _set_timeouts(state.conn, max(left(), 0.01))
            state.conn.send(("close",))
            if state.conn.poll(left()):
                state.conn.recv()
        except (OSError, EOFError):
            pass
        state.conn.close()
        state.conn = None
    if state.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            state.proc.wait(left())
        _kill(state.proc)
        state.proc = None
    if state.log is not None:
        state.log.close()
        state.log = None
    if state.folder is not None:
        state.folder.cleanup()
        state.folder = None


def _set_timeouts(conn: Connection, seconds: float) -> None:
    """Bound every blocking send and receive on ``conn``'s socket to ``seconds``.

    A simulator that stopped reading (suspended, or stuck in a long step) fills the socket
    buffer; without a send timeout the host's ``send`` of a large write would block for ever.
    """
    sock = socket.socket(fileno=conn.fileno())
    try:
        whole = int(seconds)
        value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    finally:
        sock.detach()  # the Connection keeps the descriptor


def remove_stale_folders() -> None:
    """Remove the co-simulation folders of hosts that died without cleaning up."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            pid = int((folder / HOST_PID_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or still being created
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


def _kill(proc: subprocess.Popen) -> None:
    """Kill the launcher's process group (the launcher and the simulator it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class CosimClient:
    """One simulator subprocess serving a design over a Unix socket (see the module docstring).

    The machinery every RTL backend shares: lazy start through
    :mod:`tandem.sim.cosim.launch`, request/reply transactions with a timeout, errors as
    :class:`CosimError`, shutdown on :meth:`close`, garbage collection and interpreter exit.
    A backend adds the design-specific launcher arguments (:meth:`_launch_args`) and its
    messages (:meth:`_call`, or :meth:`_send` then :meth:`_receive` to keep several
    simulators busy at once).

    Parameters
    ----------
    simulator
        ``"verilator"`` (default) or ``"icarus"``.
    timeout_s
        Longest wall-clock wait for one transaction.
    start_timeout_s
        Longest wait for the simulator to connect (includes building the Verilog).
    cache_dir
        Simulator build cache (default ``~/.cache/tandem/sim``).
    run_dir
        Folder for the simulator's log (default: a temporary folder, removed on close).
    harness
        ``"native"`` (the default with Verilator): the Verilated model with its port models
        and device memory in C++ (:mod:`tandem.sim.native`), one Python round trip per
        request; ``"cocotb"`` (the only one with Icarus): the cocotb server module, a
        Python call per clock edge, with the same results and cycle counts.
    waves
        Record the simulation's waves into this FST file (native harness only).
    progress
        Called with each line the launcher prints while the simulator starts (generating the
        Verilog, building the model: minutes the first time), for example
        :func:`tandem.progress.stderr_progress`; None: silent.
    """

    def __init__(
        self,
        *,
        simulator: str = "verilator",
        timeout_s: float = 120.0,
        start_timeout_s: float = 900.0,
        cache_dir: str | Path | None = None,
        run_dir: str | Path | None = None,
        harness: str | None = None,
        waves: str | Path | None = None,
        progress=None,
    ):
        if simulator not in ("verilator", "icarus"):
            raise ValueError(f"simulator must be 'verilator' or 'icarus', not {simulator!r}")
        if harness is None:
            harness = "native" if simulator == "verilator" else "cocotb"
        if harness not in HARNESSES:
            raise ValueError(f"harness must be one of {', '.join(HARNESSES)}, not {harness!r}")
        if harness == "native" and simulator != "verilator":
            raise ValueError(f"the native harness runs Verilator, not {simulator!r}")
        if waves is not None and harness != "native":
            raise ValueError("waves are recorded by the native harness only")
        self.harness = harness
        self.waves = None if waves is None else Path(waves)
        self.progress = progress
        self.simulator = simulator
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.cache_dir = cache_dir
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._state = _Process()
        self._closed = False
        # Stop the simulator when this object goes away or the interpreter exits.
        self._finalizer = weakref.finalize(self, _shutdown, self._state)
        atexit.register(self._finalizer)

    def _launch_args(self) -> list[str]:
        """Design and parameters for ``python -m tandem.sim.cosim.launch``."""
        raise NotImplementedError

    @property
    def started(self) -> bool:
        """True while a simulator is running for this client."""
        return self._state.conn is not None

    @property
    def process_group(self) -> int | None:
        """The launcher's process id, which is also the id of the process group that holds
        it and the simulator it started; None while nothing runs."""
        proc = self._state.proc
        return None if proc is None else proc.pid

    @property
    def folder(self) -> Path | None:
        """The client's private temporary folder (socket, launcher log) while it runs."""
        folder = self._state.folder
        return None if folder is None else Path(folder.name)

    @property
    def log_file(self) -> Path | None:
        """The simulator's log (cocotb's output), once started."""
        return None if self._run_dir is None else self._run_dir / "sim.log"

    _run_dir: Path | None = None
    #: Wall-clock seconds from sending each request to its reply, summed: the time the
    #: simulator took to serve them (message transfer included; the host's own encoding and
    #: decoding, and the start-up before the first request, not).
    serve_s: float = 0.0
    _sent_at: float = 0.0

    # --- process management --------------------------------------------------------------
    def _start(self) -> None:
        if self._closed:
            raise CosimError("the RTL backend is closed")
        state = self._state
        remove_stale_folders()
        state.folder = tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX)
        folder = Path(state.folder.name)
        (folder / HOST_PID_FILE).write_text(str(os.getpid()))
        self._run_dir = self.run_dir or folder / "run"
        path = str(folder / "cosim.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listener.settimeout(0.5)
        command = [
            sys.executable,
            "-m",
            "tandem.sim.cosim.launch",
            *self._launch_args(),
            "--simulator",
            self.simulator,
            "--socket",
            path,
            "--run-dir",
            str(self._run_dir),
            "--harness",
            self.harness,
        ]
        if self.waves is not None:
            command += ["--waves", str(self.waves.resolve())]
        if self.cache_dir is not None:
            command += ["--cache-dir", str(self.cache_dir)]
        # Open for the launcher's whole life; _shutdown closes it.
        state.log = open(folder / "launch.log", "w+")  # noqa: SIM115
        state.proc = subprocess.Popen(
            command, stdout=state.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + self.start_timeout_s
        relayed = 0  # bytes of the launcher's output passed to `progress`
        try:
            while True:
                try:
                    sock, _ = listener.accept()
                    break
                except TimeoutError:
                    pass
                if self.progress is not None:
                    relayed = self._relay(relayed)
                if state.proc.poll() is not None:
                    raise CosimError(
                        f"the {self.simulator} simulator exited before connecting: {self._tail()}"
                    )
                if time.monotonic() > deadline:
                    _kill(state.proc)
                    raise CosimTimeoutError(
                        f"the {self.simulator} simulator did not connect within "
                        f"{self.start_timeout_s:g} s"
                    )
        except BaseException:
            listener.close()
            _shutdown(state, grace_s=1)
            raise
        listener.close()
        sock.settimeout(None)
        state.conn = Connection(sock.detach())

    def _relay(self, done: int) -> int:
        """Pass the launcher's new complete lines from byte ``done`` on to ``progress``."""
        # A handle of our own: the launcher writes through the shared one, whose offset a
        # seek here would move under it.
        with open(self._state.log.name, "rb") as log:
            log.seek(done)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1].decode(errors="replace")
        for line in complete.splitlines():
            if line.strip():
                self.progress(line.strip())
        return done + len(data[: data.rfind(b"\n") + 1])

    def _tail(self, lines: int = 6) -> str:
        """The last lines of the launcher's and the simulator's output, on one line."""
        text = []
        folder = self._state.folder
        launch = None if folder is None else Path(folder.name) / "launch.log"
        for path in (self.log_file, launch):
            if path is not None and path.exists():
                text += [
                    line.strip()
                    for line in path.read_text(errors="replace").splitlines()
                    if line.strip()
                ][-lines:]
        return " | ".join(text[-lines:]) or "no output"

    def _call(self, *message):
        """Send ``message`` and return the reply's fields (see :meth:`_receive`)."""
        self._send(*message)
        return self._receive(message[0])

    def _send(self, *message) -> None:
        """Start the simulator if needed and send ``message`` without waiting for the reply."""
        if not self.started:
            self._start()
        state = self._state
        if state.proc.poll() is not None:  # the launcher is gone (killed, or crashed)
            self._died()
        self._sent_at = time.perf_counter()
        try:
            _set_timeouts(state.conn, max(self.timeout_s, 1e-3))  # 0 would mean never
            state.conn.send(message)
        except BlockingIOError:  # the send timed out: nobody reads the socket
            self._stop_for_timeout(f"take {message[0]!r}")
        except OSError:
            self._died()

    def _receive(self, op: str):
        """The reply to the request ``op`` sent last: its fields after ``"ok"``.

        Raises :class:`CosimError` for an error reply or a dead simulator and
        :class:`CosimTimeoutError` (after stopping the simulator) past ``timeout_s``.
        """
        state = self._state
        if state.conn is None:
            raise CosimError(f"the {self.simulator} simulator is not running")
        try:
            reply = self._wait()
        except BlockingIOError:  # a reply that started but stopped coming
            reply = None
        except (EOFError, OSError):
            self._died()
        if reply is None:
            self._stop_for_timeout(f"answer {op!r}")
        self.serve_s += time.perf_counter() - self._sent_at
        if reply[0] == "error":
            raise CosimError(f"{self.simulator}: {reply[1]}")
        return reply[1:]

    def _stop_for_timeout(self, what: str) -> NoReturn:
        _kill(self._state.proc)
        _shutdown(self._state, grace_s=1)
        raise CosimTimeoutError(
            f"the {self.simulator} simulator did not {what} within {self.timeout_s:g} s; "
            "it has been stopped"
        )

    def _died(self) -> NoReturn:
        tail = self._tail()
        _shutdown(self._state, grace_s=1)
        raise CosimError(f"the {self.simulator} simulator died: {tail}") from None

    def _wait(self):
        """The server's reply, or None after ``timeout_s``; EOFError if the simulator died."""
        state = self._state
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if state.conn.poll(min(0.2, remaining)):
                return state.conn.recv()
            if state.proc.poll() is not None:
                raise EOFError

    def close(self) -> None:
        """Ask the simulator to finish and wait for it, at most :data:`CLOSE_GRACE_S` in all
        (then its process group is killed)."""
        self._closed = True
        self._finalizer()

    def kill(self) -> None:
        """Kill the simulator at once (what a crash looks like to the host; for tests)."""
        if self._state.proc is not None:
            _kill(self._state.proc)


class StreamClient(CosimClient):
    """One stream design (``sparse-mpe``, ``systolic``, ``sparse-engine``, ``rnn``) on RTL.

    Parameters
    ----------
    design
        Registered design name.
    params
        Its parameter set (what the Verilog is generated from).
    **options
        ``simulator``, ``timeout_s``, ``start_timeout_s``, ``cache_dir``, ``run_dir`` of
        :class:`CosimClient`.
    """

    def __init__(self, design: str, params, **options):
        super().__init__(**options)
        self.design = design
        self.params = params

    def _launch_args(self) -> list[str]:
        return ["--design", self.design, "--params", json.dumps(self.params.to_dict())]

    def submit(self, steps: list, budget: int) -> None:
        """Send one request of ``steps`` (see :mod:`tandem.sim.cosim.stream_server`) with a
        budget of ``budget`` cycles; :meth:`result` waits for it."""
        self._send("run", steps, int(budget))

    def result(self) -> tuple[list, int]:
        """``(outputs, cycles)`` of the request :meth:`submit` sent."""
        outputs, cycles = self._receive("run")
        return outputs, int(cycles)

    def stream(self, steps: list, beats: int) -> tuple[list, int]:
        """One request carrying ``beats`` beats (the default budget), and its reply."""
        self.submit(steps, StreamJob(steps, beats).budget)
        return self.result()


class StreamJob:
    """One engine's share of a request: the server's steps and the beats they carry.

    ``budget`` (cycles the request may take) defaults to ``BUDGET_PER_BEAT`` per beat plus
    ``BUDGET_FIXED``.
    """

    def __init__(self, steps: list, beats: int, budget: int | None = None):
        self.steps = steps
        self.budget = BUDGET_PER_BEAT * int(beats) + BUDGET_FIXED if budget is None else budget


class StreamCodec(ABC):
    """A stream datapath's RTL side: requests to port beats and the engines' beats to results.

    ``engines`` maps each engine's design name to its parameter set; :meth:`encode` gives each
    engine's :class:`StreamJob` for a request (engines without work are left out) and
    :meth:`decode` rebuilds the result from the outputs of every engine that ran.
    """

    @abstractmethod
    def engine_params(self) -> dict:
        """``{design: params}`` of the engines this codec drives."""

    @abstractmethod
    def encode(self, request) -> dict[str, StreamJob]:
        """Each engine's job for ``request``."""

    @abstractmethod
    def decode(self, request, outputs: dict[str, list], cycles: dict[str, int]):
        """``(result, engine cycles)`` from each engine's outputs and simulated cycles."""

    def sent(self, request) -> None:  # noqa: B027 (codecs without engine state ignore it)
        """Called after ``request`` ran without error (codecs caching engine state use it)."""

    def failed(self) -> None:  # noqa: B027
        """Called after a request failed (the server resets the engine)."""


class RtlStreamBackend(Backend):
    """Any stream datapath on RTL: one :class:`StreamClient` per engine, run side by side.

    Each request's jobs go to their engines' simulators at once; every reply is collected
    before the next request (so none is left behind after an error), and the request's cycles
    are the largest of its engines' (the engines work in parallel).

    Parameters
    ----------
    codec
        The datapath's :class:`StreamCodec`.
    run_dir
        With several engines, each logs into a subfolder named after its design.
    **options
        As :class:`CosimClient`.
    """

    name = "rtl"

    def __init__(self, codec: StreamCodec, *, run_dir=None, **options):
        self.codec = codec
        engines = codec.engine_params()
        several = len(engines) > 1
        self.engines = {}
        for design, params in engines.items():
            folder = run_dir
            if run_dir is not None and several:
                folder = Path(run_dir) / design
            self.engines[design] = StreamClient(design, params, run_dir=folder, **options)

    @property
    def client(self) -> StreamClient:
        """The one engine's client (single-engine datapaths)."""
        (client,) = self.engines.values()
        return client

    @property
    def started(self) -> bool:
        """True while any engine's simulator runs."""
        return any(e.started for e in self.engines.values())

    def run(self, requests: list) -> Call:
        results, total, per_engine = [], 0, {}
        for request in requests:
            result, cycles = self._run_one(request)
            results.append(result)
            total += max(cycles.values(), default=0)
            for name, n in cycles.items():
                per_engine[name] = per_engine.get(name, 0) + n
        return Call(results, total, per_engine)

    #: Wall-clock seconds from each request's first job sent to its last reply, summed (the
    #: engines serve side by side): what the simulators took, without the codec's own work.
    serve_s: float = 0.0

    def _run_one(self, request):
        jobs = self.codec.encode(request)
        sent, error, outputs, cycles = [], None, {}, {}
        began = time.perf_counter()
        for name, job in jobs.items():  # every engine works at once
            try:
                self.engines[name].submit(job.steps, job.budget)
            except CosimError as exc:
                error = exc
                break
            sent.append(name)
        for name in sent:  # every reply is taken, so none is left for the next request
            try:
                outputs[name], cycles[name] = self.engines[name].result()
            except CosimError as exc:
                error = error or exc
        self.serve_s += time.perf_counter() - began
        if error is not None:
            self.codec.failed()
            raise error
        self.codec.sent(request)
        return self.codec.decode(request, outputs, cycles)

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()

    def kill(self) -> None:
        """Kill every engine's simulator at once (what a crash looks like; for tests)."""
        for engine in self.engines.values():
            engine.kill()

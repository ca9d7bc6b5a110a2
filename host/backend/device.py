"""The device base every accelerator's host API derives from.

A :class:`Device` owns one :class:`~tandem.host.backend.backend.Backend`, chosen by name from
the subclass's :attr:`Device.backends`, and gives every datapath the same lifetime and
bookkeeping:

* ``backend="golden"`` (default) or ``"rtl"``; options (``simulator``, ``timeout_s``,
  ``start_timeout_s``, ``cache_dir``, ``run_dir``) go to the RTL backend, and the golden one
  takes those its class lists in ``options`` (the HPU's ``kernel``; the others none);
* cycle counters of one type: ``last_cycles`` (int, the most recent call),
  ``last_engine_cycles`` (``{engine: cycles}`` of that call), ``total_cycles`` and ``calls``;
* saturation counters: ``last_saturations`` (``{place: values}`` the datapath clipped in the
  most recent call, or None where the backend cannot observe it) and ``total_saturations``,
  with a :class:`~tandem.host.common.errors.SaturationWarning` the first time anything
  saturates, so that no clipping goes unreported;
* ``close()`` means the same on every backend: the backend is released and every later call
  raises :class:`~tandem.host.common.errors.DeviceClosedError`; a device is a context manager.

A datapath's device adds its own calls, which validate their arguments (``ValueError`` with
one line naming the bad value), build requests and hand them to :meth:`Device._run`.
"""

import warnings
from typing import ClassVar

from tandem.host.common.checks import label
from tandem.host.common.errors import DeviceClosedError, SaturationWarning

from .backend import BACKENDS, Backend

__all__ = ["Device"]


class Device:
    """Backend choice, cycle counters and lifetime shared by every accelerator device.

    Parameters
    ----------
    params
        The engine's parameter set (what the backend runs, and the RTL is generated from).
    backend
        ``"golden"`` or ``"rtl"``.
    name
        Label in messages.
    options
        Options of the RTL backend.
    """

    #: Backend class per kind; every device subclass sets both.
    backends: ClassVar[dict[str, type[Backend]]] = {}

    def __init__(self, params, *, backend: str, name: str, options: dict):
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        label(name, "name")
        accepted = getattr(self.backends.get(backend), "options", ())
        unknown = sorted(set(options) - set(accepted)) if backend == "golden" else []
        if unknown:
            takes = f"only {', '.join(accepted)}" if accepted else "no options"
            raise ValueError(f"the golden backend takes {takes}, got {unknown}")
        self.params = params
        self.name = name
        self.backend: Backend = self._make_backend(backend, options)
        #: Cycles of the most recent call, per engine of that call, and of every call.
        self.last_cycles = 0
        self.last_engine_cycles: dict[str, int] = {}
        self.total_cycles = 0
        self.calls = 0
        #: Values saturated in the most recent call by place (None: not observable on this
        #: backend), and in every call.
        self.last_saturations: dict[str, int] | None = {}
        self.total_saturations: dict[str, int] = {}
        self._warned_saturation = False
        self._closed = False
        self._in_flight = False

    def _make_backend(self, kind: str, options: dict) -> Backend:
        """The backend of ``kind`` for this device's parameters (subclasses may override)."""
        return self.backends[kind](self.params, **options)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceClosedError(f"{self.name}: the device is closed")

    def _run(self, requests: list) -> list:
        """Run ``requests`` as one batch on the backend, count its cycles, return the results."""
        self._submit(requests)
        return self._collect()

    def _submit(self, requests: list) -> None:
        """Start ``requests`` as one batch (:meth:`Backend.submit`); :meth:`_collect` ends it."""
        self._check_open()
        if self._in_flight:
            raise RuntimeError(f"{self.name}: a batch is in flight; collect it first")
        self.backend.submit(requests)
        self._in_flight = True

    def _collect(self) -> list:
        """The results of the batch :meth:`_submit` started, its cycles counted."""
        if not self._in_flight:
            raise RuntimeError(f"{self.name}: no batch in flight")
        self._in_flight = False
        call = self.backend.collect()
        self._count(call.cycles, call.engine_cycles, call.saturations)
        return call.results

    def _count(self, cycles: int, engine_cycles=None, saturations=None) -> None:
        self.last_cycles = int(cycles)
        self.last_engine_cycles = {k: int(v) for k, v in (engine_cycles or {}).items()}
        self.total_cycles += int(cycles)
        self.calls += 1
        self._count_saturations(saturations)

    def _count_saturations(self, saturations, stacklevel: int = 5) -> None:
        """Record ``{place: values}`` saturated by the most recent call (None: not observable)
        and warn the first time anything saturates; host-side calls that clip (a device's
        ``quantize``) report through here too, with the ``stacklevel`` that names their
        caller (3 from a device method)."""
        if saturations is None:
            self.last_saturations = None
            return
        self.last_saturations = {k: int(v) for k, v in saturations.items() if v}
        for place, count in self.last_saturations.items():
            self.total_saturations[place] = self.total_saturations.get(place, 0) + count
        if self.last_saturations and not self._warned_saturation:
            self._warned_saturation = True
            places = ", ".join(f"{n} {place}" for place, n in self.last_saturations.items())
            warnings.warn(
                f"{self.name}: the datapath saturated values ({places} in call {self.calls}); "
                f"{type(self).__name__}.total_saturations counts every one",
                SaturationWarning,
                stacklevel=stacklevel,
            )

    def close(self) -> None:
        """Release the backend (stop a simulator); every later call raises."""
        if not self._closed:
            self._closed = True
            self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""Python side of the native harness: the built library through ctypes, beats as numpy arrays.

:class:`NativeModel` loads one :func:`~tandem.sim.native.build.build_native` library and
exposes what the servers need: queue beats on an input stream, offer a command beat, step the
clock until a stream has sent everything, an output stream holds N beats (or N beats with a
flag bit set) or device memory is idle, take the received beats, and reach device memory as
a numpy array, and optionally pace the read ports by HBM pseudo-channels
(:meth:`NativeModel.set_hbm`, ``hbm.h``). Every call crosses into C++ once and steps as many
cycles as its condition needs; beats travel as ``uint32`` arrays, ``ceil(width / 32)`` words
per beat, least significant word first.
"""

import ctypes
import functools
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tandem.host.common import bits

__all__ = [
    "NativeModel",
    "fields_to_words",
    "ints_to_words",
    "words_to_fields",
    "words_to_ints",
]

_u32p = np.ctypeslib.ndpointer(dtype=np.uint32, flags="C_CONTIGUOUS")
_u64p = np.ctypeslib.ndpointer(dtype=np.uint64, flags="C_CONTIGUOUS")
_i64p = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_i32p = np.ctypeslib.ndpointer(dtype=np.int32, flags="C_CONTIGUOUS")


def ints_to_words(values, words: int, width: int | None = None) -> np.ndarray:
    """Beats ``(n, words)`` from ints, masked to ``width`` bits (all ``32 * words`` bits when
    None); a negative int gives its two's complement bits."""
    width = 32 * words if width is None else width
    if width <= 64:  # one numpy pass where every value fits an int64 or a uint64
        array = np.asarray(values)
        if array.dtype.kind in "iu" and array.ndim == 1:
            mask = np.uint64((1 << width) - 1)
            wide = array.astype(np.int64).view(np.uint64) if array.dtype.kind == "i" else array
            wide = wide.astype(np.uint64) & mask
            return np.ascontiguousarray(wide.view("<u4").reshape(-1, 2)[:, :words])
    mask = (1 << width) - 1
    values = [int(v) & mask for v in values]
    raw = b"".join(v.to_bytes(4 * words, "little") for v in values)
    return np.frombuffer(raw, dtype="<u4").reshape(len(values), words).astype(np.uint32)


def words_to_ints(array: np.ndarray, *, signed_width: int | None = None) -> list[int]:
    """Ints from beats ``(n, words)``; read as ``signed_width``-bit two's complement when
    given."""
    data = np.ascontiguousarray(array, dtype="<u4")
    if data.shape[1] <= 2:
        wide = np.zeros((len(data), 2), np.uint32)
        wide[:, : data.shape[1]] = data
        values = wide.view("<u8")[:, 0]
        if signed_width is None:
            return values.tolist()
        if signed_width == 64:
            return values.view(np.int64).tolist()
        top = np.uint64(1 << (signed_width - 1))
        return ((values ^ top).astype(np.int64) - np.int64(1 << (signed_width - 1))).tolist()
    step = data.shape[1] * 4
    raw = data.tobytes()
    out = [int.from_bytes(raw[i : i + step], "little") for i in range(0, len(raw), step)]
    if signed_width is not None:
        top = 1 << (signed_width - 1)
        out = [v - (top << 1) if v & top else v for v in out]
    return out


class _Plan(NamedTuple):
    """How the scalar elements of a field list sit in a beat, as arrays over the elements
    (sorted by position; ``order`` maps them back to the field list's order)."""

    fields: list[bits.Field]  # the field of each element
    order: np.ndarray  # element index in the field list
    width: np.ndarray  # int64 bits
    low: np.ndarray  # int64 lowest value that fits
    span: np.ndarray  # uint64 highest minus lowest value that fits
    mask: np.ndarray  # uint64 2**width - 1
    word: np.ndarray  # int64 index of the 64-bit word holding the lowest bit
    shift: np.ndarray  # uint64 position of the lowest bit in that word
    split: np.ndarray  # int64 elements that reach into the next word
    words: int  # 64-bit words up to the top of the highest element


@functools.lru_cache(maxsize=64)
def _plan(widths: tuple, signed: bool | None) -> _Plan:
    fields, offsets = [], []
    for field, offset in bits.field_offsets(bits.as_fields(widths, signed=signed)):
        if field.width > 64:
            raise ValueError(f"field {field.name!r}: fields of at most 64 bits, not {field.width}")
        fields += [field] * field.elements
        offsets += [offset + i * field.width for i in range(field.elements)]
    offset = np.array(offsets, np.int64)
    order = np.argsort(offset, kind="stable")
    fields, offset = [fields[i] for i in order], offset[order]
    lows, highs = [], []
    for f in fields:
        lows.append(-(1 << (f.width - 1)) if f.signed is not False else 0)
        highs.append((1 << (f.width - 1)) - 1 if f.signed else (1 << f.width) - 1)
    width = np.array([f.width for f in fields], np.int64)
    shift = offset % 64
    return _Plan(
        fields=fields,
        order=order,
        width=width,
        low=np.array(lows, np.int64),
        span=np.array([min(h - lo, 2**64 - 1) for h, lo in zip(highs, lows)], np.uint64),
        mask=np.array([(1 << w) - 1 for w in width.tolist()], np.uint64),
        word=offset // 64,
        shift=shift.astype(np.uint64),
        split=np.flatnonzero(shift + width > 64),
        words=-(-int(np.max(offset + width, initial=0)) // 64),
    )


def _starts(target: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``target`` starts."""
    return np.flatnonzero(np.r_[True, target[1:] != target[:-1]])


def fields_to_words(widths, rows, words: int, width: int) -> np.ndarray:
    """Beats ``(n, words)`` packing each row of ``rows`` (``[n, columns]`` ints) into the
    fields ``widths`` (the first lowest, raw fields: a value fits when its signed or its
    unsigned reading does), masked to the port's ``width``. The beats
    :func:`tandem.host.common.bits.pack_rows` gives, in a few numpy passes over all the
    columns at once (a request carries thousands of beats of tens of fields)."""
    plan = _plan(tuple(widths), None)
    rows = np.asarray(rows)
    if rows.ndim == 1 and len(plan.fields) == 1:
        rows = rows[:, None]
    if rows.ndim != 2 or rows.shape[1] != len(plan.fields):
        raise ValueError(f"rows must be [n, {len(plan.fields)}], not {list(rows.shape)}")
    rows = rows.astype(np.int64)[:, plan.order]
    bad = (rows - plan.low).view(np.uint64) > plan.span  # below low wraps to a huge value
    if np.any(bad):
        row, column = np.unravel_index(np.argmax(bad), bad.shape)
        field, low = plan.fields[column], int(plan.low[column])
        kind = {None: "raw", True: "signed", False: "unsigned"}[field.signed]
        raise ValueError(
            f"field {field.name!r} = {int(rows[row, column])} does not fit {kind} "
            f"{field.width} bits ({low}..{low + int(plan.span[column])})"
        )
    value = rows.view(np.uint64) & plan.mask
    out = np.zeros((len(rows), max(-(-words // 2), plan.words) + 1), np.uint64)
    if len(rows) and len(plan.fields):  # the fields' bits never overlap: a sum is their OR
        starts = _starts(plan.word)
        out[:, plan.word[starts]] = np.add.reduceat(value << plan.shift, starts, axis=1)
        if len(plan.split):
            high = value[:, plan.split] >> (np.uint64(64) - plan.shift[plan.split])
            target = plan.word[plan.split] + 1
            starts = _starts(target)
            out[:, target[starts]] += np.add.reduceat(high, starts, axis=1)
    beats = np.ascontiguousarray(out.view("<u4")[:, :words])
    if width % 32:
        beats[:, -1] &= np.uint32((1 << (width % 32)) - 1)
    return beats


def words_to_fields(array: np.ndarray, widths) -> np.ndarray:
    """The signed fields ``widths`` of each beat of ``array`` (``(n, words)``): int64
    ``[n, columns]``, as :func:`tandem.host.common.bits.unpack_rows` reads them."""
    plan = _plan(tuple(widths), True)
    data = np.zeros((len(array), 2 * (max(-(-array.shape[1] // 2), plan.words) + 1)), "<u4")
    data[:, : array.shape[1]] = array
    data = data.view(np.uint64)
    value = data[:, plan.word] >> plan.shift
    if len(plan.split):
        split = plan.split
        value[:, split] |= data[:, plan.word[split] + 1] << (np.uint64(64) - plan.shift[split])
    value &= plan.mask
    sign = np.uint64(1) << (plan.width - 1).astype(np.uint64)
    out = np.empty_like(value, dtype=np.int64)
    out[:, plan.order] = (value ^ sign).view(np.int64) - sign.view(np.int64)
    return out


class NativeModel:
    """One native harness instance (see the module docstring).

    Parameters
    ----------
    library
        Path of the built ``libtandem_native.so``.
    manifest
        The design's manifest (stream names, widths, signedness).
    memory_bytes
        Device memory behind the design's AXI4 ports (0 when it has none).
    trace
        FST file to record waves into (the library must be built with waves).
    """

    def __init__(self, library: Path, manifest: dict, *, memory_bytes: int = 0, trace=None):
        lib = self._lib = ctypes.CDLL(str(library))
        vp, u64, i32 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int
        i64, f64 = ctypes.c_int64, ctypes.c_double
        signatures = {
            "tn_new": (vp, [u64, ctypes.c_char_p]),
            "tn_free": (None, [vp]),
            "tn_traced": (i32, []),
            "tn_fast_eval": (i32, [vp, i32]),
            "tn_source": (i32, [vp, ctypes.c_char_p]),
            "tn_sink": (i32, [vp, ctypes.c_char_p]),
            "tn_cycle": (u64, [vp]),
            "tn_set_read_latency": (None, [vp, u64]),
            "tn_hold_memory": (None, [vp, i32]),
            "tn_reset": (None, [vp, i32]),
            "tn_run": (None, [vp, u64]),
            "tn_send": (None, [vp, i32, _u32p, u64]),
            "tn_command": (None, [vp, i32, _u32p]),
            "tn_pending": (u64, [vp, i32]),
            "tn_last_transfer": (u64, [vp, i32]),
            "tn_enable_sink": (None, [vp, i32]),
            "tn_received": (u64, [vp, i32]),
            "tn_take": (u64, [vp, i32, _u32p, u64]),
            "tn_until_sent": (i32, [vp, i32, u64]),
            "tn_until_received": (i32, [vp, i32, u64, u64]),
            "tn_until_marked": (i32, [vp, i32, i32, u64, u64]),
            "tn_until_memory_idle": (i32, [vp, u64]),
            "tn_memory": (ctypes.POINTER(ctypes.c_uint8), [vp]),
            "tn_memory_size": (u64, [vp]),
            "tn_errors": (i32, [vp, ctypes.c_char_p, i32]),
            "tn_flush": (None, [vp]),
            "tn_axi_ports": (i32, [vp]),
            "tn_axi_name": (ctypes.c_char_p, [vp, i32]),
            "tn_axi_records": (u64, [vp, i32, _u64p, u64, _u64p]),
            "tn_clear_records": (None, [vp]),
            "tn_read_ports": (i32, [vp]),
            "tn_set_hbm": (i32, [vp, i32, u64, i32, f64, f64, f64, i64, i64, i32, f64]),
            "tn_set_port_home": (None, [vp, i32, _i32p, i32]),
            "tn_hbm_channel_bytes": (u64, [vp, _i64p]),
            "tn_hbm_clear_counters": (None, [vp]),
        }
        for name, (restype, argtypes) in signatures.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        if trace is not None and not lib.tn_traced():
            raise ValueError("this native build records no waves (build it with waves=True)")
        self.manifest = manifest
        self.streams = manifest["streams"]
        path = None if trace is None else str(trace).encode()
        self._h = lib.tn_new(int(memory_bytes), path)
        self._ports = {}
        for name, stream in self.streams.items():
            find = lib.tn_source if stream["direction"] == "sink" else lib.tn_sink
            self._ports[name] = find(self._h, name.encode())
        self.memory = None
        self.hbm = None  # the HbmParams of the HBM mode, None while it is off
        if memory_bytes:
            pointer = lib.tn_memory(self._h)
            self.memory = np.ctypeslib.as_array(pointer, shape=(int(memory_bytes),))

    # --- stream ports ------------------------------------------------------------------
    def words(self, port: str) -> int:
        """32-bit words per beat of ``port``."""
        return max(1, (int(self.streams[port]["payload_width"]) + 31) // 32)

    def width(self, port: str) -> int:
        return int(self.streams[port]["payload_width"])

    def _beats(self, port: str, beats) -> np.ndarray:
        if isinstance(beats, np.ndarray) and beats.dtype == np.uint32 and beats.ndim == 2:
            return np.ascontiguousarray(beats)
        return ints_to_words(beats, self.words(port), self.width(port))

    def send(self, port: str, beats) -> None:
        """Queue ``beats`` (ints, or a ``(n, words)`` uint32 array) on input stream ``port``."""
        array = self._beats(port, beats)
        if len(array):
            self._lib.tn_send(self._h, self._ports[port], array, len(array))

    def command(self, port: str, beat: int) -> None:
        """Offer ``beat`` on ``port`` from now on (before the next edge) until it is taken."""
        self._lib.tn_command(self._h, self._ports[port], self._beats(port, [beat]))

    def pending(self, port: str) -> int:
        """Beats queued on ``port`` and not yet taken by the design."""
        return int(self._lib.tn_pending(self._h, self._ports[port]))

    def last_transfer(self, port: str) -> int:
        """Cycle of the latest transfer on input stream ``port``."""
        return int(self._lib.tn_last_transfer(self._h, self._ports[port]))

    def enable(self, port: str) -> None:
        """Start taking beats on output stream ``port`` (ready rises at the next edge)."""
        self._lib.tn_enable_sink(self._h, self._ports[port])

    def received(self, port: str) -> int:
        return int(self._lib.tn_received(self._h, self._ports[port]))

    def take(self, port: str, count: int | None = None) -> np.ndarray:
        """Received beats of ``port`` (all, or the first ``count``): ``(n, words)`` uint32."""
        available = self.received(port)
        count = available if count is None else min(int(count), available)
        out = np.empty((count, self.words(port)), dtype=np.uint32)
        if count:
            self._lib.tn_take(self._h, self._ports[port], out, count)
        return out

    # --- the clock ---------------------------------------------------------------------
    @property
    def cycle(self) -> int:
        """Rising edges since the model was created."""
        return int(self._lib.tn_cycle(self._h))

    def reset(self, cycles: int = 2) -> None:
        """Drop queued beats, hold reset ``cycles`` edges, release it, one more edge."""
        self._lib.tn_reset(self._h, int(cycles))

    def run(self, cycles: int) -> None:
        self._lib.tn_run(self._h, int(cycles))

    def until_sent(self, port: str, deadline: int) -> bool:
        """Step until ``port`` has sent all it queued; False when ``deadline`` came first."""
        return self._lib.tn_until_sent(self._h, self._ports[port], int(deadline)) == 0

    def until_received(self, port: str, count: int, deadline: int) -> bool:
        """Step until ``port`` holds ``count`` beats; False when ``deadline`` came first."""
        return (
            self._lib.tn_until_received(self._h, self._ports[port], int(count), int(deadline)) == 0
        )

    def until_marked(self, port: str, bit: int, count: int, deadline: int) -> bool:
        """Step until ``count`` beats of ``port`` not yet taken have payload bit ``bit`` set."""
        ok = self._lib.tn_until_marked(
            self._h, self._ports[port], int(bit), int(count), int(deadline)
        )
        return ok == 0

    def until_memory_idle(self, deadline: int) -> bool:
        """Step until no read burst is in flight and every write is answered."""
        return self._lib.tn_until_memory_idle(self._h, int(deadline)) == 0

    def fast_eval(self, on: bool) -> bool:
        """Turn the fast evaluation (``harness.h``, "Evaluation") on or off; whether it is on
        (never for a build whose model was not in the shape it needs, nor with waves)."""
        return bool(self._lib.tn_fast_eval(self._h, int(on)))

    # --- device memory -----------------------------------------------------------------
    def hold_memory(self, held: bool) -> None:
        self._lib.tn_hold_memory(self._h, int(held))

    def set_read_latency(self, cycles: int) -> None:
        """Cycles from each read address to its first beat (in HBM mode: replaces the HBM
        latency, as the cocotb memory's ``set_read_latency`` does)."""
        self._lib.tn_set_read_latency(self._h, int(cycles))

    def axi_records(self) -> dict[str, dict]:
        """Per AXI port since the last :meth:`clear_records`: ``bursts`` (an int64 array of
        ``(cycle, address, beats)`` per address handshake) and, for read ports, ``r_beats``,
        ``first_ar`` and ``last_r`` (cycles)."""
        out = {}
        for port in range(self._lib.tn_axi_ports(self._h)):
            name = self._lib.tn_axi_name(self._h, port).decode()
            stats = np.zeros(3, np.uint64)
            empty = np.zeros(3, np.uint64)
            count = self._lib.tn_axi_records(self._h, port, empty, 0, stats)
            bursts = np.zeros(3 * max(count, 1), np.uint64)
            self._lib.tn_axi_records(self._h, port, bursts, count, stats)
            out[name] = {
                "bursts": bursts[: 3 * count].reshape(count, 3).astype(np.int64),
                "r_beats": int(stats[0]),
                "first_ar": int(stats[1]),
                "last_r": int(stats[2]),
            }
        return out

    def clear_records(self) -> None:
        self._lib.tn_clear_records(self._h)

    # --- HBM mode ----------------------------------------------------------------------
    def read_ports(self) -> list[str]:
        """Names of the AXI read ports, in the harness's order (the HBM model's ports)."""
        count = self._lib.tn_read_ports(self._h)
        return [self._lib.tn_axi_name(self._h, port).decode() for port in range(count)]

    def set_hbm(self, params, homes: dict | None = None) -> None:
        """Pace the read ports by HBM pseudo-channels, as the cocotb ``HbmMemory`` does.

        Parameters
        ----------
        params : tandem.sim.hpu.hbm.HbmParams
            The channels. Their buckets start full and the channel counters at zero; a
            burst's first beat waits ``params.latency`` cycles (until a later
            :meth:`set_read_latency`).
        homes : dict, optional
            Home channels of read ports by name (:meth:`set_port_home`); a port left out has
            none, so all its reads are lateral, as a cocotb port attached with no channels.

        Raises
        ------
        ValueError
            When a read port's beat is not ``params.beat_bytes``, or a name or channel is
            unknown.
        """
        from tandem.sim.hpu.hbm import HbmModel

        # The bucket's size and start as the Python model computes them, from the model
        # itself, so both start from the same doubles.
        reference = HbmModel(params)
        done = self._lib.tn_set_hbm(
            self._h,
            int(params.channels),
            int(params.channel_bytes),
            int(params.beat_bytes),
            float(params.fill_bytes_per_cycle),
            float(reference.cap),
            float(reference.tokens[0]),
            int(params.refresh_interval),
            int(params.refresh_cycles),
            int(params.latency),
            float(params.lateral_factor),
        )
        if done != 0:
            raise ValueError(
                f"the HBM model has {params.beat_bytes}-byte beats, not every read port has"
            )
        self.hbm = params
        for port, channels in (homes or {}).items():
            self.set_port_home(port, channels)

    def set_port_home(self, port: str, channels) -> None:
        """Home channels of read port ``port`` in HBM mode: reading any other channel costs
        ``1 / lateral_factor`` times the beat's bytes."""
        if self.hbm is None:
            raise ValueError("HBM mode is off (set_hbm first)")
        names = self.read_ports()
        if port not in names:
            raise ValueError(f"no read port {port!r} (has {names})")
        home = np.array(sorted({int(c) for c in channels}), np.int32)
        bad = [c for c in home.tolist() if not 0 <= c < self.hbm.channels]
        if bad:
            raise ValueError(f"channel {bad[0]!r} not in 0..{self.hbm.channels - 1}")
        self._lib.tn_set_port_home(self._h, names.index(port), home, len(home))

    def hbm_channel_bytes(self) -> tuple[np.ndarray, int]:
        """Bytes each channel served (int64 ``[channels]``) and the beats, since
        :meth:`set_hbm` or :meth:`clear_hbm_counters`."""
        if self.hbm is None:
            raise ValueError("HBM mode is off (set_hbm first)")
        out = np.zeros(self.hbm.channels, np.int64)
        beats = self._lib.tn_hbm_channel_bytes(self._h, out)
        return out, int(beats)

    def clear_hbm_counters(self) -> None:
        """Zero the channel byte and beat counters (the buckets stay as they are)."""
        self._lib.tn_hbm_clear_counters(self._h)

    def errors(self) -> list[str]:
        """AXI protocol errors since the last call."""
        buffer = ctypes.create_string_buffer(4096)
        count = self._lib.tn_errors(self._h, buffer, len(buffer))
        return buffer.value.decode(errors="replace").split("; ") if count else []

    def close(self) -> None:
        """Finish the model (closes the wave file)."""
        if self._h:
            self._lib.tn_flush(self._h)
            self._lib.tn_free(self._h)
            self._h = None
            self.memory = None

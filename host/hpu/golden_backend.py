"""The golden backend of one ``hpu`` engine: device memory as a numpy array, each batch through
one call of the golden model (:func:`~tandem.host.hpu.golden.hpu_golden_batch`, or its compiled
twin reading the regions in place), bit for bit what the engine computes and writes.
:class:`~tandem.host.hpu.device.HpuDevice` runs it as ``backend="golden"``; the card's golden
model (:mod:`tandem.host.hpu.card`) runs one per engine.
"""

import contextlib

import numpy as np
from tandem.host.backend.backend import ArrayMemory, Backend, Call, check_span
from tandem.host.common.threads import one_blas_thread
from tandem.mappings.hpu.kv_layout import BLOCK_BYTES, PAGE_TOKENS

from .codec import HpuBatch, HpuRequest, HpuResults
from .cycles import batch_cycles
from .golden import hpu_golden_batch
from .golden_native import hpu_golden_regions_native, native_golden
from .params import HpuParams, check_scales

__all__ = ["GOLDEN_KERNELS", "NATIVE_MAX_HEAD_DIM", "GoldenHpuBackend", "check_batch", "kv_waves"]


def check_batch(params: HpuParams, memory_bytes: int, batch: HpuBatch) -> None:
    """The checks :func:`pack_descriptor` applies, plus the memory span, for a whole batch."""
    p = params
    lengths, bases = batch.length, batch.base
    bad = (lengths < 1) | (lengths > p.max_seq_len)
    if bad.any():
        raise ValueError(f"length must be in 1..{p.max_seq_len}, not {lengths[bad][0]}")
    misaligned = (bases < 0) | (bases % BLOCK_BYTES != 0)
    if misaligned.any():
        p.layout.check_base(int(bases[misaligned][0]))
    ends = p.layout.region_end(bases, lengths)
    outside = ends > memory_bytes
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        check_span(memory_bytes, int(bases[i]), int(ends[i] - bases[i]))
    # One check of every scale the batch carries (the q scales and the appended tokens').
    appended = batch.append
    scales = np.concatenate(
        [batch.score_scale.reshape(-1), batch.new_k_scale[appended], batch.new_v_scale[appended]]
    )
    check_scales("score_scale and new k/v scales", scales)


def kv_waves(params: HpuParams, batch: HpuBatch) -> list[slice]:
    """Runs of requests that may execute as one vectorized step, in order.

    The engine runs a batch request by request: each reads its rows, then appends its token.
    Writing every append of a run before reading any rows gives the same result unless a
    request appends into what an earlier request of the run reads; the device's batches never
    do (a head's later request appends beyond what the earlier ones read), raw batches may.
    """
    lengths, bases, count = batch.length, batch.base, len(batch)
    # A region's K span (its V span, in the split layout, mirrors it and overlaps alike).
    region = -(-lengths // PAGE_TOKENS) * params.layout.page_stride
    order = np.argsort(bases, kind="stable")
    if np.all(bases[order][1:] >= (bases + region)[order][:-1]):
        return [slice(0, count)]  # disjoint regions: nothing to order
    waves, begin = [], 0
    for j in np.flatnonzero(batch.append):
        if j == 0:
            continue
        earlier = slice(begin, j)
        overlap = (bases[earlier] < bases[j] + region[j]) & (
            bases[j] < bases[earlier] + region[earlier]
        )
        beyond = (bases[earlier] == bases[j]) & (lengths[j] - 1 >= lengths[earlier])
        if np.any(overlap & ~beyond):
            waves.append(slice(begin, int(j)))
            begin = int(j)
    waves.append(slice(begin, count))
    return waves


#: The golden backend's kernels: the numpy specification and its compiled twin.
GOLDEN_KERNELS = ("auto", "native", "numpy")


#: Widest head the compiled twin takes (``golden_native.c`` keeps one query's accumulators in
#: a local array of this many elements).
NATIVE_MAX_HEAD_DIM = 256


class GoldenHpuBackend(Backend):
    """Device memory as a numpy array; each batch through one golden-model call.

    Executes a batch exactly as the engine does: every request reads the K and V rows of
    positions ``0 .. n_mem - 1`` at its base from memory, writes its appended token's rows and
    scales to memory, and gets its result bit-exactly; all requests of a batch at once.

    Parameters
    ----------
    params
        The engine's parameters.
    memory_bytes
        Size of device memory in bytes.
    kernel
        ``"numpy"``: :func:`~tandem.host.hpu.golden.hpu_golden_batch`, the specification;
        ``"native"``: its compiled twin, reading the regions in place
        (:func:`~tandem.host.hpu.golden_native.hpu_golden_regions_native`, same results bit
        for bit, faster on a decode step's small batches), ``ValueError`` where it cannot
        be built; ``"auto"`` (default): the twin where a C compiler builds it, else numpy.
        :attr:`kernel` is the one that runs, :attr:`kernel_note` why ``"auto"`` chose numpy.
    """

    name = "golden"
    options = ("kernel",)

    def __init__(self, params: HpuParams, memory_bytes: int, kernel: str = "auto"):
        if not isinstance(kernel, str) or kernel not in GOLDEN_KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(GOLDEN_KERNELS)}, not {kernel!r}")
        self.params = params
        self.memory = ArrayMemory(memory_bytes)
        #: The kernel that runs: ``"native"`` or ``"numpy"``; why ``"auto"`` chose numpy.
        self.kernel, self.kernel_note = "numpy", ""
        reason = None
        if params.head_dim > NATIVE_MAX_HEAD_DIM:  # its accumulator row is a fixed array
            reason = (
                f"the compiled twin holds head_dim <= {NATIVE_MAX_HEAD_DIM} accumulators, not "
                f"head_dim={params.head_dim}"
            )
        if kernel != "numpy" and reason is not None:
            if kernel == "native":
                raise ValueError(f"kernel 'native' cannot run: {reason}")
            self.kernel_note = reason
        elif kernel != "numpy":
            built = native_golden()
            if built.library is not None:
                self.kernel = "native"
            elif kernel == "native":
                raise ValueError(f"kernel 'native' cannot be built: {built.reason}")
            else:
                self.kernel_note = built.reason

    def run(self, requests: HpuBatch | list[HpuRequest]) -> Call:
        p = self.params
        batch = HpuBatch.of(p, requests)
        if not len(batch):
            return Call(HpuResults.of(p, [], []), 0, {})
        check_batch(p, self.memory.size, batch)
        saturations: dict[str, int] = {}
        # The numpy kernel's sums go through BLAS, held to one thread (see
        # tandem.host.common.threads); the compiled twin calls no BLAS.
        with one_blas_thread() if self.kernel == "numpy" else contextlib.nullcontext():
            results = HpuResults.concat(
                [self._run_wave(batch, w, saturations) for w in kv_waves(p, batch)]
            )
        cycles = int(batch_cycles(p, batch.length, append=batch.append, partial=batch.partial))
        return Call(results, cycles, {"hpu": cycles}, saturations)

    def _run_wave(self, batch: HpuBatch, wave: slice, saturations: dict) -> HpuResults:
        """Requests ``wave`` of ``batch`` at once; adds the values they saturated (what the
        engine emits: outputs of full-mode requests only) to ``saturations``."""
        p, layout, memory = self.params, self.params.layout, self.memory.array
        lengths, bases = batch.length[wave], batch.base[wave]
        adds = batch.append[wave]
        if adds.any():
            layout.write_kv_tokens(
                memory,
                bases[adds],
                lengths[adds] - 1,
                batch.new_k[wave][adds],
                batch.new_k_scale[wave][adds],
                batch.new_v[wave][adds],
                batch.new_v_scale[wave][adds],
            )
        if self.kernel == "native":  # reads the regions in place
            out = hpu_golden_regions_native(
                p, memory, bases, lengths, batch.q[wave], batch.score_scale[wave]
            )
        else:
            k, k_scale, v, v_scale = layout.read_regions(memory, bases, lengths)
            out = hpu_golden_batch(
                p, batch.q[wave], batch.score_scale[wave], k, k_scale, v, v_scale, lengths
            )
        partial = batch.partial[wave]
        emits = {"score": None, "weight": None, "output": ~partial}
        for place, counts in out.saturated.items():
            chosen = counts if emits[place] is None else counts[emits[place]]
            saturations[place] = saturations.get(place, 0) + int(chosen.sum())
        # What the engine emits: y in full mode, (m, l, o) in partial mode; the rest is zero.
        m, l_sum, o, y = out.m, out.l, out.o, out.y
        if partial.any():
            y = np.where(partial[:, None, None], 0, y)
        if not partial.all():
            m, l_sum = (np.where(partial[:, None], x, 0) for x in (m, l_sum))
            o = np.where(partial[:, None, None], o, 0)
        return HpuResults(batch.seq_id[wave], partial, m, l_sum, o, y)

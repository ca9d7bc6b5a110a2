"""Flow control for fixed-latency pipelines between two streams."""

from amaranth.hdl import Module, Signal

__all__ = ["stall_all_pipeline"]


def stall_all_pipeline(m: Module, i, o, latency: int, *, name: str = "stage") -> Signal:
    """Wire stream ``i`` to stream ``o`` through ``latency`` register stages that move together.

    Returns the stage enable: every pipeline register of the datapath updates only while it is
    high (``with m.If(enable): m.d.sync += ...``; memory read ports take it as ``en``). The
    pipeline advances whenever the output slot is empty or being taken, so it sustains one
    transfer per cycle under ``o.ready`` and holds every stage while the consumer stalls.
    ``i.ready`` depends combinationally on ``o.ready``, which the stream rules allow; ``o.valid``
    never depends on ``o.ready``.
    """
    if latency < 1:
        raise ValueError(f"latency must be at least 1, not {latency!r}")
    enable = Signal(name=f"{name}_enable")
    m.d.comb += [enable.eq(~o.valid | o.ready), i.ready.eq(enable)]
    valid = i.valid
    for index in range(latency):
        stage_valid = Signal(name=f"{name}{index + 1}_valid")
        with m.If(enable):
            m.d.sync += stage_valid.eq(valid)
        valid = stage_valid
    m.d.comb += o.valid.eq(valid)
    return enable

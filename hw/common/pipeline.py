"""Flow control for fixed-latency pipelines between two streams."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisterSlice", "sideband", "stall_all_pipeline"]


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


def sideband(m: Module, prefix: str, fields, enable=None, *, suffix: str = "") -> dict:
    """Carry a group of named fields through one pipeline stage.

    Parameters
    ----------
    m : Module
    prefix : str
        The stage's name: field ``key``'s register is named ``f"{prefix}_{key}{suffix}"``.
    fields : dict or data.View
        The fields in front of the stage, by name: values, or a view of a
        ``data.StructLayout`` (one register per field).
    enable : Value, optional
        The stage enable: the registers take their fields only while it is high (always,
        when not given).
    suffix : str
        Appended to every register's name (a unit's or a query's index).

    Returns
    -------
    dict
        The registered fields, by the same names and in the same order.
    """
    if isinstance(fields, data.View):
        fields = {key: fields[key] for key, _ in fields.shape()}
    stage = {}
    # One register and one statement per field, in the group's order: the generated names
    # and the netlist's order follow it, so a pipeline that replaces hand-written registers
    # with this helper generates the same Verilog.
    for key, value in fields.items():
        reg = Signal.like(value, name=f"{prefix}_{key}{suffix}")
        if enable is None:
            m.d.sync += reg.eq(value)
        else:
            with m.If(enable):
                m.d.sync += reg.eq(value)
        stage[key] = reg
    return stage


class RegisterSlice(wiring.Component):
    """A stream through registers both ways (a skid buffer): ``o``'s valid and payload and
    ``i``'s ready are registers, so neither the payload's nor the ready's logic runs through
    it. Full rate: one transfer per cycle while ``o`` takes them; one cycle of latency. The
    second register (the skid) holds the beat ``i`` offered in the cycle ``o`` stalled, so
    ``i.ready`` can be a register.

    Parameters
    ----------
    shape : ShapeLike
        The payload's shape.

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        skid_valid = Signal(name="skid_valid")
        skid = Signal(self.shape, name="skid")
        m.d.comb += self.i.ready.eq(~skid_valid)
        with m.If(~self.o.valid | self.o.ready):
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~skid_valid):
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m

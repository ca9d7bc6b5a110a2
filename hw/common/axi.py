"""AXI4 manager (master) port signatures, flat, so Verilog ports read ``<port>__araddr`` etc.

The names follow the AXI4 specification, so cocotbext-axi's ``AxiReadBus.from_prefix(dut,
"<port>_")`` and vendor IP integrators find every signal. Only the signals a streaming
manager needs are present; the optional ones (lock, cache, prot, qos, region, user) are left
at their defaults by the subordinate.
"""

from amaranth.hdl import unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BURST_INCR", "RESP_OKAY", "AxiReadManager", "AxiWriteManager"]

#: ``AxBURST`` encoding of an incrementing burst.
BURST_INCR = 1
#: ``RRESP``/``BRESP`` of a transfer that succeeded (EXOKAY needs an exclusive access, which
#: these managers never make; SLVERR and DECERR are failures).
RESP_OKAY = 0


class AxiReadManager(wiring.Signature):
    """Read address and read data channels, seen from the manager.

    Parameters
    ----------
    addr_bits, data_bits, id_bits
        Widths of ``araddr``, ``rdata`` and the ID signals.
    """

    def __init__(self, *, addr_bits: int, data_bits: int, id_bits: int = 1):
        super().__init__(
            {
                "arid": Out(unsigned(id_bits)),
                "araddr": Out(unsigned(addr_bits)),
                "arlen": Out(unsigned(8)),
                "arsize": Out(unsigned(3)),
                "arburst": Out(unsigned(2)),
                "arvalid": Out(1),
                "arready": In(1),
                "rid": In(unsigned(id_bits)),
                "rdata": In(unsigned(data_bits)),
                "rresp": In(unsigned(2)),
                "rlast": In(1),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )


class AxiWriteManager(wiring.Signature):
    """Write address, write data and write response channels, seen from the manager."""

    def __init__(self, *, addr_bits: int, data_bits: int, id_bits: int = 1):
        super().__init__(
            {
                "awid": Out(unsigned(id_bits)),
                "awaddr": Out(unsigned(addr_bits)),
                "awlen": Out(unsigned(8)),
                "awsize": Out(unsigned(3)),
                "awburst": Out(unsigned(2)),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(unsigned(data_bits)),
                "wstrb": Out(unsigned(data_bits // 8)),
                "wlast": Out(1),
                "wvalid": Out(1),
                "wready": In(1),
                "bid": In(unsigned(id_bits)),
                "bresp": In(unsigned(2)),
                "bvalid": In(1),
                "bready": Out(1),
            }
        )

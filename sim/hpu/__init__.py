"""The ``hpu`` decode-attention engine in simulation.

:mod:`.hpu_tb` is the cocotb regression (Verilator and Icarus) with its device-memory model
(:mod:`.memory`); :mod:`.amaranth_sim` runs the gateware in Amaranth's simulator for fast unit
tests.
"""

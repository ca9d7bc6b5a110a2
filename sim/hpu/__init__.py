"""cocotb testbench of the ``hpu`` decode-attention engine and its device-memory model."""

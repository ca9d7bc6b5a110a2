"""cocotb testbench of the rnn engine."""

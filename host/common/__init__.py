"""Helpers every datapath shares: fixed point, bit packing, errors, and the common blocks
(``exp2``, ``reciprocal``, ``adder-tree``, ``mac``)."""

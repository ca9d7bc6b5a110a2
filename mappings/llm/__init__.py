"""FlightLLM-style mapping flow: a Llama-architecture model to tandem's engines.

* :mod:`.isa`: the instruction set (one 128-bit word per instruction, one field list).
* :mod:`.program`: the decoder layer's instructions, buffer allocation, the decode program and
  the length-adaptive prefill templates.
* :mod:`.compiler`: calibration, per-layer N:M pattern choice, int8 packing, ``summary.json``.
* :mod:`.runner`: executes a compiled program on ``sparse-mpe`` and ``hpu`` devices.
* :mod:`.cli`: ``tandem compile`` and ``tandem cosim decode --program``.
"""

"""RNN tile dispatcher mapping (SHARP-style): tiling of ``[W | U]``, dispatch schedule, writer.

* :mod:`.tiling` — the tile program one time step runs (pure numpy, no timing);
* :mod:`.schedule` — the cycle model of the ``rnn`` engine, predicted cycles per step and MAC
  utilization, the naive no-overlap schedule, and the choice of tile shape;
* :mod:`.writer` — schedule files (YAML summary + npz tile program);
* :mod:`.cli` — ``tandem map rnn``.
"""

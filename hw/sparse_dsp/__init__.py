"""Gateware of the N:M sparse DSP engines: ``sparse-dsp-chain`` and ``sparse-mpe``."""

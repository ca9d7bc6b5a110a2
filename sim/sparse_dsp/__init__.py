"""cocotb testbenches of ``sparse-dsp-chain`` and ``sparse-mpe``."""

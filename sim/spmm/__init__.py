"""cocotb testbenches of the SpMM engines (``systolic``, ``sparse-engine``)."""

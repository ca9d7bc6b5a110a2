"""Co-simulation: generated Verilog serving a host process (``backend="rtl"`` devices)."""

"""Native co-simulation: the Verilated design, its port models and device memory in C++."""

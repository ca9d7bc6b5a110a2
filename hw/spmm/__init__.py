"""SpMM engines of the GCN aggregation: the ``systolic`` array and the ``sparse-engine``."""

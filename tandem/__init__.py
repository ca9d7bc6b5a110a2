"""tandem: the accelerator half of heterogeneous GPU + FPGA/ACAP systems.

Import names: :mod:`tandem.hw` (Amaranth generators), :mod:`tandem.sim` (cocotb harness),
:mod:`tandem.host` (golden models and host runtime), :mod:`tandem.mappings` (workload
mappers); this package holds the CLI, the parameter machinery and the design registry.
"""

from importlib import metadata

try:
    __version__ = metadata.version("tandem")
except metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

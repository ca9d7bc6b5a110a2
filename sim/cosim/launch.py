"""Start the ``hpu`` RTL server: ``python -m tandem.sim.cosim.launch`` (used by RtlTransport).

Builds the generated Verilog once per (parameters, simulator) through
:func:`tandem.sim.runner.run_regression` (cached builds, shared with ``tandem sim hpu``) and
runs the cocotb module :mod:`tandem.sim.cosim.hpu_server`, which connects back to the host's
socket. Exits 0 when the server finished cleanly, 1 otherwise (the simulator log is in
``--run-dir``).
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", required=True, help="HpuParams as JSON")
    parser.add_argument("--simulator", default="verilator")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--memory", type=int, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args(argv)
    from tandem.sim.runner import run_regression

    from tandem.registry import get_design

    design = get_design("hpu")
    server = dataclasses.replace(design, testbench="tandem.sim.cosim.hpu_server")
    params = design.params(**json.loads(args.params))
    result = run_regression(
        server,
        params,
        simulator=args.simulator,
        seed=1,
        run_dir=args.run_dir,
        cache_dir=args.cache_dir,
        plusargs=(f"+tandem_cosim_socket={args.socket}", f"+tandem_cosim_memory={args.memory}"),
    )
    print(result.summary())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())

"""Start an RTL co-simulation server: ``python -m tandem.sim.cosim.launch`` (started by the
RTL backends' :class:`tandem.host.backend.cosim.CosimClient`).

Builds the generated Verilog of ``--design`` once per (parameters, simulator) through
:func:`tandem.sim.runner.run_regression` (cached builds, shared with ``tandem sim``) and runs
the design's cocotb server module (its registry entry's
:attr:`~tandem.registry.Design.cosim_server`: :mod:`tandem.sim.cosim.hpu_server` for ``hpu``,
:mod:`tandem.sim.cosim.stream_server` for the stream engines), which connects back to the host's
socket. With ``--harness native`` it serves from this process instead
(:mod:`tandem.sim.native.server`: :class:`~tandem.sim.native.server.CardServer` for
``hpu-card``, :class:`~tandem.sim.native.server.HpuServer` for a design with ``--memory``,
:class:`~tandem.sim.native.server.StreamServer` otherwise). Exits 0 when the server finished
cleanly, 1 otherwise (the simulator log is in ``--run-dir``), 2 for a design that has no
server.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", default="hpu", help="registered design name")
    parser.add_argument("--params", required=True, help="the design's parameters as JSON")
    parser.add_argument("--simulator", default="verilator")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--memory", type=int, help="device memory bytes (hpu)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument(
        "--harness",
        choices=("cocotb", "native"),
        default="cocotb",
        help="cocotb server in the simulator, or the native C++ harness (verilator only)",
    )
    parser.add_argument("--waves", type=Path, help="record an FST wave file here (native)")
    args = parser.parse_args(argv)
    if args.harness == "native":
        return _native(args)
    from tandem.sim.runner import run_regression

    from tandem.registry import get_design

    design = get_design(args.design)
    if design.cosim_server is None:
        parser.error(f"design {design.name!r} has no co-simulation server (no host device)")
    server = dataclasses.replace(design, testbench=design.cosim_server)
    params = design.params(**json.loads(args.params))
    plusargs = [f"+tandem_cosim_socket={args.socket}"]
    if args.memory is not None:
        plusargs.append(f"+tandem_cosim_memory={args.memory}")
    result = run_regression(
        server,
        params,
        simulator=args.simulator,
        seed=1,
        run_dir=args.run_dir,
        cache_dir=args.cache_dir,
        plusargs=tuple(plusargs),
    )
    print(result.summary())
    return 0 if result.passed else 1


def _native(args) -> int:
    """Build (or find) the design's native harness and serve the host from this process."""
    from tandem.sim.native.build import build_native
    from tandem.sim.native.model import NativeModel
    from tandem.sim.native.server import CardServer, HpuServer, StreamServer, serve

    import tandem.builtin_designs  # noqa: F401  (registers the designs)
    from tandem.registry import get_design

    design = get_design(args.design)
    params = design.params(**json.loads(args.params))
    library, manifest = build_native(
        design,
        params,
        cache_dir=args.cache_dir,
        waves=args.waves is not None,
        progress=lambda line: print(line, flush=True),
    )
    if args.waves is not None:
        args.waves.parent.mkdir(parents=True, exist_ok=True)
    model = NativeModel(library, manifest, memory_bytes=args.memory or 0, trace=args.waves)
    try:
        if design.name == "hpu-card":  # routes by engine, paces by the card's HBM model
            server = CardServer(model, params)
        elif args.memory:
            server = HpuServer(model, params)
        else:
            server = StreamServer(model, design.name)
        serve(args.socket, server)
    finally:
        model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""FuseSoC core files: a design's generated Verilog handed to vendor and open flows.

``tandem generate DESIGN --fusesoc`` writes ``DESIGN.core`` (FuseSoC's CAPI2 format) beside the
Verilog, so the HDL community's package manager and its build back end, edalize, take it from
there: ``fusesoc --cores-root DIR run --target synth tandem:designs:DESIGN``. The core is named
``tandem:designs:<design>:<version>`` (the tandem release), lists the Verilog (and the clock XDC
that ``--board`` writes) as filesets, names the top module, and has three targets:

``default``
    The Verilog and its top module, for a core that instantiates this one.
``synth``
    AMD Vivado synthesis (edalize's ``vivado`` flow, ``pnr: none``) for the part of
    ``--board`` when it names an AMD board, else of the design's own board
    (:attr:`tandem.registry.Design.board`, the board ``tandem synth`` uses when none is named).
    With an AMD ``--board`` the XDC of its default clock goes with it.
``pnr``
    The open flow on the ULX3S's Lattice ECP5 (:data:`PNR_BOARD`): yosys ``synth_ecp5``,
    nextpnr-ecp5 and ecppack (edalize's ``trellis`` flow) with the device, package, speed grade,
    clock and placer seed ``tandem pnr`` uses. A design whose port bits fit the package's user
    I/O gets ``DESIGN.lpf`` (``clk`` on the board's oscillator pin, the other ports where
    nextpnr puts them) and a bitstream. A wider one cannot be placed on pins and nextpnr writes
    no bitstream out of context, so its ``pnr`` target stops after ``synth_ecp5`` (``tandem
    pnr`` places it out of context and reports its Fmax).

The files are reproducible byte for byte: keys sorted, no timestamps, paths relative to the
core file. Writing them needs neither FuseSoC nor edalize; running a target needs both (the
``fusesoc`` extra) and the flow's tools on ``PATH`` (``vivado``; ``yosys``, ``nextpnr-ecp5``
and ``ecppack`` built with Tcl, which edalize's yosys script uses).
"""

import re
from typing import Any

import yaml

from . import __version__
from .boards import Board, load_board
from .generate import GeneratedDesign
from .pnr import place_config, port_bits
from .registry import Design

__all__ = ["PNR_BOARD", "core_files", "core_name", "fusesoc_names", "vivado_board"]

#: The ECP5 board of the ``pnr`` target (the board ``tandem pnr`` places on).
PNR_BOARD = "ulx3s-85f"
#: nextpnr's placer seed, as ``tandem pnr``'s default.
PNR_SEED = 1


def _version() -> str:
    """The release part of tandem's version (a VLNV version holds no ``+local`` part)."""
    match = re.match(r"\d+(\.\d+)*", __version__)
    return match.group(0) if match else "0"


def core_name(design: Design) -> str:
    """The core's VLNV: ``tandem:designs:<design>:<tandem version>``."""
    return f"tandem:designs:{design.name}:{_version()}"


def fusesoc_names(design: Design) -> tuple[str, str]:
    """The files :func:`core_files` may write for ``design``: the core and the ECP5 LPF."""
    return (f"{design.name}.core", f"{design.name}.lpf")


def vivado_board(design: Design, board: Board | None) -> Board:
    """The board of the ``synth`` target: ``board`` when it is an AMD one, else the design's."""
    if board is not None and board.synth_pass == "synth_xilinx":
        return board
    return load_board(design.board)


def core_files(generated: GeneratedDesign) -> dict[str, bytes]:
    """The FuseSoC files for a generated design, to write beside its Verilog.

    Parameters
    ----------
    generated
        What :func:`tandem.generate.generate` returned; its board (``board=``), when it has
        one, picks the ``synth`` target's part and brings its XDC.

    Returns
    -------
    dict[str, bytes]
        ``<design>.core`` and, when the design's ports fit the ECP5 package's pins,
        ``<design>.lpf``; file name to contents.

    Raises
    ------
    UserError
        An unknown board name.
    """
    design = generated.design
    name = design.name
    given = generated.manifest.get("board")
    board = load_board(given["name"]) if given is not None else None
    vivado = vivado_board(design, board)
    ecp5 = load_board(PNR_BOARD)
    config = place_config(ecp5)
    core_file, lpf_file = fusesoc_names(design)
    files: dict[str, bytes] = {}

    filesets: dict[str, Any] = {
        "rtl": {"file_type": "verilogSource", "files": [f"{name}.v"]},
    }
    synth_sets = ["rtl"]
    if generated.xdc is not None and board is not None and vivado.name == board.name:
        filesets["vivado_constraints"] = {"file_type": "xdc", "files": [f"{name}.xdc"]}
        synth_sets.append("vivado_constraints")
        clock = f", {board.default_clock_mhz:g} MHz clock on clk ({name}.xdc)"
    else:
        clock = ", no clock constraint (give --board for one)"

    nextpnr = [
        f"--{config['device']}",
        *("--package", str(config["package"]), "--speed", str(config["speed"])),
        *("--freq", f"{ecp5.default_clock_mhz:g}", "--seed", str(PNR_SEED)),
    ]
    pins = int(config["user_io"])
    bits = port_bits(generated.manifest)
    pnr_sets = ["rtl"]
    pnr_flow: dict[str, Any] = {"nextpnr_options": nextpnr}
    if bits <= pins:
        files[lpf_file] = (
            f'LOCATE COMP "clk" SITE "{config["clock_pin"]}";\n'
            f'IOBUF PORT "clk" IO_TYPE={config["clock_io_type"]};\n'
        ).encode()
        filesets["ecp5_constraints"] = {"file_type": "LPF", "files": [lpf_file]}
        pnr_sets.append("ecp5_constraints")
        nextpnr.append("--lpf-allow-unconstrained")
        pnr_note = f"clk on {config['clock_pin']}, the other ports on pins nextpnr picks; bitstream"
    else:
        pnr_flow["pnr"] = "none"
        pnr_note = (
            f"synth_ecp5 only: {bits} port bits exceed the package's {pins} user I/O and "
            "nextpnr writes no bitstream out of context (tandem pnr places it out of context)"
        )

    data = {
        "name": core_name(design),
        "description": f"{name}: {design.summary} (written by tandem generate --fusesoc)",
        "filesets": filesets,
        "targets": {
            "default": {"filesets": ["rtl"], "toplevel": design.top},
            "synth": {
                "description": f"Vivado synthesis for {vivado.part} ({vivado.full_name}){clock}",
                "filesets": synth_sets,
                "flow": "vivado",
                "flow_options": {"part": vivado.part, "pnr": "none"},
                "toplevel": design.top,
            },
            "pnr": {
                "description": (
                    f"yosys + nextpnr-ecp5 on {ecp5.full_name}, {ecp5.default_clock_mhz:g} MHz "
                    f"target: {pnr_note}"
                ),
                "filesets": pnr_sets,
                "flow": "trellis",
                "flow_options": pnr_flow,
                "toplevel": design.top,
            },
        },
    }
    text = "CAPI=2:\n" + yaml.safe_dump(
        data, sort_keys=True, default_flow_style=False, width=100, allow_unicode=True
    )
    return {core_file: text.encode(), **files}

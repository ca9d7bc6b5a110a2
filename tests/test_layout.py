"""The package's shape: no import cycles (function-level imports included), no private names
imported across modules, every datapath found by its name."""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module_files() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the installed ``tandem`` package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = config["tool"]["setuptools"]["package-dir"]
    modules = {}
    for package, folder in folders.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            # Nested package folders (tandem.host.hpu inside host/) are covered by their parent.
            if name not in modules or len(folder) > len(str(modules[name].parent)):
                modules[name] = path
    return modules


MODULES = _module_files()


def _imports(name: str, path: Path):
    """``(line, imported module, imported names)`` of every import in the module, anywhere."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module, [alias.name for alias in node.names]


def _edges() -> dict[str, set[str]]:
    """Module -> the tandem modules importing it runs.

    ``from package import submodule`` imports the submodule; importing ``a.b.c`` first runs
    the ``__init__`` of ``a`` and ``a.b``, so those count too, except the importer's own
    packages (already running when it is imported).
    """
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        targets = edges.setdefault(name, set())
        own = {name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1)}
        for _, module, names in _imports(name, path):
            if module not in MODULES:
                continue
            subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
            if len(subs) < len(names) or not names:
                targets.add(module)
            targets.update(subs)
            parts = module.split(".")
            targets.update(".".join(parts[:k]) for k in range(1, len(parts)))
        targets -= own | {name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_module_map_covers_the_package():
    for name in ("tandem.cli", "tandem.host.hpu.device", "tandem.hw.hpu.engine", "tandem.sim.tb"):
        assert name in MODULES


def test_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_edges())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "folder", ["tandem", "hw", "sim", "host", "mappings", "benchmarks", "tools"]
)
def test_no_private_names_imported_across_modules(folder):
    offenders = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        name = next((n for n, p in MODULES.items() if p == path), path.stem)
        for line, module, names in _imports(name, path):
            if not module.startswith("tandem"):
                continue
            for imported in names:
                if imported.startswith("_") and not imported.startswith("__"):
                    offenders.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert not offenders, "; ".join(offenders)


@pytest.mark.parametrize("datapath", ["hpu", "sparse_dsp", "spmm", "rnn"])
def test_a_datapath_is_found_by_its_name(datapath):
    # Its host package holds parameters and golden model, device and backends.
    host = ROOT / "host" / datapath
    assert (host / "golden.py").is_file() and (host / "device.py").is_file()
    assert (ROOT / "hw" / datapath).is_dir() and (ROOT / "sim" / datapath).is_dir()
    assert (ROOT / "docs" / f"{datapath}.md").is_file()

"""The benchmark suite: one script per design, run together by ``tandem bench``.

Every script in ``benchmarks/`` prints its figures as a table and, given ``--figures PATH``,
also writes them as JSON in one shape (:class:`Figures`), so that the suite can gather them.
A figure is a number with its unit, measured or modelled; most are ratios measured in one run
(efficiency, utilization, speed-up against a named baseline, error against a float
reference), and a figure with a published reference or a target carries it, so the summary
can show the ratio to it.

``tandem bench`` runs the scripts listed in :data:`BENCHMARKS` one after the other, each in its
own Python process with a time limit, and writes ``bench.json`` (every figure, every script's
status, time and log) and ``bench.md`` (the same as Markdown tables) into the output folder.
``--quick`` gives every script its small arguments; how long the suite takes depends mostly on
whether the simulator builds are cached (under ``~/.cache/tandem/sim``, see
:mod:`tandem.sim.runner`) and on the machine's load, which the results page records.
``bench.json`` is rewritten after every script, so a run stopped part-way keeps what it
measured and names the scripts it did not reach ("not run"). A script that fails or runs out of
time is reported with the last line of its log and does not stop the others; a script whose
inputs are missing (a simulator, the SmolLM2 GGUF file) is reported as skipped with the reason.

Every figure says how it was obtained (:class:`Provenance`: measured in RTL simulation, by
synthesis, on the golden model, as host wall time, ... or modelled, then with the assumptions
the model rests on) and the command that reproduces it. A :class:`Benchmark` names the
provenance of its script's figures, so a script sets it only on figures of another kind.
``tandem bench --results FILE`` also writes the results page (:func:`results_page`): the
commit, machine and tool versions the run had, then one table per design and one for the
system, with every figure's provenance and command; ``--from-json bench.json`` writes it again
from a saved run, byte for byte the same. ``tandem bench --only NAME... --update bench.json``
re-runs some scripts into a saved run: their entries are replaced, the others kept, and the
page then lists each such re-run; every script's entry has its own start time and the machine's
load average at its start and end, since figures timed on a shared machine depend on it.

The scripts live in the source tree, not in the installed package: ``tandem bench`` finds them
next to the package (``<checkout>/benchmarks``) or in ``--benchmarks DIR``.
"""

from .cli import add_arguments as add_arguments
from .cli import run as run
from .figures import (
    BENCHMARK_HELP,
    BENCHMARK_OUT,
    SKIP_EXIT,
    Figure,
    Figures,
    Provenance,
    add_benchmark_options,
    add_figures_option,
    skip,
)
from .page import MAX_CELL as MAX_CELL
from .page import markdown_summary, read_summary, results_page, write_results
from .runner import BENCH_FILES as BENCH_FILES
from .runner import find_benchmarks_dir, run_suite, tool_versions
from .runner import update_summary as update_summary
from .suite import BENCHMARKS, Benchmark

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_HELP",
    "BENCHMARK_OUT",
    "SKIP_EXIT",
    "Benchmark",
    "Figure",
    "Figures",
    "Provenance",
    "add_benchmark_options",
    "add_figures_option",
    "find_benchmarks_dir",
    "markdown_summary",
    "read_summary",
    "results_page",
    "run_suite",
    "skip",
    "tool_versions",
    "write_results",
]

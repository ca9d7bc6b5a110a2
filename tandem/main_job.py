"""``tandem run``: tandem's main job, end to end, on its default model.

1. **Generate** the HPU's Verilog for the model's attention shape (``head_dim`` and
   ``gqa_group`` from the model, every other parameter its default) into ``-o`` (default
   ``build/run``): ``hpu.v`` and ``hpu.manifest.json``, as ``tandem generate hpu`` writes them.
2. **Verify** that Verilog: the cocotb regression of those parameters against the golden model
   in Verilator (``--simulator icarus`` for the other one; ``--quick`` runs the registry's quick
   test only; ``--no-verify`` skips the step). The simulator build is cached: a second run
   reuses it.
3. **Decode** a prompt on SmolLM2-135M with every decode attention on an HPU card (the golden
   model by default, ``--backend rtl`` for the Verilog itself), printing the text, the cards'
   cycles and the figures of ``tandem cosim decode``.

Without the SmolLM2 weights (``tandem setup`` or ``tandem model fetch smollm2-135m`` brings
them) it says so on one line and runs on the small random model instead. Progress goes to
stderr, results to stdout (``--json``: one JSON object with the files, the verification and the
decode's figures).
"""

import argparse
import contextlib
import io
import json
import sys

from .errors import UserError, VerificationError
from .progress import stderr_progress

__all__ = ["add_arguments", "run"]

#: The model the main job runs on, and its fallback when the weights are absent.
DEFAULT_MODEL = "smollm2-135m"
FALLBACK_MODEL = "tiny"
DEFAULT_PROMPT = "What is the capital of France?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tandem run``."""
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt to decode")
    parser.add_argument("--tokens", type=int, default=32, help="tokens to generate (default 32)")
    parser.add_argument(
        "--backend",
        choices=("golden", "rtl"),
        default="golden",
        help="the decode's HPU: golden model (default) or the generated Verilog itself",
    )
    parser.add_argument(
        "--simulator",
        choices=("verilator", "icarus"),
        default="verilator",
        help="HDL simulator of the verification (and of --backend rtl); default verilator",
    )
    parser.add_argument("-o", "--output", default="build/run", help="folder (default build/run)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the outcome as JSON (the files, the verification, the decode's figures)",
    )
    checks = parser.add_mutually_exclusive_group()
    checks.add_argument("--quick", action="store_true", help="verify with the quick test only")
    checks.add_argument("--no-verify", action="store_true", help="skip the verification")


class _Steps:
    """Numbered steps on stderr through :func:`~tandem.progress.stderr_progress`."""

    def __init__(self, steps: int):
        self.steps, self.step, self.say = steps, 0, stderr_progress("run")

    def begin(self, what: str) -> None:
        self.step += 1
        self.say(f"[{self.step}/{self.steps}] {what} ...")

    def done(self, what: str) -> None:
        self.say(f"[{self.step}/{self.steps}] {what}")


def _model_name() -> str:
    """The default model, or the fallback with one line on stderr when its weights are absent."""
    from tandem.host.system.model import find_model

    if find_model(DEFAULT_MODEL) is not None:
        return DEFAULT_MODEL
    print(
        f"tandem run: the {DEFAULT_MODEL} weights are not here (run `tandem setup` or "
        f"`tandem model fetch {DEFAULT_MODEL}`); running on the small random model "
        f"'{FALLBACK_MODEL}' instead",
        file=sys.stderr,
    )
    return FALLBACK_MODEL


def run(args) -> int:
    """``tandem run``: generate, verify and decode (see the module docstring)."""
    from tandem.args import integer, output_dir
    from tandem.extras import require

    integer(args.tokens, "--tokens", 1, 4096)
    if not args.prompt.strip():
        raise UserError("--prompt must hold some text, not an empty string")
    if args.no_verify and args.backend != "rtl" and args.simulator != "verilator":
        raise UserError(
            f"--simulator {args.simulator} runs nothing with --no-verify and the golden backend"
        )
    args.output = output_dir(args.output, "--output")
    require("tandem run", "model")  # torch and gguf, before any work

    from tandem.generate import generate, write_files
    from tandem.host.hpu import HpuParams
    from tandem.host.system import decode, decode_cli
    from tandem.registry import get_design
    from tandem.sim.runner import run_regression

    design = get_design("hpu")
    model = _model_name()
    progress = _Steps(2 if args.no_verify else 3)

    progress.begin(f"generating the HPU Verilog for {model}'s attention")
    config = decode.load_model_weights(model)[0].config
    try:
        params = HpuParams.for_model(config)
    except ValueError as exc:
        raise UserError(f"the HPU cannot serve {model}: {exc}") from None
    written = write_files(args.output, generate(design, params).files())
    progress.done(f"wrote {', '.join(str(p) for p in written)}")
    say = (lambda line: None) if args.json else print
    outcome = {
        "model": model,
        "generated": {"files": [str(p) for p in written], "params": params.to_dict()},
        "verified": None,
    }
    say(
        f"generated: {written[0]} (hpu, head_dim {params.head_dim}, gqa_group "
        f"{params.gqa_group}, max_seq_len {params.max_seq_len})"
    )

    if not args.no_verify:
        which = f"quick test {design.quick_test}" if args.quick else "regression"
        progress.begin(
            f"verifying it against the golden model: cocotb {which} in {args.simulator} "
            "(the first build of a simulator takes minutes; later runs reuse it)"
        )
        result = run_regression(
            design,
            params,
            simulator=args.simulator,
            seed=0,
            run_dir=args.output / f"sim-{args.simulator}",
            testcase=design.quick_test if args.quick else None,
            progress=progress.say,
        )
        progress.done(f"{len(result.tests)} test(s) ran")
        say(f"verified: {result.summary()}")
        outcome["verified"] = result.to_dict()
        if not result.tests:
            raise VerificationError(f"hpu: no test ran on {args.simulator}; see {result.log_file}")
        if not result.passed:
            raise VerificationError(f"hpu: regression failed on {args.simulator} (seed 0)")

    progress.begin(f"decoding on {model}, every attention on the HPU ({args.backend})")
    parser = argparse.ArgumentParser(prog="tandem run")
    decode_cli.add_arguments(parser)
    decode_args = parser.parse_args(
        [
            "--model",
            model,
            "--prompt",
            args.prompt,
            "--tokens",
            str(args.tokens),
            "--backend",
            args.backend,
            "--simulator",
            args.simulator,
            *(["--json"] if args.json else []),
        ]
    )
    if not args.json:
        status = decode_cli.run(decode_args)
        progress.done("decoded")
        return status
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = decode_cli.run(decode_args)
    progress.done("decoded")
    outcome["decoded"] = json.loads(text.getvalue())
    print(json.dumps(outcome, indent=2))
    return status

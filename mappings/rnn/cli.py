"""``tandem map rnn``: tile program, dispatch schedule and predicted utilization of an LSTM.

Prints the chosen tile shape and why, the predicted cycles per step and MAC utilization of the
overlapped schedule and of the naive one (every step waits for all of h), or with ``--json``
the schedule's summary and the files written as JSON, and writes into ``-o DIR`` (default
``build/map/rnn``): ``<name>.schedule.yaml``, ``<name>.program.npz`` and
``<name>.utilization.png`` (utilization against hidden size at the same input size, array and
batch).
"""

import argparse
import re
import warnings

from tandem.errors import UserError

__all__ = ["add_arguments", "run"]

SWEEP = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
#: Above this many Mbit of weights the suggested engine streams them (weight_source=stream).
ON_CHIP_MBIT = 4.0


def _array(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLS such as 64x64, not {text!r}")
    return int(match[1]), int(match[2])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tandem map rnn``."""
    from tandem.args import add_output

    parser.add_argument(
        "--cell", choices=("lstm", "gru"), default="lstm", help="recurrent cell (default lstm)"
    )
    parser.add_argument("--input", type=int, metavar="X", help="input size X")
    parser.add_argument("--hidden", type=int, metavar="H", help="hidden size H")
    parser.add_argument(
        "--array",
        type=_array,
        default=(64, 64),
        metavar="RxC",
        help="MAC array, rows x columns (default 64x64)",
    )
    parser.add_argument("--batch", type=int, default=1, help="sequences side by side (default 1)")
    parser.add_argument(
        "--steps",
        type=int,
        default=100,
        help="sequence length for the whole-sequence figures (default 100)",
    )
    parser.add_argument(
        "--state-dict",
        metavar="FILE",
        help="torch.nn.LSTM or nn.LSTMCell state_dict (nn.GRU / nn.GRUCell with --cell gru; "
        "torch.save) to pack into the npz",
    )
    parser.add_argument(
        "--weight-bits",
        type=int,
        choices=(8, 16),
        default=16,
        help="weight width used to pack --state-dict (default 16)",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the utilization plot")
    add_output(parser, "build/map/rnn")
    parser.add_argument(
        "--json", action="store_true", help="print the schedule and the files written as JSON"
    )


def _load_state_dict(path: str):
    import torch

    try:
        with warnings.catch_warnings():  # torch warns about odd pickles it then refuses
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as exc:  # torch raises many kinds for a bad file
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = lines[0] if lines else type(exc).__name__
        raise UserError(f"{path}: cannot read a torch state_dict: {why}") from None
    if hasattr(obj, "state_dict"):
        obj = obj.state_dict()
    if isinstance(obj, dict) and "weight_ih_l0" not in obj and "weight_ih" in obj:
        # nn.LSTMCell / nn.GRUCell: one layer, its keys without the _l0 of nn.LSTM / nn.GRU
        cell_keys = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        obj = {f"{k}_l0" if k in cell_keys else k: v for k, v in obj.items()}
    if not isinstance(obj, dict) or "weight_ih_l0" not in obj:
        raise UserError(
            f"{path}: not an nn.LSTM, nn.GRU, nn.LSTMCell or nn.GRUCell state_dict "
            "(no 'weight_ih_l0' or 'weight_ih')"
        )
    _check_weights(path, obj)
    return obj


def _check_weights(path: str, state_dict: dict) -> None:
    """Layer 0 of an LSTM/GRU state_dict, checked: 2-D weights [gates * H, X] and
    [gates * H, H] of real, finite numbers, H and X at least 1, 3 or 4 gates, and biases (when
    present) of gates * H."""
    import numpy as np
    import torch

    arrays = {}
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        if name not in state_dict:
            if name.startswith("weight"):
                raise UserError(f"{path}: not an nn.LSTM or nn.GRU state_dict (no {name!r})")
            continue
        value = state_dict[name]
        if not isinstance(value, torch.Tensor) or value.is_complex() or value.dtype == torch.bool:
            kind = getattr(value, "dtype", type(value).__name__)
            raise UserError(f"{path}: {name} must be a tensor of real numbers, not {kind}")
        if value.ndim != (2 if name.startswith("weight") else 1) or 0 in value.shape:
            raise UserError(f"{path}: {name} has shape {tuple(value.shape)}")
        arrays[name] = value
        if not bool(torch.isfinite(value.double()).all()):
            raise UserError(f"{path}: {name} holds NaN or infinity")
    rows, hidden = arrays["weight_hh_l0"].shape
    if rows % hidden or rows // hidden not in (3, 4) or arrays["weight_ih_l0"].shape[0] != rows:
        shapes = [tuple(arrays[n].shape) for n in ("weight_ih_l0", "weight_hh_l0")]
        raise UserError(
            f"{path}: weight shapes {shapes[0]}, {shapes[1]} are not those of an LSTM "
            "[4H, X], [4H, H] or a GRU [3H, X], [3H, H]"
        )
    for name in ("bias_ih_l0", "bias_hh_l0"):
        if name in arrays and np.prod(arrays[name].shape) != rows:
            raise UserError(f"{path}: {name} has shape {tuple(arrays[name].shape)}, not ({rows},)")


def utilization_figure(input_size, array, batch, steps, marker=None, cell="lstm"):
    """Utilization against hidden size (overlapped with the chosen shape, the array's own shape
    without reconfiguration, and naive), as a matplotlib Figure.

    The utilization axis is a logit scale: the chosen shape's 0.9996 and the naive schedule's
    0.975 (the figures ``tandem map rnn`` prints) would both sit at the top of a 0..1 axis.
    """
    from tandem.plots import fraction_axis, log2_axis, subplots

    from .schedule import choose_shape, predict
    from .tiling import build_program

    chosen, fixed, naive = [], [], []
    for h in SWEEP:
        x = input_size if input_size else h
        choice = choose_shape(x, h, array[0], array[1], batch, steps, cell)
        chosen.append(choice.prediction.utilization)
        naive.append(choice.naive.utilization)
        if array[0] % 4 == 0 and array[0] <= 256 and array[1] <= 256:
            fixed.append(
                predict(
                    build_program(x, h, array[0], array[1], cell=cell), batch, steps
                ).utilization
            )
    fig, ax = subplots(figsize=(6.4, 4.4))
    # The chosen shape is the figure's subject: drawn last, on top, thick and solid, and first
    # in the legend. The fixed tile's hollow squares are wider than the chosen shape's dots, so
    # they show where the two are the same.
    others = []
    if fixed:
        others += ax.plot(
            SWEEP,
            fixed,
            "s--",
            color="tab:orange",
            markersize=9,
            markerfacecolor="none",
            markeredgewidth=1.4,
            label=f"overlapped, fixed {array[0]}x{array[1]} tile",
        )
    others += ax.plot(
        SWEEP,
        naive,
        "^:",
        color="tab:green",
        markersize=5,
        label="naive (waits for all of h), chosen shape",
    )
    main = ax.plot(
        SWEEP,
        chosen,
        "o-",
        color="tab:blue",
        linewidth=2.4,
        markersize=6,
        zorder=4,
        label="overlapped, tile shape chosen per H",
    )
    if marker is not None:
        others += ax.plot(
            [marker[0]], [marker[1]], "k*", markersize=13, zorder=5, label="this model"
        )
    log2_axis(ax, SWEEP)
    fraction_axis(ax, [*chosen, *fixed, *naive] + ([marker[1]] if marker else []))
    ax.set_xlabel("hidden size H (units)")
    ax.set_ylabel(f"MAC utilization over {steps} steps\n(fraction of MAC-cycles, logit scale)")
    xdesc = f"X = {input_size}" if input_size else "X = H"
    ax.set_title(
        f"{cell.upper()} on a {array[0]}x{array[1]} MAC array, {xdesc}, batch {batch}",
        fontsize=11,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(handles=main + others, loc="lower right", fontsize=8)
    return fig


def plot_utilization(path, input_size, array, batch, steps, marker=None, cell="lstm") -> None:
    """:func:`utilization_figure` as a reproducible PNG at ``path``."""
    from tandem.plots import save_png

    save_png(utilization_figure(input_size, array, batch, steps, marker, cell), path)


def run(args) -> int:
    """Choose the tile shape, build the program, write the schedule; print its figures."""
    import json

    from tandem.host.rnn.golden import RnnParams, pack_tiles, quantize_lstm

    from tandem.args import default_output, output_dir
    from tandem.generate import staged_output

    from .schedule import candidate_shapes, choose_shape
    from .tiling import build_program
    from .writer import program_arrays, summary, write_schedule

    out = default_output("map", "rnn") if args.output is None else args.output
    out = output_dir(out, "--output")  # before the state_dict is read
    state_dict = _load_state_dict(args.state_dict) if args.state_dict else None
    x, h = args.input, args.hidden
    if state_dict is not None:
        sd_h = int(state_dict["weight_hh_l0"].shape[1])
        gates = int(state_dict["weight_hh_l0"].shape[0]) // sd_h
        if gates != (3 if args.cell == "gru" else 4):
            raise UserError(
                f"{args.state_dict}: a {'GRU' if gates == 3 else 'LSTM'} state_dict; "
                f"use --cell {'gru' if gates == 3 else 'lstm'}"
            )
        sd_x = int(state_dict["weight_ih_l0"].shape[1])
        if (x is not None and x != sd_x) or (h is not None and h != sd_h):
            raise UserError(
                f"--input/--hidden ({x}, {h}) disagree with the state_dict (X={sd_x}, H={sd_h})"
            )
        x, h = sd_x, sd_h
    if x is None or h is None:
        raise UserError("--input and --hidden are required (or give --state-dict)")
    for name, value, top in (("--input", x, 4096), ("--hidden", h, 4096)):
        if not 1 <= value <= top:
            raise UserError(f"{name} must be between 1 and {top}, not {value}")
    if not 1 <= args.batch <= 16:
        raise UserError(f"--batch must be between 1 and 16, not {args.batch}")
    if not 1 <= args.steps <= 65535:
        raise UserError(f"--steps must be between 1 and 65535, not {args.steps}")
    rows, cols = args.array
    if not candidate_shapes(rows, cols):
        raise UserError(
            f"--array {rows}x{cols}: no tile shape of {rows * cols} MACs has a "
            "power-of-two row count that is a multiple of 4 (at most 256x256)"
        )

    choice = choose_shape(x, h, rows, cols, args.batch, args.steps, args.cell)
    program = build_program(x, h, choice.tile_rows, choice.tile_cols, cell=args.cell)
    arrays = program_arrays(program)
    extra = {}
    if state_dict is not None:
        params = RnnParams(
            cell=args.cell,
            tile_rows=choice.tile_rows,
            tile_cols=choice.tile_cols,
            batch=args.batch,
            max_input=x,
            max_hidden=h,
            weight_bits=args.weight_bits,
        )
        try:
            model = quantize_lstm(params, state_dict)
        except ValueError as exc:
            raise UserError(f"{args.state_dict}: {exc}") from None
        tiles, biases = pack_tiles(params, model, program)
        arrays.update(tiles=tiles, biases=biases, w_frac=__import__("numpy").array(model.w_frac))
        extra["weights"] = {"bits": args.weight_bits, "w_frac": model.w_frac}
    name = f"{args.cell}_x{x}_h{h}"
    outputs = [f"{name}.schedule.yaml", f"{name}.program.npz"]
    if not args.no_plot:
        outputs.append(f"{name}.utilization.png")
    data = summary(
        choice, program, array=(rows, cols), batch=args.batch, cell=args.cell, extra=extra
    )
    with staged_output(out, outputs, "--output") as staging:
        write_schedule(staging, name, data, arrays)
        if not args.no_plot:
            plot_utilization(
                staging / outputs[2],
                x,
                (rows, cols),
                args.batch,
                args.steps,
                marker=(h, choice.prediction.utilization),
                cell=args.cell,
            )
    paths = [out / o for o in outputs]
    if args.json:
        files = [str(path) for path in paths]
        print(json.dumps({**data, "output": str(out), "files": files}, indent=2))
        return 0
    p, n = choice.prediction, choice.naive
    print(f"{args.cell.upper()} X={x} H={h} batch {args.batch} on a {rows}x{cols} MAC array")
    print(f"tile {choice.tile_rows}x{choice.tile_cols}: {choice.reason}")
    print(f"{'schedule':<12}{'cycles/step':>12}{'stall/step':>12}{'cycles':>12}{'MAC util':>10}")
    for label, q in (("overlapped", p), ("naive", n)):
        print(
            f"{label:<12}{q.cycles_per_step:>12}{q.stall_per_step:>12}{q.cycles:>12}"
            f"{q.utilization:>10.4f}"
        )
    print(f"speed-up over naive: {n.cycles / p.cycles:.3f}x over {args.steps} steps")
    weight_mbit = program.entries * program.array_macs * args.weight_bits / 2**20
    # Amaranth elaborates a memory's contents bit by bit: keep big weight sets off chip.
    stream = " --set weight_source=stream" if weight_mbit > ON_CHIP_MBIT else ""
    print(
        f"generate with: --set tile_rows={choice.tile_rows} --set tile_cols={choice.tile_cols}"
        f" --set batch={args.batch} --set max_input={x} --set max_hidden={h}"
        f" --set weight_bits={args.weight_bits}{stream}"
        f"  ({weight_mbit:.1f} Mbit of weights)"
    )
    for path in paths:
        print(path)
    return 0

"""The HPU paper's claims (Rhee et al., arXiv 2504.16112) and the model's figures next to them."""

#: The HPU paper's claims (Rhee et al., arXiv 2504.16112) for Llama-2-7B, 1K in / 1K out,
#: 4 HPUs beside an L40S; printed next to the model's figures, never used by it.
PAPER = {
    "model": "llama-2-7b",
    "gpu": "l40s",
    "hpus": 4,
    "hpu_board": "u55c",
    "input": 1024,
    "output": 1024,
    "speedup": 4.1,
    "tokens_per_s_per_w_ratio": 4.6,
}


def paper_comparison(rows: list[dict]) -> dict:
    """The model's speed-up and tokens/s/W ratio next to the HPU paper's claims.

    ``speedup`` = best GPU+HPU tokens/s over the best GPU-alone tokens/s among the batches
    that fit (the paper compares against the GPU at its largest batch that does not run out of
    memory); ``tokens_per_s_per_w_ratio`` likewise for tokens/s/W.
    """
    gpu = [r for r in rows if r["system"] == "gpu" and not r["oom"]]
    hpu = [r for r in rows if r["system"] == "gpu+hpu" and not r["oom"]]
    if not gpu or not hpu:
        return {}
    best_gpu = max(gpu, key=lambda r: r["tokens_per_s"])
    best_hpu = max(hpu, key=lambda r: r["tokens_per_s"])
    out = {
        "gpu_best_batch": best_gpu["batch"],
        "gpu_oom_batches": [r["batch"] for r in rows if r["system"] == "gpu" and r["oom"]],
        "hpu_best_batch": best_hpu["batch"],
        "speedup": best_hpu["tokens_per_s"] / best_gpu["tokens_per_s"],
        "paper_speedup": PAPER["speedup"],
        "engines_fit": best_hpu["hpu"]["resources"].get("fits"),
    }
    if best_hpu["tokens_per_s_per_w"] and best_gpu["tokens_per_s_per_w"]:
        eff_gpu = max(r["tokens_per_s_per_w"] for r in gpu)
        eff_hpu = max(r["tokens_per_s_per_w"] for r in hpu)
        out["tokens_per_s_per_w_ratio"] = eff_hpu / eff_gpu
        out["paper_tokens_per_s_per_w_ratio"] = PAPER["tokens_per_s_per_w_ratio"]
    return out

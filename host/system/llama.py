"""The model side of the decode runtime: SmolLM2-style Llama in torch (embeddings, projections,
RoPE, the MLP and the LM head on the GPU, CUDA when present), whose decode attention the caller
supplies (:mod:`tandem.host.system.decode` runs it on HPU cards; :mod:`tandem.host.system.gemma`
builds Gemma 3 on it)."""

from tandem.host.system.model import LlamaConfig

from tandem.errors import UserError

__all__ = ["Llama", "default_device", "import_torch"]


def import_torch():
    """torch, or a :class:`~tandem.errors.UserError` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise UserError("the decode runtime needs torch: pip install torch") from None
    return torch


def default_device():
    """``cuda`` when a GPU is visible to torch, else ``cpu``."""
    torch = import_torch()
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# --- the GPU side --------------------------------------------------------------------------
class Llama:
    """Llama-architecture decoder in torch: everything but decode attention.

    Parameters
    ----------
    config
        Shapes (:class:`~tandem.host.system.model.LlamaConfig`).
    weights
        llama.cpp tensor names to float32 tensors ``[out, in]`` (:func:`load_gguf`,
        :func:`random_llama`); ``output.weight`` absent means tied embeddings.
    device
        torch device (default: :func:`default_device`).
    dtype
        torch dtype of the weights and activations (default float32, what the HPU backends
        take; bfloat16 or float16 serve timing the GPU side at a GPU's own precision).
    """

    def __init__(self, config: LlamaConfig, weights: dict, device=None, dtype=None):
        torch = import_torch()
        self.config = config
        self.device = default_device() if device is None else torch.device(device)
        self.dtype = torch.float32 if dtype is None else dtype
        self.w = {name: t.to(self.device, self.dtype) for name, t in weights.items()}
        self.head = self.w.get("output.weight", self.w["token_embd.weight"])
        d = config.head_dim
        self._inv_freq = config.rope_theta ** (
            -torch.arange(0, d, 2, dtype=torch.float64, device=self.device) / d
        )

    def sync(self) -> None:
        """Wait for the GPU (for honest wall-clock timing of its work)."""
        if self.device.type == "cuda":
            import_torch().cuda.synchronize(self.device)

    def _rmsnorm(self, x, weight):
        torch = import_torch()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.eps) * weight

    def _rope(self, x, positions, inv_freq=None):
        """Rotate-half RoPE of ``x`` [N, heads, d] at ``positions`` [N] (frequencies
        ``inv_freq``, default the model's)."""
        torch = import_torch()
        d = self.config.head_dim
        inv_freq = self._inv_freq if inv_freq is None else inv_freq
        angle = torch.outer(positions.to(torch.float64), inv_freq).repeat(1, 2)
        cos, sin = angle.cos().to(x.dtype)[:, None], angle.sin().to(x.dtype)[:, None]
        rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
        return x * cos + rotated * sin

    def embed(self, ids):
        """Token embeddings [N, dim] of ``ids`` [N]."""
        torch = import_torch()
        return self.w["token_embd.weight"][torch.as_tensor(ids, device=self.device)]

    def _qkv(self, layer: int, x):
        """RMSNorm and the q/k/v projections: ``q`` [N, Hq, d], ``k``, ``v`` [N, Hkv, d]."""
        c, p = self.config, f"blk.{layer}."
        n = x.shape[0]
        h = self._rmsnorm(x, self.w[p + "attn_norm.weight"])
        q = (h @ self.w[p + "attn_q.weight"].T).view(n, c.n_heads, c.head_dim)
        k = (h @ self.w[p + "attn_k.weight"].T).view(n, c.n_kv_heads, c.head_dim)
        v = (h @ self.w[p + "attn_v.weight"].T).view(n, c.n_kv_heads, c.head_dim)
        return q, k, v

    def attn_in(self, layer: int, x, positions):
        """RMSNorm, q/k/v projections and RoPE: ``q`` [N, Hq, d], ``k``, ``v`` [N, Hkv, d]."""
        q, k, v = self._qkv(layer, x)
        return self._rope(q, positions), self._rope(k, positions), v

    def attn_out(self, layer: int, x, o):
        """Output projection of attention ``o`` [N, Hq, d], residual, then the SwiGLU MLP."""
        torch = import_torch()
        p = f"blk.{layer}."
        x = x + o.reshape(x.shape[0], -1) @ self.w[p + "attn_output.weight"].T
        h = self._rmsnorm(x, self.w[p + "ffn_norm.weight"])
        gate, up = h @ self.w[p + "ffn_gate.weight"].T, h @ self.w[p + "ffn_up.weight"].T
        return x + (torch.nn.functional.silu(gate) * up) @ self.w[p + "ffn_down.weight"].T

    def logits(self, x):
        """LM head: final RMSNorm, then the (tied) output matrix: [N, vocab]."""
        return self._rmsnorm(x, self.w["output_norm.weight"]) @ self.head.T

    def prefill(self, ids):
        """Causal forward pass of one prompt with torch attention (a layer with a sliding
        window, ``config.attention_window``, sees only that many positions).

        Returns ``(logits of the last position [vocab], keys, values)``; ``keys[layer]`` and
        ``values[layer]`` are [n_kv_heads, T, head_dim] (keys after RoPE).
        """
        torch = import_torch()
        c = self.config
        x = self.embed(ids)
        positions = torch.arange(len(ids), device=self.device)
        behind = positions[:, None] - positions[None, :]  # query minus key position
        keys, values = [], []
        for layer in range(c.n_layers):
            q, k, v = self.attn_in(layer, x, positions)
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
            keys.append(k)
            values.append(v)
            g = c.gqa_group
            window = c.attention_window(layer)
            mask = None if window is None else (behind >= 0) & (behind < window)
            o = torch.nn.functional.scaled_dot_product_attention(
                q,
                k.repeat_interleave(g, 0),
                v.repeat_interleave(g, 0),
                attn_mask=mask,
                is_causal=mask is None,
            )
            x = self.attn_out(layer, x, o.transpose(0, 1))
        return self.logits(x[-1:])[0], keys, values


# --- attention backends --------------------------------------------------------------------

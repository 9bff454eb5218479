"""Tiny randomly initialised causal LMs for the kvstore tests (same classes as the real models)."""

from __future__ import annotations

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from kvstore.attention import MINUTIA_ATTENTION, register_minutia_attention

ARCHS = ("llama", "qwen2", "gemma3")
VOCAB = 1000


def tiny_model(arch: str, seed: int = 0, attn: str = "sdpa", sharpen: float = 1.0) -> torch.nn.Module:
    """hidden 64, 2-4 layers, GQA; Gemma 3 mixes sliding (window 16) and full-attention layers.

    ``sharpen`` scales the query/key projections so that attention is peaked rather than nearly
    uniform (random init), which makes compression quality checks meaningful.
    """
    torch.manual_seed(seed)
    common = dict(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=4096,
    )
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, **common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=2, **common))
    elif arch == "gemma3":
        config = Gemma3TextConfig(
            num_hidden_layers=4,
            head_dim=16,
            sliding_window=16,
            layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
            **{**common, "num_key_value_heads": 1},
        )
        model = Gemma3ForCausalLM(config)
    else:
        raise ValueError(arch)
    if sharpen != 1.0:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(sharpen)
                layer.self_attn.k_proj.weight.mul_(sharpen)
    model.eval()
    if attn == MINUTIA_ATTENTION:
        register_minutia_attention()
    model.set_attn_implementation(attn)
    return model


def token_ids(length: int, seed: int = 1, batch: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=gen)


def feed(model: torch.nn.Module, cache, ids: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """Run ``ids`` through the model into ``cache`` (in chunks if asked); returns the last logits."""
    chunk = chunk or ids.shape[1]
    logits = None
    with torch.no_grad():
        for start in range(0, ids.shape[1], chunk):
            logits = model(ids[:, start : start + chunk], past_key_values=cache, use_cache=True).logits
    return logits

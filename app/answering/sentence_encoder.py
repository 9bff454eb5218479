"""Loading and running a sentence encoder (all-MiniLM-L6-v2 and its adaptations): one place for the mean pooling
that the retrieval embedder (app/answering/retrieval.py), the meeting ranker (app/answering/rerank.py) and the ranker's training share."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

MAX_TOKENS = 128


def load_encoder(base: str | Path, adapter: str | Path | None = None, *, model_class=None, trainable: bool = False,
                 **model_kwargs):
    """(tokenizer, model) from a local folder; a LoRA adapter loaded when given (merged in, unless it is to train on).
    ``model_class`` puts a head on the encoder (the cross-ranker's logit, the span reader's start/end); the default
    is the bare encoder. The model is in eval mode unless ``trainable``."""
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = (model_class or AutoModel).from_pretrained(str(base), **model_kwargs)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=trainable)
        if not trainable:
            model = model.merge_and_unload()
    return tokenizer, (model.train() if trainable else model.eval())


def encode(tokenizer, model, texts: Sequence[str]):
    """Mean-pooled, L2-normalised vectors (a torch tensor; gradients flow when the model trains)."""
    import torch

    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled, dim=-1)

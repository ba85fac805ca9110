"""Small random-init Hugging Face models for the torch.export route: one factory per architecture.

Each factory returns ``(model, example_inputs, dynamic_shapes)``: ``model`` in eval mode,
``example_inputs`` a dict of keyword tensors (int64 token ids, an attention mask with
padding), ``dynamic_shapes`` naming a symbolic batch and sequence length (or image batch).
The configs are tiny (2 layers, hidden 32) so CI stays fast; the architecture, with every
op a full-size model uses, is the real one from ``transformers``. No weights are downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tests.torchvision_compat import import_torchvision

BATCH = torch.export.Dim("batch", min=1, max=8)
SEQ = torch.export.Dim("seq", min=2, max=64)
VOCAB = 99
HIDDEN = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)

Factory = Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor], dict[str, Any]]]


def _transformers():
    import_torchvision()  # transformers imports torchvision when it is installed
    import transformers

    transformers.logging.set_verbosity_error()
    return transformers


def token_inputs(batch: int = 2, seq: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    """int64 ids and an attention mask whose second row is padded."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        mask[1, seq // 2 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


TOKEN_DIMS = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ}}


def _eval(model: torch.nn.Module) -> torch.nn.Module:
    return model.eval()  # dropout off: the bundle is an inference program


def bert():
    t = _transformers()
    torch.manual_seed(0)
    config = t.BertConfig(vocab_size=VOCAB, max_position_embeddings=64, **HIDDEN)
    return _eval(t.BertModel(config)), token_inputs(), TOKEN_DIMS


def roberta():
    t = _transformers()
    torch.manual_seed(0)
    config = t.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=68, pad_token_id=1, **HIDDEN)
    return _eval(t.RobertaModel(config)), token_inputs(), TOKEN_DIMS


def distilbert():
    t = _transformers()
    torch.manual_seed(0)
    config = t.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64
    )
    return _eval(t.DistilBertModel(config)), token_inputs(), TOKEN_DIMS


def gpt2():
    t = _transformers()
    torch.manual_seed(0)
    config = t.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, use_cache=False)
    return _eval(t.GPT2Model(config)), token_inputs(), TOKEN_DIMS


def llama():
    t = _transformers()
    torch.manual_seed(0)
    config = t.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
    )  # fmt: skip
    return _eval(t.LlamaModel(config)), token_inputs(), TOKEN_DIMS


def t5_encoder():
    t = _transformers()
    torch.manual_seed(0)
    config = t.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, use_cache=False,
        relative_attention_num_buckets=8, relative_attention_max_distance=16,
    )  # fmt: skip
    return _eval(t.T5EncoderModel(config)), token_inputs(), TOKEN_DIMS


def whisper_encoder():
    t = _transformers()
    torch.manual_seed(0)
    config = t.WhisperConfig(
        num_mel_bins=16, d_model=32, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=64,
        max_source_positions=32, decoder_layers=1, decoder_attention_heads=4, vocab_size=VOCAB, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )  # fmt: skip
    model = t.WhisperModel(config).get_encoder()
    features = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))  # 2 * max_source_positions frames
    return _eval(model), {"input_features": features}, {"input_features": {0: BATCH}}


def vit():
    t = _transformers()
    torch.manual_seed(0)
    config = t.ViTConfig(image_size=32, patch_size=8, num_channels=3, **HIDDEN)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return _eval(t.ViTModel(config, add_pooling_layer=True)), {"pixel_values": pixels}, {"pixel_values": {0: BATCH}}


def clip_vision():
    t = _transformers()
    torch.manual_seed(0)
    config = t.CLIPVisionConfig(image_size=32, patch_size=8, **HIDDEN)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return _eval(t.CLIPVisionModel(config)), {"pixel_values": pixels}, {"pixel_values": {0: BATCH}}


FACTORIES: dict[str, Factory] = {
    "bert": bert,
    "roberta": roberta,
    "distilbert": distilbert,
    "gpt2": gpt2,
    "llama": llama,
    "t5_encoder": t5_encoder,
    "whisper_encoder": whisper_encoder,
    "vit": vit,
    "clip_vision": clip_vision,
}


def resized(example: dict[str, torch.Tensor], dynamic_shapes: dict[str, Any], batch: int, seq: int, seed: int = 1):
    """Inputs like ``example`` with the dims named batch and seq set: new ids, a padded mask, new features."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, tensor in example.items():
        sizes = {BATCH.__name__: batch, SEQ.__name__: seq}
        shape = [
            sizes.get(getattr(dynamic_shapes[name].get(i), "__name__", None), n) for i, n in enumerate(tensor.shape)
        ]
        if name == "attention_mask":
            out[name] = token_inputs(batch, shape[1], seed)[name]
        elif tensor.dtype == torch.int64:
            out[name] = torch.randint(1, VOCAB, shape, generator=g)
        else:
            out[name] = torch.randn(*shape, generator=g)
    return out


def reference_outputs(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The model's outputs in the order torch.export flattens them (the non-None fields of its ModelOutput)."""
    with torch.no_grad():
        result = model(**inputs)
    return list(result.to_tuple()) if hasattr(result, "to_tuple") else [result]

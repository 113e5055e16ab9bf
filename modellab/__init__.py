"""The real-model lab: SmolLM2-135M-Instruct, our own decode loop, pluggable caches.

    from modellab import Llama, load_model
    model = Llama()                                  # loads once (see modellab.load)
    cache = model.new_cache()                        # dense fp32 KV cache
    logits = model.forward(input_ids, cache)         # (B, T, vocab)
"""

from modellab.attention import dense_attention
from modellab.caches import DenseCache, ModelCache, PagedLayerView, PagedPool, TokenQuantizedCache, WindowCache
from modellab.decode import Llama
from modellab.load import ModelConfig, ModelNotInstalled, is_installed, load_model, model_config
from modellab.perplexity import perplexity
from modellab.text import long_text, long_text_ids

__all__ = [
    "DenseCache", "Llama", "ModelCache", "ModelConfig", "ModelNotInstalled", "PagedLayerView", "PagedPool",
    "TokenQuantizedCache", "WindowCache", "dense_attention", "is_installed", "load_model", "long_text",
    "long_text_ids", "model_config", "perplexity",
]

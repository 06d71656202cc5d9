"""How a Hugging Face family's modules compute, beyond what :class:`ModelConfig` sizes describe.

The eager-PyTorch memory terms (:mod:`frenzy_core.memory.activations`) follow the tensors the Transformers 5
modules save for backward. Families that share a module lineage save the same tensors for the same model fields;
the :class:`ModuleLayout` names the lineage and says, as properties, what differs between lineages. Everything a
:class:`ModelConfig` field already states (fused projections, where norms sit, sliding windows, soft-capping, latent
attention, partial rotary) is read from the model, not from here.

Masks are common to every lineage (``transformers/masking_utils.py``): eager attention gets a materialised
``batch x 1 x q x kv`` mask in the model dtype (0 or the dtype's minimum); SDPA gets none (``is_causal``) when there is
no padding and no sliding window shorter than the sequence, and a boolean ``batch x 1 x q x kv`` mask otherwise;
BERT builds a bidirectional mask (none for SDPA without padding).
"""

from __future__ import annotations

import enum

__all__ = ["ModuleLayout"]


class ModuleLayout(str, enum.Enum):
    """The module lineage of a Hugging Face family (``transformers/models/<family>/modeling_<family>.py``)."""

    LLAMA = "llama"
    """``LlamaAttention`` lineage: ``eager_attention_forward`` upcasts scores to fp32 for the softmax and casts the
    probabilities back; RMSNorm casts to the input dtype before the weight multiply (``w * x.to(dtype)``); the loss
    upcasts the logits to fp32. Llama, Mistral, Mixtral, Qwen2/3 and their MoEs, Phi-3, GPT-NeoX, OPT, StableLM,
    Phi-2, Starcoder2, DeepSeek-V2/V3."""
    GEMMA = "gemma"
    """Llama lineage, but RMSNorm multiplies in fp32 (``x * (1 + w)``) before the downcast and the embeddings are
    scaled by sqrt(hidden). Gemma, Gemma 2, Gemma 3."""
    OLMO2 = "olmo2"
    """Llama lineage, but RMSNorm multiplies in fp32 (``(w * x).to(dtype)``) before the downcast. OLMo 2."""
    GPT2 = "gpt2"
    """GPT-2: one ``Conv1D`` c_attn whose output is split (views saved), the eager softmax in the scores' dtype,
    ``gelu_new`` built from Python ops."""
    BERT = "bert"
    """BERT encoder: separate q/k/v, norms after the residual add (post-LN), the eager softmax in the scores' dtype,
    the masked-LM loss on the logits as they are (no fp32 upcast)."""
    FALCON = "falcon"
    """Falcon's own attention (no ``eager_attention_forward``): one fused query_key_value split into views, the
    eager softmax of ``scores + mask`` in the hidden states' dtype, its own SDPA call."""

    @property
    def eager_softmax_fp32(self) -> bool:
        """Eager attention runs the softmax in fp32 and saves an fp32 copy of the probabilities beside the cast."""
        return self in (ModuleLayout.LLAMA, ModuleLayout.GEMMA, ModuleLayout.OLMO2)

    @property
    def norm_product_fp32(self) -> bool:
        """RMSNorm's weight multiply runs in fp32 before the downcast, so its saved product is fp32."""
        return self in (ModuleLayout.GEMMA, ModuleLayout.OLMO2)

    @property
    def loss_upcasts_logits(self) -> bool:
        """The training loss copies the logits to fp32 first (every causal LM's ``ForCausalLMLoss``)."""
        return self is not ModuleLayout.BERT

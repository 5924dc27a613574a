"""bertkit's CPU speed machinery, behind the few named calls :mod:`bertkit.model` makes.

- :func:`linear`: y = act(x W^T + b) on oneDNN's GEMM where that measured faster on this machine
  (:mod:`.gemm`, chosen per machine, see :mod:`bertkit.tuning`), and :class:`Linear`, the ``nn.Linear``
  whose forward it is;
- :func:`qkv_projection`: query, key and value as one GEMM against a cached concatenated weight (:mod:`.qkv`);
- :func:`dropout` / :class:`Dropout`: inverted dropout with a cheaper random mask (:mod:`.dropout`);
- :func:`scaled_dot_product_attention`: SDPA, with that dropout on the probabilities in training (:mod:`.attention`);
- :func:`packing_for` / :class:`Packing` / :func:`packed_attention`: run position-wise work on the real
  tokens of a padded batch only, and attention per group of equal-length sequences (:mod:`.packing`);
- :func:`sliding_window_attention`: attention within a window of positions, block by block on long sequences,
  memory linear in T (:mod:`.local_attention`, ModernBERT's local layers);
- :func:`rotate_queries_and_keys`: rotary positions on a fused QKV projection, per half and in place
  (:mod:`.rotary`, ModernBERT's attention);
- :func:`cross_entropy_with_probs`: a masked-LM loss and the softmax it came from in one pass, with a
  one-pass backward (:mod:`.cross_entropy`, ELECTRA's generator).

Beside them, not called by the model: :mod:`.peak`, the machine's GEMM peak that ``make bench`` reports rows
against and the experiment runner records one core's speed with.

The switch :func:`reference_ops` (or :func:`set_enabled`, or an environment variable:
:mod:`bertkit.settings`) makes every call compute
the plain PyTorch op instead; tests/test_kernels.py checks both give the same outputs and gradients.
"""

from .attention import scaled_dot_product_attention
from .cross_entropy import cross_entropy_with_probs
from .dropout import Dropout, dropout
from .gemm import Linear, linear
from .local_attention import sliding_window_attention, window_mask
from .packing import Packing, packed_attention, packing_for
from .qkv import qkv_projection
from .rotary import rotate_queries_and_keys
from .state import enabled, fast_ok, reference_ops, set_enabled

__all__ = [
    "Dropout",
    "Linear",
    "Packing",
    "cross_entropy_with_probs",
    "dropout",
    "enabled",
    "fast_ok",
    "linear",
    "packed_attention",
    "packing_for",
    "qkv_projection",
    "reference_ops",
    "rotate_queries_and_keys",
    "scaled_dot_product_attention",
    "set_enabled",
    "sliding_window_attention",
    "window_mask",
]

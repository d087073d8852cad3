"""What each half dtype holds: the integers it keeps exact, and its precision (no torch needed).

Every integer up to EXACT_INTEGERS[dtype] is exact; past it the spacing between neighbours
exceeds 1, so distinct integers (positions, ids, counts) round onto each other: 257 is 256 in
bfloat16, 2049 is 2048 in float16.
"""

from __future__ import annotations

EXACT_INTEGERS = {"bfloat16": 256, "float16": 2048, "float32": 2 ** 24}
# The spacing of numbers just above 1 (torch.finfo(dtype).eps).
EPSILON = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}

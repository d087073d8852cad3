"""Every colour the window uses for meaning, in one place.

The Okabe-Ito palette stays distinguishable under the common colour-vision deficiencies. Colour is
never the only signal: dtypes are also written out, devices are badges with text, statuses have
icons and words.
"""

from __future__ import annotations

from fp16studio.core.present.vocabulary import OKABE_ITO, SEVERITY_COLORS  # noqa: F401  (one palette)

# The half dtypes get the warm, loud colours: they are what this tool is about.
DTYPE_COLORS = {
    "float32": OKABE_ITO["blue"],
    "float16": OKABE_ITO["orange"],
    "bfloat16": OKABE_ITO["reddish_purple"],
    "float64": OKABE_ITO["sky_blue"],
    "int64": OKABE_ITO["bluish_green"],
    "int32": OKABE_ITO["bluish_green"],
    "bool": OKABE_ITO["grey"],
    "mixed": OKABE_ITO["yellow"],
}
# Legend order: what users look for first.
LEGEND_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "bool", "mixed")

DEVICE_COLORS = {
    "cpu": OKABE_ITO["grey"],
    "cuda": OKABE_ITO["bluish_green"],
    "mps": OKABE_ITO["sky_blue"],
    "meta": OKABE_ITO["yellow"],
}


def dtype_color(dtype: str | None) -> str | None:
    if not dtype:
        return None
    if dtype in DTYPE_COLORS:
        return DTYPE_COLORS[dtype]
    if dtype.startswith(("int", "uint")):
        return DTYPE_COLORS["int64"]
    return OKABE_ITO["grey"]


# "Colour by" headroom / drift / fp8: the share of the dtype's range a module's output uses, its
# SQNR against float32 (dB), and a Linear's SQNR in FP8 against bfloat16 (the FP8 plan's, whose
# layers under 20 dB stay bfloat16); past the first bound a row is orange, past the second
# vermillion.
SCALE_BOUNDS = {"headroom": (0.1, 1.0), "drift": (-40.0, -20.0),
                "fp8": (-30.0, -20.0)}   # drift, fp8: -SQNR, higher is worse


def scale_color(kind: str, value: float) -> str:
    """The colour of a module's headroom, drift or FP8 value: fine, close, or past the limit."""
    warn, bad = SCALE_BOUNDS[kind]
    worse = value if kind == "headroom" else -value
    if worse >= bad:
        return OKABE_ITO["vermillion"]
    return OKABE_ITO["orange"] if worse >= warn else OKABE_ITO["bluish_green"]


def device_color(device: str | None) -> str:
    kind = (device or "").split(":")[0]
    return DEVICE_COLORS.get(kind, OKABE_ITO["grey"])


def text_on(color: str) -> str:
    """Black or white, whichever reads better on `color` (WCAG relative luminance)."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    luminance = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "#000000" if luminance > 0.179 else "#ffffff"

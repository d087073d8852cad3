"""Every colour the window uses for meaning, in one place.

The Okabe-Ito palette stays distinguishable under the common colour-vision deficiencies. Colour is
never the only signal: dtypes are also written out, devices are badges with text, statuses have
icons and words.
"""

from __future__ import annotations

from fp16studio.core.precision.fp8_plan import SENSITIVE_SQNR_DB
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
# SQNR against float32 (dB), and its SQNR in FP8 against bfloat16 (dB, vermillion where the FP8
# plan keeps the layer in bfloat16); past the first bound a row is orange, past the second
# vermillion. SQNR bounds are negated: higher is worse.
SCALE_BOUNDS = {"headroom": (0.1, 1.0), "drift": (-40.0, -20.0),
                "fp8": (-SENSITIVE_SQNR_DB - 5.0, -SENSITIVE_SQNR_DB)}
SQNR_SCALES = ("drift", "fp8")


def scale_color(kind: str, value: float) -> str:
    """The colour of a module's headroom, drift or fp8 value: fine, close, or past the limit."""
    warn, bad = SCALE_BOUNDS[kind]
    worse = -value if kind in SQNR_SCALES else value
    if worse >= bad:
        return OKABE_ITO["vermillion"]
    return OKABE_ITO["orange"] if worse >= warn else OKABE_ITO["bluish_green"]


def colour_key(kind: str) -> tuple[str, list[tuple[str, str]]]:
    """The key of a "colour by" mode: its title and (colour, what it means) for each colour, from
    the same tables and bounds the tree colours by."""
    if kind == "dtype":
        return "Dtype", [(dtype_color(dtype), dtype) for dtype in LEGEND_DTYPES]
    if kind == "device":
        return "Device", [(color, device) for device, color in DEVICE_COLORS.items()]
    warn, bad = SCALE_BOUNDS[kind]
    if kind == "headroom":
        return "Range used", [(OKABE_ITO["bluish_green"], f"under {warn:.0%}"),
                              (OKABE_ITO["orange"], f"{warn:.0%} to {bad:.0%}"),
                              (OKABE_ITO["vermillion"], f"{bad:.0%} or more: overflows")]
    title = "SQNR vs float32" if kind == "drift" else "SQNR in FP8 vs bfloat16"
    last = "kept in bfloat16" if kind == "fp8" else "parts from float32"
    return title, [(OKABE_ITO["bluish_green"], f"over {-warn:g} dB"),
                   (OKABE_ITO["orange"], f"{-bad:g} to {-warn:g} dB"),
                   (OKABE_ITO["vermillion"], f"under {-bad:g} dB: {last}")]


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

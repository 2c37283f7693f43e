"""Static fallbacks for the plotly figures a notebook displays (nbconvert HTML, GitHub, a re-opened notebook).

A saved notebook keeps a plotly figure only as ``application/vnd.plotly.v1+json``, which nbconvert
and GitHub do not draw. :func:`use_static_fallback` makes every figure displayed afterwards carry
two representations: plotly's MIME type (JupyterLab draws the interactive figure from it) and an
``image/png`` drawn by matplotlib from the same data (:func:`toolkit.figures.paper.png_bytes`),
which every viewer of the saved file shows.
"""

from __future__ import annotations

import base64
from typing import Any

RENDERER = "prunelab_png"
DEFAULT = f"plotly_mimetype+{RENDERER}"


def _renderer_class() -> type:
    from plotly.io._base_renderers import MimetypeRenderer

    class StaticPng(MimetypeRenderer):
        """A plotly renderer giving the matplotlib PNG of a figure."""

        def to_mimebundle(self, fig_dict: Any) -> dict[str, str]:
            from toolkit.figures.paper import png_bytes

            return {"image/png": base64.b64encode(png_bytes(fig_dict)).decode("ascii")}

    return StaticPng


def use_static_fallback() -> None:
    """Register the PNG renderer and make plotly's default renderer ``plotly_mimetype+prunelab_png`` (:data:`DEFAULT`).

    Call it once per kernel (the notebooks' first cell does); it changes only plotly's renderer setting.
    """
    import plotly.io as pio

    _register()
    pio.renderers.default = DEFAULT


def _register() -> None:
    import plotly.io as pio

    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = _renderer_class()()


def fallback_bundle(figure: Any) -> dict[str, Any]:
    """The MIME bundle (plotly JSON, PNG, plain text) of ``figure``, as shown after :func:`use_static_fallback`."""
    import plotly.io as pio

    _register()
    bundle = dict(pio.renderers._build_mime_bundle(figure.to_dict(), DEFAULT))
    bundle.setdefault("text/plain", f"<figure: {figure.layout.title.text or 'untitled'}>")
    return bundle

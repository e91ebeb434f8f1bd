"""The views' pictures: an Agg figure (no pyplot state, no GUI) and its PNG bytes.

matplotlib is imported only here, when a picture is drawn: no other command pays ~0.4 s.
"""

import io
from typing import Any

DPI = 100


def figure(size: tuple[float, float]) -> Any:
    """A figure of ``size`` inches at ``DPI`` on its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 - ~0.4 s, pictures only
    from matplotlib.figure import Figure  # noqa: PLC0415 - with the canvas

    fig = Figure(figsize=size, dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png(fig: Any) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()

"""What sqlwa's notebooks (``notebooks/``) set up in their first cell, in one place: where
the sample data is, and figures that keep a static image.

An executed notebook stores what each figure displayed. Plotly's own mime type
(``application/vnd.plotly.v1+json``) needs plotly.js to be drawn: nbconvert's HTML and a
code-hosting site's notebook view show a blank for it. With the renderer
``plotly_mimetype+png`` each figure also carries a PNG, drawn by kaleido with the system's
Chrome or Chromium: interactive where plotly.js runs, a picture everywhere else.

A notebook run away from the repository is told where the sample data is expected
(``traces/samples/``) and how to point at it (:data:`SAMPLES_ENV`).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from sqlwa.errors import UsageError

SAMPLES_ENV = "SQLWA_SAMPLES"  # the sample data's directory, wherever a notebook runs
SAMPLES = Path("traces") / "samples"
STATIC_RENDERER = "plotly_mimetype+png"
PNG_WIDTH = 960  # px: a figure without a width of its own would be kaleido's 700
PROBE_TIMEOUT_S = 120  # a first image starts the browser: 10 s on a busy 2-core machine


def setup(static: bool = True) -> Path:
    """The first cell of sqlwa's notebooks: the sample data's directory
    (:func:`samples_dir`) and, unless ``static`` is False, figures that also keep a PNG
    (:func:`static_images`)."""
    samples = samples_dir()
    if static:
        static_images()
    return samples


def samples_dir(start: Path | None = None) -> Path:
    """The repository's ``traces/samples/``: ``$SQLWA_SAMPLES`` when set, else the first
    one in ``start`` (default: the working directory) or above it."""
    if configured := os.environ.get(SAMPLES_ENV):
        if not Path(configured).is_dir():
            raise UsageError(
                f"{SAMPLES_ENV}={configured} is not a directory: point it at the sqlwa repository's {SAMPLES}/"
            )
        return Path(configured)
    start = Path.cwd() if start is None else start
    for place in (start, *start.parents):
        if (place / SAMPLES).is_dir():
            return place / SAMPLES
    raise UsageError(
        f"the sample data was not found: sqlwa's notebooks read {SAMPLES}/ of the sqlwa repository, looked for in "
        f"{start} and above it. Start the notebook inside the repository, or set {SAMPLES_ENV}=/path/to/sqlwa/{SAMPLES}"
    )


def static_images(width: int = PNG_WIDTH) -> bool:
    """Make every figure shown from now on carry a PNG beside plotly's JSON, if kaleido can
    draw one here (a first, empty figure is drawn to find out). Where it cannot, figures
    stay JSON only and one line on stderr says why and what would fix it."""
    problem = static_renderer_problem()
    if problem:
        print(
            f"sqlwa: figures get no static image (blank in nbconvert HTML and on code-hosting sites): {problem}",
            file=sys.stderr,
        )
        return False
    pio.renderers["png"].width = width
    pio.renderers.default = STATIC_RENDERER
    return True


def static_renderer_problem() -> str | None:
    """Why kaleido cannot draw a PNG here, or None once it has drawn one. It keeps one
    browser for all figures (a browser per figure costs seconds each)."""
    try:
        import kaleido
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return "kaleido is not installed (pip install 'kaleido>=1'; it draws with the system's Chrome or Chromium)"
    if Chromium.find_browser(skip_local=False) is None:
        return "kaleido found no Chrome or Chromium (install one, e.g. Debian's chromium, or set BROWSER_PATH to it)"
    # No MathJax: kaleido would fetch it from a CDN. plotly passes its request headers to
    # every image, which a running server ignores, with a warning per figure.
    kaleido.start_sync_server(mathjax=False, silence_warnings=True)
    warnings.filterwarnings("ignore", message="The kopts argument is ignored if using a server")
    return first_image_problem()


def first_image_problem() -> str | None:
    """Draw an empty figure, in a thread: a browser that fails to start leaves kaleido's
    server waiting for ever, and the notebook must go on without images then."""
    outcome: list[BaseException | None] = []

    def draw() -> None:
        try:
            pio.to_image(go.Figure(), format="png", width=10, height=10)
            outcome.append(None)
        except Exception as exc:  # kaleido's errors share no base class
            outcome.append(exc)

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    thread.join(PROBE_TIMEOUT_S)
    if not outcome:
        return f"kaleido drew no image within {PROBE_TIMEOUT_S} s"
    error = outcome[0]
    return None if error is None else f"kaleido could not draw an image: {str(error).strip().splitlines()[0]}"

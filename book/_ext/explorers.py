"""Sphinx extension: four small figures the reader moves with sliders, computed by posenc at build time.

```{posenc-explorer} sinusoidal``` (or ``rope2d``, ``t5``, ``scaling``) in a chapter puts one figure on
its page: the controls (Korean labels), a canvas and a one-line readout. Every number the figure can
show is computed here, when the HTML is built, by posenc's public functions over the whole grid of
slider settings, and written as a small JSON file to ``_static/explorers/<name>.json`` of the build
(nothing generated is committed). The page's script (book/_static_files/explorers.js) only looks up
the slice of the current settings and draws it: no formula of the book is written in JavaScript, so
the figure cannot disagree with the package. Nothing comes from a CDN; the figure works offline.

* ``sinusoidal`` (chapter 2, ``book/02_sinusoidal.ipynb``): the table ``posenc.sinusoidal_table`` for
  ``d`` and ``base``.
* ``rope2d`` (chapter 6, ``book/06_rope.ipynb``): one pair, a query and a key rotated with ``posenc.rope_cos_sin`` and
  ``posenc.rope_rotate`` at positions ``m`` and ``n``, and their dot product.
* ``t5`` (chapter 4, ``book/04_relative.ipynb``): ``posenc.t5_relative_bucket`` of ``r = n - m``; a
  setting it refuses is explained with ``posenc.t5_exact_zone``.
* ``scaling`` (chapter 7, ``book/07_beyond.ipynb``): ``posenc.rope_inv_freq`` of each scaling type over
  the original RoPE frequencies, pair by pair, with the chapter's settings (Llama 3.1: d = 128, base = 500000,
  L_0 = 8192).

The figure shows the numbers it drew in its ``data-values`` attribute and its readout, which the
browser test (tests/site/test_explorers.py) compares with posenc in the test process.

An explorer is a figure like the book's others: the directive makes a figure node with a caption, so
Sphinx numbers it in the page's sequence ("그림 2.3") and ``{numref}`` can cite ``fig-explorer-NAME``.
Its settings live in the page's address (``02_sinusoidal.html?d=128&base=100``): read on load and
rewritten on change, and the role ``{explorer-view}`text <sinusoidal?d=64&base=100>``` links the text
to one view (checked against the controls' options at build time). Under the canvas is the ``posenc``
call that computes the view (:attr:`Explorer.call`), with a button that copies it.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

DATA_DIR = "explorers"  # under the build's _static/

# The slider grids. Option values are strings: they key the JSON objects and the page's script
# uses them as they are (no number formatting can make the two disagree).
SIN_POSITIONS = 64
SIN_DIMS = ("16", "32", "64", "128")
SIN_BASES = ("100", "1000", "10000", "100000", "500000")
SIN_SCALE = 100  # table values stored as integers in hundredths: a colour needs no more

ROPE_POSITIONS = 32  # m, n = 0 .. 31
ROPE_THETAS = ("0.1", "0.3", "1")
ROPE_Q = (0.8, 0.6)  # two unit vectors, so that the arrows end on the unit circle
ROPE_K = (0.96, 0.28)

T5_NUM_BUCKETS = ("8", "16", "32", "64")
T5_MAX_DISTANCES = ("32", "64", "128", "256")
T5_RANGE = 300  # r = -300 .. 300

SCALING_DIM, SCALING_BASE, SCALING_L0 = 128, 500000.0, 8192  # the figure of book/07_beyond.ipynb (Llama 3.1)
SCALING_ALPHAS = ("2", "4", "8", "16", "32")
SCALING_METHODS = ("linear", "ntk", "dynamic", "yarn", "llama3")


def _sig(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits (the JSON stays small)."""
    return float(f"{value:.{digits}g}")


# --- the data: posenc over each slider grid ------------------------------------------------------


def sinusoidal_data() -> dict:
    """The tables of ``posenc.sinusoidal_table`` for every ``d`` and ``base`` of the sliders.

    For one base, the table of a smaller ``d`` (a power of two) is a set of columns of the table of
    the largest ``d``: its frequencies base^(-2i/d) are some of the larger table's. So one table per
    base is stored, and for each ``d`` the columns that make its table; each selection is checked
    here against ``sinusoidal_table`` of that ``d``, so the page draws exactly posenc's table.
    """
    import torch

    from posenc import sinusoid_frequencies, sinusoidal_table

    d_max = max(int(d) for d in SIN_DIMS)
    tables, columns, slowest = {}, {}, {}
    for base_key in SIN_BASES:
        base = float(base_key)
        full = sinusoidal_table(SIN_POSITIONS, d_max, base=base, dtype=torch.float64)  # (L, d_max)
        full_freq = sinusoid_frequencies(d_max, base=base)  # (d_max/2,)
        slowest[base_key] = {}
        for d_key in SIN_DIMS:
            d = int(d_key)
            freq = sinusoid_frequencies(d, base=base)  # (d/2,)
            pairs = [int((full_freq - f).abs().argmin()) for f in freq]  # the same theta in the full table
            cols = [c for j in pairs for c in (2 * j, 2 * j + 1)]  # (sin, cos) of each pair
            table = sinusoidal_table(SIN_POSITIONS, d, base=base, dtype=torch.float64)  # (L, d)
            if not torch.allclose(full[:, cols], table, rtol=0, atol=1e-9):
                raise ExtensionError(f"explorers: the d={d} table is not a column selection at base={base_key}")
            if columns.setdefault(d_key, cols) != cols:
                raise ExtensionError(f"explorers: the columns of d={d} depend on the base ({base_key})")
            slowest[base_key][d_key] = _sig(2 * math.pi / float(freq[-1]))  # lambda_{d/2-1}, tokens
        tables[base_key] = (full * SIN_SCALE).round().long().tolist()

    import matplotlib
    import numpy as np

    colormap = matplotlib.colormaps["RdBu_r"](np.linspace(0.0, 1.0, 256))[
        :, :3
    ]  # the colours of book/02_sinusoidal.ipynb
    return {
        "positions": SIN_POSITIONS,
        "scale": SIN_SCALE,
        "tables": tables,
        "columns": columns,
        "slowest_wavelength": slowest,
        "colormap": (colormap * 255).round().astype(int).tolist(),
    }


def rope2d_data() -> dict:
    """One pair (d = 2): q and k rotated by RoPE at every position, and q'·k' for every (m, n)."""
    import torch

    from posenc import rope_cos_sin, rope_rotate

    positions = torch.arange(ROPE_POSITIONS)
    x = torch.tensor([ROPE_Q, ROPE_K], dtype=torch.float64)  # (2, 2): q and k
    x = x[:, None, None, :].expand(2, 1, ROPE_POSITIONS, 2)  # (b, h, s, d) = (2, 1, L, 2): q, k at every position
    by_theta = {}
    for theta_key in ROPE_THETAS:
        inv_freq = torch.tensor([float(theta_key)], dtype=torch.float64)  # (d/2,) = (1,)
        cos, sin = rope_cos_sin(positions, inv_freq, dtype=torch.float64)  # (L, 1) each
        q_rot, k_rot = rope_rotate(x.contiguous(), cos, sin, pairing="interleaved")[:, 0]  # (L, 2) each
        scores = q_rot @ k_rot.T  # (L, L): entry (m, n) = <R_m q, R_n k>
        by_theta[theta_key] = {
            "q": [[_sig(v) for v in row] for row in q_rot.tolist()],
            "k": [[_sig(v) for v in row] for row in k_rot.tolist()],
            "scores": [[_sig(v) for v in row] for row in scores.tolist()],
        }
    return {"positions": ROPE_POSITIONS, "q": list(ROPE_Q), "k": list(ROPE_K), "thetas": by_theta}


def t5_key(num_buckets: str, max_distance: str, bidirectional: bool) -> str:
    return f"{num_buckets}-{max_distance}-{'bi' if bidirectional else 'causal'}"


def t5_data() -> dict:
    """``posenc.t5_relative_bucket`` of r = -300 .. 300 for every setting; settings it refuses, with why."""
    import torch

    from posenc import t5_exact_zone, t5_relative_bucket

    rel = torch.arange(-T5_RANGE, T5_RANGE + 1)
    buckets, refused = {}, {}
    for num_buckets in T5_NUM_BUCKETS:
        for max_distance in T5_MAX_DISTANCES:
            for bidirectional in (True, False):
                key = t5_key(num_buckets, max_distance, bidirectional)
                try:
                    values = t5_relative_bucket(
                        rel, bidirectional=bidirectional, num_buckets=int(num_buckets), max_distance=int(max_distance)
                    )
                except ValueError:
                    zone = t5_exact_zone(int(num_buckets), bidirectional=bidirectional)  # distances 0 .. zone - 1
                    why = (
                        f"정확한 영역이 거리 0부터 {zone - 1}까지이므로 <i>D</i><sub>max</sub>는 {zone}보다 커야 한다."
                    )
                    refused[key] = f"posenc가 이 설정을 받지 않는다(ValueError): {why}"
                else:
                    buckets[key] = values.tolist()
    return {"r_min": -T5_RANGE, "r_max": T5_RANGE, "buckets": buckets, "refused": refused}


def scaling_data() -> dict:
    """theta'_i / theta_i of each scaling type of book/07_beyond.ipynb, for every alpha, and its attention scale."""
    from posenc import rope_inv_freq

    d, base, original_len = SCALING_DIM, SCALING_BASE, SCALING_L0
    original, _ = rope_inv_freq(d, base=base)  # (d/2,): RoPE's theta_i

    def scaled(method: str, alpha: float):
        if method == "ntk":  # NTK-aware, as book/07_beyond.ipynb defines it: plain RoPE with a larger base
            return rope_inv_freq(d, base=base * alpha ** (d / (d - 2)))
        common = {"factor": alpha, "original_max_position_embeddings": original_len}
        if method == "linear":
            return rope_inv_freq(d, base=base, scaling={"rope_type": "linear", "factor": alpha})
        if method == "dynamic":  # at the length alpha * L_0
            length = int(alpha * original_len)
            return rope_inv_freq(d, base=base, seq_len=length, scaling={"rope_type": "dynamic", **common})
        if method == "yarn":
            return rope_inv_freq(d, base=base, scaling={"rope_type": "yarn", **common})
        extra = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}  # Llama 3.1's
        return rope_inv_freq(d, base=base, scaling={"rope_type": "llama3", **common, **extra})

    ratios, scales = {}, {}
    for method in SCALING_METHODS:
        ratios[method], scales[method] = {}, {}
        for alpha_key in SCALING_ALPHAS:
            inv_freq, attention_scale = scaled(method, float(alpha_key))
            ratios[method][alpha_key] = [_sig(v) for v in (inv_freq.double() / original.double()).tolist()]
            scales[method][alpha_key] = _sig(attention_scale)
    return {
        "d": d,
        "base": base,
        "original_length": original_len,
        "ratios": ratios,
        "attention_scale": scales,
        "inverse_alpha": {a: _sig(1 / float(a)) for a in SCALING_ALPHAS},
    }


# --- the page: controls, canvas, readout ---------------------------------------------------------


@dataclass(frozen=True)
class Control:
    key: str
    label: str  # HTML: Korean words and math notation
    kind: str  # "range" (a slider over options), "checkbox" or "radio"
    options: tuple[str, ...] = ()
    default: str = ""
    option_labels: tuple[str, ...] = ()  # radio buttons: one HTML label per option


@dataclass(frozen=True)
class Explorer:
    data: Callable[[], dict]
    controls: tuple[Control, ...]
    caption: str  # HTML, Korean
    description: str  # the canvas's accessible name, plain Korean text
    # The Python line that reproduces the view (the copy button): "{key}" is replaced by the value of
    # the control ``key`` (a checkbox gives True or False). A dict: one line per value of the
    # control named by ``call_by``.
    call: str | dict[str, str] = ""
    call_by: str = ""


def _positions(n: int) -> tuple[str, ...]:
    return tuple(str(p) for p in range(n))


def _scaling_calls() -> dict[str, str]:
    """For each method of the scaling figure, the call whose result is what it draws: the ratios
    theta'_i / theta_i and the attention scale (as ``scaled`` in :func:`scaling_data` computes them)."""
    d, base, original = SCALING_DIM, f"{SCALING_BASE:.1f}", SCALING_L0
    common = f'"factor": {{alpha}}, "original_max_position_embeddings": {original}'
    args = {
        "linear": f'base={base}, scaling={{"rope_type": "linear", "factor": {{alpha}}}}',
        # NTK-aware: plain RoPE with a larger base, as book/07_beyond.ipynb defines it
        "ntk": f"base={base} * {{alpha}} ** ({d} / {d - 2})",
        "dynamic": f'base={base}, seq_len={{alpha}} * {original}, scaling={{"rope_type": "dynamic", {common}}}',
        "yarn": f'base={base}, scaling={{"rope_type": "yarn", {common}}}',
        "llama3": (
            f'base={base}, scaling={{"rope_type": "llama3", {common}, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}'
        ),
    }
    return {
        method: (
            f"import posenc; inv_freq, scale = posenc.rope_inv_freq({d}, {arguments}); "
            f"inv_freq / posenc.rope_inv_freq({d}, base={base})[0], scale"
        )
        for method, arguments in args.items()
    }


EXPLORERS: dict[str, Explorer] = {
    "sinusoidal": Explorer(
        data=sinusoidal_data,
        controls=(
            Control("d", "차원 수 <i>d</i>", "range", SIN_DIMS, "64"),
            Control("base", "밑 base", "range", SIN_BASES, "10000"),
        ),
        caption=(
            "사인·코사인 위치 인코딩의 표. 가로가 차원(짝수 2<i>i</i>는 sin, 홀수 2<i>i</i>+1은 cos), 세로가 위치 "
            f"<i>pos</i> = 0, …, {SIN_POSITIONS - 1}이다. "
            "값은 빌드할 때 <code>posenc.sinusoidal_table</code>이 계산했다."
        ),
        description="사인·코사인 위치 인코딩 표의 히트맵. 가로축은 차원, 세로축은 위치",
        call=f"import posenc; posenc.sinusoidal_table({SIN_POSITIONS}, {{d}}, base={{base}})",
    ),
    "rope2d": Explorer(
        data=rope2d_data,
        controls=(
            Control("m", "query 위치 <i>m</i>", "range", _positions(ROPE_POSITIONS), "2"),
            Control("n", "key 위치 <i>n</i>", "range", _positions(ROPE_POSITIONS), "5"),
            Control("theta", "각주파수 <i>&theta;</i>", "range", ROPE_THETAS, "0.3"),
        ),
        caption=(
            "한 쌍(2차원)의 RoPE. 화살표는 위치 <i>m</i>에서 돌린 query와 위치 <i>n</i>에서 돌린 key이고 "
            "(점선은 돌리기 전), 곡선은 두 벡터의 내적을 상대 위치 <i>r</i> = <i>n</i> &minus; <i>m</i>에 대해 "
            "그린 것이다(점이 지금의 <i>r</i>). 값은 빌드할 때 "
            "<code>posenc.rope_cos_sin</code>과 <code>posenc.rope_rotate</code>가 계산했다."
        ),
        description="단위원 위에서 돌린 query와 key 화살표, 그리고 상대 위치에 대한 내적 곡선",
        call=(
            "import torch, posenc; cos, sin = posenc.rope_cos_sin(torch.tensor([{m}, {n}]), "
            "torch.tensor([{theta}], dtype=torch.float64), dtype=torch.float64); "
            f"q, k = posenc.rope_rotate(torch.tensor([[[{list(ROPE_Q)}, {list(ROPE_K)}]]], dtype=torch.float64), "
            'cos, sin, pairing="interleaved")[0, 0]; q @ k'
        ),
    ),
    "t5": Explorer(
        data=t5_data,
        controls=(
            Control("num_buckets", "구간 수 <i>N</i><sub>bkt</sub>", "range", T5_NUM_BUCKETS, "32"),
            Control("max_distance", "최대 거리 <i>D</i><sub>max</sub>", "range", T5_MAX_DISTANCES, "128"),
            Control("bidirectional", "양방향(인코더)", "checkbox", default="true"),
        ),
        caption=(
            "T5의 구간 번호를 상대 위치 <i>r</i> = <i>n</i> &minus; <i>m</i> = "
            f"&minus;{T5_RANGE}, …, {T5_RANGE}에 대해 그린 것. "
            "점선은 |<i>r</i>| = <i>D</i><sub>max</sub>인 곳이다. "
            "값은 빌드할 때 <code>posenc.t5_relative_bucket</code>이 계산했다."
        ),
        description="상대 위치에 대한 T5 구간 번호의 계단 그래프",
        call=(
            f"import torch, posenc; posenc.t5_relative_bucket(torch.arange({-T5_RANGE}, {T5_RANGE + 1}), "
            "bidirectional={bidirectional}, num_buckets={num_buckets}, max_distance={max_distance})"
        ),
    ),
    "scaling": Explorer(
        data=scaling_data,
        controls=(
            Control(
                "method",
                "스케일링 기법",
                "radio",
                SCALING_METHODS,
                "yarn",
                option_labels=(
                    "위치 보간(PI)",
                    "NTK 방식",
                    "동적 NTK(<i>L</i> = <i>&alpha;</i><i>L</i><sub>0</sub>)",
                    "YaRN",
                    "Llama 3",
                ),
            ),
            Control("alpha", "확장 배율 <i>&alpha;</i>", "range", SCALING_ALPHAS, "8"),
        ),
        caption=(
            "RoPE 스케일링이 쌍 <i>i</i>마다 주파수를 원래의 몇 배로 바꾸는지"
            "(<i>&theta;</i>&prime;<sub><i>i</i></sub> / "
            f"<i>&theta;</i><sub><i>i</i></sub>, 세로축은 로그 눈금). 설정은 <i>d</i> = {SCALING_DIM}, "
            f"base = {SCALING_BASE:.0f}, <i>L</i><sub>0</sub> = {SCALING_L0}이고, "
            "회색 선은 다른 기법, 점선은 1/<i>&alpha;</i>다. "
            "값은 빌드할 때 <code>posenc.rope_inv_freq</code>가 계산했다."
        ),
        description="쌍 번호에 대한 RoPE 스케일링의 주파수 비율 그래프",
        call=_scaling_calls(),
        call_by="method",
    ),
}


class explorer_node(nodes.General, nodes.Element):  # docutils names its node classes in lower case
    """Where one explorer goes, inside its numbered figure; :class:`ExplorerToOutput` turns the figure
    into the explorer's HTML or drops it."""


class explorer_view(nodes.General, nodes.Inline, nodes.TextElement):
    """A link from the text to an explorer shown with given settings (the ``explorer-view`` role)."""


def figure_id(name: str) -> str:
    """The anchor (and the label for {numref}) of an explorer's figure: one figure per explorer."""
    return f"fig-explorer-{name}"


def _plain(caption: str) -> str:
    """A caption's HTML as plain text (the figure's title for references)."""
    return html.unescape(re.sub(r"<[^>]+>", "", caption))


class ExplorerDirective(SphinxDirective):
    """``{posenc-explorer} NAME``: one of :data:`EXPLORERS` on this page, a figure numbered and
    captioned like the others (label ``fig-explorer-NAME`` for {numref})."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if name not in EXPLORERS:
            raise self.error(f"posenc-explorer: unknown explorer {name!r}; known: {', '.join(EXPLORERS)}")
        placed = self.env.posenc_explorers.get(name)  # type: ignore[attr-defined]
        if placed is not None and placed != self.env.docname:
            raise self.error(f"posenc-explorer: {name!r} is already on {placed}; an explorer is shown once")
        self.env.posenc_explorers[name] = self.env.docname  # type: ignore[attr-defined]
        # A figure node with a caption: Sphinx numbers it with the page's other figures (numfig).
        figure = nodes.figure("", explorer_node(explorer=name, docname=self.env.docname))
        figure += nodes.caption("", _plain(EXPLORERS[name].caption))
        figure["names"].append(figure_id(name))
        self.state.document.note_explicit_target(figure, figure)
        self.set_source_info(figure)
        return [figure]


def explorer_view_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{explorer-view}`TEXT <NAME?key=value&...>```: a link to the explorer NAME with those settings
    (its page's address with the settings as a query; the explorer reads them on load)."""
    match = re.fullmatch(r"(?s)(.*?)\s*<([a-z0-9]+)\?([^>]*)>", text)
    if not match:
        message = inliner.reporter.error(f"explorer-view: expected `text <name?key=value&...>`, got {text!r}")
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    label, explorer, query = match.groups()
    problem = check_view(explorer, query)
    if problem:
        message = inliner.reporter.error(f"explorer-view: {problem}")
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [explorer_view(rawtext, label, explorer=explorer, query=query)], []


def check_view(explorer: str, query: str) -> str:
    """Why a view's settings are not settings of the explorer ('' when they are)."""
    if explorer not in EXPLORERS:
        return f"unknown explorer {explorer!r}"
    controls = {c.key: c for c in EXPLORERS[explorer].controls}
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    if not pairs:
        return f"{explorer}: no settings in {query!r}"
    for key, value in pairs:
        control = controls.get(key)
        if control is None:
            return f"{explorer} has no control {key!r} (it has {', '.join(controls)})"
        allowed = ("true", "false") if control.kind == "checkbox" else control.options
        if value not in allowed:
            return f"{explorer}: {key}={value!r} is not one of {', '.join(allowed)}"
    return ""


def _control_html(uid: str, control: Control) -> str:
    cid = f"{uid}-{control.key}"
    esc = html.escape
    if control.kind == "range":
        index = control.options.index(control.default)
        options = esc(json.dumps(control.options))
        return (
            f'<div class="posenc-explorer-control"><label for="{cid}">{control.label}</label>'
            f'<input type="range" id="{cid}" data-key="{control.key}" data-options="{options}" min="0" '
            f'max="{len(control.options) - 1}" step="1" value="{index}" aria-valuetext="{esc(control.default)}">'
            f'<output for="{cid}" id="{cid}-value">{esc(control.default)}</output></div>'
        )
    if control.kind == "checkbox":
        checked = " checked" if control.default == "true" else ""
        return (
            f'<div class="posenc-explorer-control posenc-explorer-check">'
            f'<input type="checkbox" id="{cid}" data-key="{control.key}"{checked}>'
            f'<label for="{cid}">{control.label}</label></div>'
        )
    radios = "".join(
        f'<span class="posenc-explorer-radio"><input type="radio" id="{cid}-{value}" name="{cid}" '
        f'data-key="{control.key}" value="{esc(value)}"{" checked" if value == control.default else ""}>'
        f'<label for="{cid}-{value}">{label}</label></span>'
        for value, label in zip(control.options, control.option_labels, strict=True)
    )
    legend = f"<legend>{control.label}</legend>"
    return f'<fieldset class="posenc-explorer-control posenc-explorer-radios">{legend}{radios}</fieldset>'


def explorer_html(name: str, uid: str, number: str = "") -> str:
    """The figure: controls, canvas, readout, the posenc call of the view with its copy button, and
    the caption, numbered (``number``: "그림 2.3") as Sphinx numbers the other figures."""
    explorer = EXPLORERS[name]
    esc = html.escape
    controls = "".join(_control_html(uid, c) for c in explorer.controls)
    call = esc(json.dumps({"by": explorer.call_by, "templates": explorer.call}, ensure_ascii=False))
    number_html = f'<span class="caption-number">{esc(number)} </span>' if number else ""
    return (
        f'<figure class="posenc-explorer" id="{uid}" data-explorer="{name}" data-src="{DATA_DIR}/{name}.json" '
        f'data-call="{call}">'
        f'<div class="posenc-explorer-controls">{controls}</div>'
        f'<div class="posenc-explorer-canvas"><canvas role="img" aria-label="{esc(explorer.description)}">'
        "</canvas></div>"
        '<p class="posenc-explorer-readout" aria-live="polite">그림을 불러오는 중이다.</p>'
        '<div class="posenc-explorer-call">'
        '<button type="button" class="posenc-explorer-copy">posenc 호출 복사</button>'
        '<code class="posenc-explorer-code"></code>'
        '<span class="posenc-explorer-copied" role="status" aria-live="polite"></span></div>'
        f'<figcaption><p>{number_html}<span class="caption-text">{explorer.caption}</span>'
        f'<a class="headerlink" href="#{uid}" title="이 그림으로 가는 링크">#</a></p></figcaption>'
        "<noscript><p>이 그림은 JavaScript를 켜야 보인다.</p></noscript>"
        "</figure>\n"
    )


class ExplorerToOutput(SphinxPostTransform):
    """Every HTML builder (html, dirhtml, singlehtml for the PDF) gets the figure as raw HTML, its
    number from Sphinx's figure numbering; others none. The links of ``explorer-view`` become links
    to the explorer's page with the settings as a query (in the single-page build behind the PDF,
    links to the figure).

    A post-transform rather than per-builder visitors: it runs for any builder, so no builder meets
    an unknown node.
    """

    default_priority = 200

    def run(self, **kwargs: object) -> None:
        is_html = self.app.builder.format == "html"
        for node in list(self.document.findall(explorer_node)):
            figure = node.parent
            if not is_html:
                figure.parent.remove(figure)
                continue
            uid = figure["ids"][0]
            numbers = self.env.toc_fignumbers.get(node["docname"], {}).get("figure", {}).get(uid)
            number = self.config.numfig_format["figure"] % ".".join(map(str, numbers)) if numbers else ""
            raw = nodes.raw("", explorer_html(node["explorer"], uid, number), format="html")
            raw["posenc_explorer"] = node["explorer"]
            figure.replace_self(raw)
        for node in list(self.document.findall(explorer_view)):
            name, query = node["explorer"], node["query"]
            if not is_html:
                node.replace_self(nodes.inline("", node.astext()))
                continue
            target = self.env.posenc_explorers.get(name)  # type: ignore[attr-defined]
            if target is None:
                raise ExtensionError(f"explorer-view: no page shows the explorer {name!r}")
            if self.app.builder.name == "singlehtml":  # one page: the figure itself (a still image in print)
                uri = f"#{figure_id(name)}"
            else:
                uri = f"{self.app.builder.get_relative_uri(self.env.docname, target)}?{query}#{figure_id(name)}"
            link = nodes.reference("", "", nodes.Text(node.astext()), refuri=uri, classes=["posenc-explorer-view"])
            node.replace_self(link)


def _has_explorer(node: nodes.Node) -> bool:
    return isinstance(node, nodes.raw) and bool(node.get("posenc_explorer"))


def _add_assets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: nodes.document | None) -> None:
    # Only the pages with an explorer load its script and styles.
    if doctree is not None and next(iter(doctree.findall(_has_explorer)), None) is not None:
        app.add_js_file("explorers.js", defer="defer")
        app.add_css_file("explorers.css")


def write_data(outdir: Path) -> dict[str, int]:
    """Compute every explorer's data with posenc and write it under ``outdir``; return the sizes in bytes."""
    outdir.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, explorer in EXPLORERS.items():
        text = json.dumps(explorer.data(), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        (outdir / f"{name}.json").write_text(text, encoding="utf-8")
        sizes[name] = len(text.encode())
    return sizes


def _build_finished(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        write_data(Path(app.outdir) / "_static" / DATA_DIR)


# Which page shows each explorer (for the links of ``explorer-view``), kept in the environment.
def _env_init(app: Sphinx) -> None:
    if not hasattr(app.env, "posenc_explorers"):
        app.env.posenc_explorers = {}  # type: ignore[attr-defined]


def _env_purge(app: Sphinx, env, docname: str) -> None:
    env.posenc_explorers = {k: v for k, v in getattr(env, "posenc_explorers", {}).items() if v != docname}


def _env_merge(app: Sphinx, env, docnames, other) -> None:
    env.posenc_explorers.update(getattr(other, "posenc_explorers", {}))


def setup(app: Sphinx) -> dict[str, object]:
    app.add_node(explorer_node)
    app.add_node(explorer_view)
    app.add_post_transform(ExplorerToOutput)
    app.add_directive("posenc-explorer", ExplorerDirective)
    app.add_role("explorer-view", explorer_view_role)
    app.connect("builder-inited", _env_init)
    app.connect("env-purge-doc", _env_purge)
    app.connect("env-merge-info", _env_merge)
    app.connect("html-page-context", _add_assets)
    app.connect("build-finished", _build_finished)
    # env_version: a build environment read with the previous version (explorers without a figure
    # node) is read again.
    return {"version": "1.1", "env_version": 2, "parallel_read_safe": True, "parallel_write_safe": True}

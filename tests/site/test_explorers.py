"""The interactive figures (book/_ext/explorers.py, book/_static_files/explorers.js) in headless Chromium.

Each figure is moved through its controls as a reader would (slider values with input events, the
keyboard, clicks on labels), and what it then shows (the numbers it drew, in its ``data-values``
attribute, its readout line, and for the heatmap the colours of the canvas pixels) is compared with
posenc computed here, in the test process, to the precision of the figure's data file. Settings that
draw different values are always among those checked, so a figure that drew the wrong slice fails.
Every figure is also opened in the dark theme and at phone width: no console error, no request
leaving the site, no horizontal overflow, and a drawing that is visible on the page. Screenshots of
each figure (light, dark, phone) are saved as _build/screenshots/explorer-*.png.

The explorers are figures like the others: numbered in the page's sequence ("그림 2.3") with a Korean
caption; their settings live in the page's address (read on load, rewritten on change, so the text
links to one view); and their copy button puts on the clipboard the posenc call of the view, which is
run here and must give what the figure drew.

Speed: the tests that move a figure through its settings open its chapter cut down to the figure
(:func:`alone`: the built page with the rest of its article left out), which loads in about half the
time of the whole chapter; the figures on the whole pages, as readers open them, are looked at by
the ``explorer_seen`` probe of the shared visits (drawn, read well, numbered, in both themes and on
a phone) and by the test of the text's link to a view.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import re
import sys
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlsplit

import pytest
import torch

import posenc

from conftest import DESKTOP, ROOT, SCREENSHOTS, SITE, guard, probe

# The scaling figure's settings (Llama 3.1's head dim, base and L_0), from the extension that draws it.
_spec = importlib.util.spec_from_file_location("explorers", ROOT / "book" / "_ext" / "explorers.py")
_explorers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("explorers", _explorers)  # its dataclasses look their module up there
_spec.loader.exec_module(_explorers)
DIM, BASE, L0 = _explorers.SCALING_DIM, _explorers.SCALING_BASE, _explorers.SCALING_L0

PAGES = {
    "sinusoidal": "book/02_sinusoidal.html",
    "t5": "book/04_relative.html",
    "rope2d": "book/06_rope.html",
    "scaling": "book/07_beyond.html",
}
DATA = SITE / "_static" / "explorers"
HANGUL = re.compile(r"[\uac00-\ud7a3]")
MINUS = "\u2212"  # the readout writes minus signs as U+2212
NUMBER = rf"({MINUS}?\d+(?:\.\d+)?)"


def data(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def number(text: str) -> float:
    return float(text.replace(MINUS, "-"))


ARTICLE = re.compile(r'(<article class="bd-article">).*?(</article>)', re.DOTALL)


@functools.cache
def alone(name: str) -> str:
    """The built chapter page of one figure with its article cut down to that figure: the same head
    (styles, scripts, MathJax), header and sidebars, the figure's markup as built, none of the rest of
    the chapter (on 2 cores the whole chapter loads in about 3.7 s, the cut page in about 1.8 s)."""
    html = (SITE / PAGES[name]).read_text()
    figure = re.search(rf'<figure class="posenc-explorer"[^>]*data-explorer="{name}".*?</figure>', html, re.DOTALL)
    assert figure and len(ARTICLE.findall(html)) == 1, f"{PAGES[name]}: no single article with the {name} figure"
    # The page's contents (the sidebar) link to the sections; the theme's script looks each one up.
    toc = re.search(r'<nav id="pst-page-toc-nav".*?</nav>', html, re.DOTALL)
    targets = "".join(f'<span id="{i}"></span>' for i in re.findall(r'href="#([^"]+)"', toc.group(0) if toc else ""))
    return ARTICLE.sub(lambda m: m.group(1) + targets + figure.group(0) + m.group(2), html)


@contextmanager
def explorer_page(browser, base_url, name, *, viewport=DESKTOP, mode="light", query="", clipboard=False, whole=False):
    """The chapter page of one figure, loaded and drawn; fails on console errors and outside requests.
    ``query``: the address's settings ("d=128&base=100"); ``clipboard``: the page may use the clipboard;
    ``whole``: the whole chapter, not the page cut down to the figure (:func:`alone`), which is enough
    for what the figure computes (the figures on the whole pages, as readers open them, are looked at
    by the explorer_seen probe)."""
    context = browser.new_context(viewport=viewport)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    if clipboard:
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url.rstrip("/"))
    page = context.new_page()
    problems = guard(page)
    address = base_url + PAGES[name]
    if not whole:  # after the guard's route: Playwright tries the last route registered first
        page.route(
            lambda url: url.split("?")[0].split("#")[0] == address,
            lambda route: route.fulfill(status=200, content_type="text/html; charset=utf-8", body=alone(name)),
        )
    try:
        page.goto(address + (f"?{query}" if query else ""), wait_until="load")
        wait_drawn(page, name)
        yield page
        page.wait_for_load_state("networkidle")
        assert not problems, f"{PAGES[name]}:\n  " + "\n  ".join(problems)
    finally:
        context.close()


def wait_drawn(page, name: str) -> None:
    page.wait_for_function(
        f"() => ['true', 'error'].includes(document.querySelector('figure[data-explorer=\"{name}\"]')?.dataset.ready)",
        timeout=15000,
    )
    figure = page.locator(f'figure[data-explorer="{name}"]')
    assert figure.get_attribute("data-ready") == "true", f"{name}: {readout(page, name)}"


def readout(page, name: str) -> str:
    return page.locator(f'figure[data-explorer="{name}"] .posenc-explorer-readout').inner_text()


def drawn(page, name: str):
    """What the figure drew for its current settings, and the readout line under it."""
    values = page.locator(f'figure[data-explorer="{name}"]').get_attribute("data-values")
    return json.loads(values), readout(page, name)


def set_controls(page, name: str, **settings):
    """Set sliders (by option value), checkboxes and radio buttons as input events would, then read back."""
    page.evaluate(
        """([name, settings]) => {
             const fig = document.querySelector(`figure[data-explorer="${name}"]`);
             for (const [key, value] of Object.entries(settings)) {
               const inputs = Array.from(fig.querySelectorAll(`input[data-key="${key}"]`));
               if (!inputs.length) throw new Error(`no control ${key}`);
               const input = inputs[0];
               if (input.type === 'range') {
                 const index = JSON.parse(input.dataset.options).indexOf(String(value));
                 if (index < 0) throw new Error(`${key} has no option ${value}`);
                 input.value = String(index);
                 input.dispatchEvent(new Event('input', {bubbles: true}));
               } else if (input.type === 'checkbox') {
                 input.checked = value;
                 input.dispatchEvent(new Event('change', {bubbles: true}));
               } else {
                 const radio = inputs.find(r => r.value === value);
                 if (!radio) throw new Error(`${key} has no option ${value}`);
                 radio.checked = true;
                 radio.dispatchEvent(new Event('change', {bubbles: true}));
               }
             }
           }""",
        [name, settings],
    )
    return drawn(page, name)


def options(page, name: str, key: str) -> list[str]:
    return json.loads(
        page.locator(f'figure[data-explorer="{name}"] input[data-key="{key}"]').get_attribute("data-options")
    )


def canvas_pixel(page, name: str, x: float, y: float) -> list[int]:
    return page.evaluate(
        """([name, x, y]) => { const c = document.querySelector(`figure[data-explorer="${name}"] canvas`);
             const r = c.width / c.clientWidth;
             return Array.from(c.getContext('2d').getImageData(Math.floor(x * r), Math.floor(y * r), 1, 1).data); }""",
        [name, x, y],
    )


def test_data_files_are_small_and_generated(site):
    for name in PAGES:
        path = DATA / f"{name}.json"
        assert path.is_file(), f"{path} was not written by the build (book/_ext/explorers.py)"
        assert path.stat().st_size < 200_000, f"{path.name} is {path.stat().st_size} bytes"


def test_sinusoidal_table_is_posencs(browser, base_url):
    colormap = data("sinusoidal")["colormap"]
    with explorer_page(browser, base_url, "sinusoidal") as page:
        assert options(page, "sinusoidal", "d") == ["16", "32", "64", "128"]
        seen = {}
        for d in options(page, "sinusoidal", "d"):
            for base in options(page, "sinusoidal", "base"):
                values, text = set_controls(page, "sinusoidal", d=d, base=base)
                expected = posenc.sinusoidal_table(64, int(d), base=float(base), dtype=torch.float64)
                got = torch.tensor(values, dtype=torch.float64)
                assert got.shape == expected.shape, f"d={d}, base={base}: drew {tuple(got.shape)}"
                error = (got - expected).abs().max().item()
                assert error <= 0.005 + 1e-9, f"d={d}, base={base}: off by {error:.4f} from posenc"
                wavelength = 2 * math.pi / posenc.sinusoid_frequencies(int(d), base=float(base))[-1].item()
                shown = number(re.search(r"약 ([\d,]+) 토큰", text).group(1).replace(",", ""))
                assert abs(shown - wavelength) <= 0.5 + 5e-4 * wavelength, f"d={d}, base={base}: {text}"
                seen[d, base] = got

                # The canvas itself: the cell (pos, column) has the colour of posenc's value.
                if (d, base) in {("32", "100"), ("32", "10000")}:
                    box = json.loads(page.locator('figure[data-explorer="sinusoidal"]').get_attribute("data-box"))
                    for pos, col in ((5, 0), (40, 3), (63, 2)):
                        x = box["x"] + (col + 0.5) * box["w"] / int(d)
                        y = box["y"] + (pos + 0.5) * box["h"] / 64
                        value = expected[pos, col].item()
                        want = colormap[round((value + 1) / 2 * (len(colormap) - 1))]
                        pixel = canvas_pixel(page, "sinusoidal", x, y)[:3]
                        assert max(abs(a - b) for a, b in zip(pixel, want, strict=True)) <= 6, (
                            f"d={d}, base={base}: cell ({pos}, {col}) is drawn {pixel}, posenc's value {value:.3f} "
                            f"is colour {want}"
                        )
        # Two settings of one d draw different tables: the base slider is really used.
        assert (seen["32", "100"] - seen["32", "10000"]).abs().max() > 0.5


def test_rope2d_rotations_and_scores_are_posencs(browser, base_url):
    vectors = data("rope2d")
    q, k = (torch.tensor(vectors[v], dtype=torch.float64)[None, None, None, :] for v in ("q", "k"))  # (1, 1, 1, 2)

    def rotated(x, position, theta):
        # The reference form of the rotation (the figure's data came from the fast kernel).
        cos, sin = posenc.rope_cos_sin(
            torch.tensor([position]), torch.tensor([theta], dtype=torch.float64), dtype=torch.float64
        )
        return posenc.rope_rotate_reference(x, cos, sin, pairing="interleaved")[0, 0, 0]  # (2,)

    with explorer_page(browser, base_url, "rope2d") as page:
        scores = {}
        for theta in options(page, "rope2d", "theta"):
            for m, n in ((2, 5), (10, 13), (0, 0), (5, 2), (31, 0), (7, 30)):
                shown, text = set_controls(page, "rope2d", m=str(m), n=str(n), theta=theta)
                q_m, k_n = rotated(q, m, float(theta)), rotated(k, n, float(theta))
                score = float(q_m @ k_n)
                assert shown["r"] == n - m
                assert torch.allclose(torch.tensor(shown["q"], dtype=torch.float64), q_m, atol=1e-4)
                assert torch.allclose(torch.tensor(shown["k"], dtype=torch.float64), k_n, atol=1e-4)
                assert abs(shown["score"] - score) <= 1e-4, f"m={m}, n={n}, theta={theta}: {shown['score']} vs {score}"
                read = number(re.search(r"= " + NUMBER + r"$", text).group(1))
                assert abs(read - score) <= 2e-4, f"m={m}, n={n}, theta={theta}: readout {text!r}, posenc {score}"
                assert f"r = n {MINUS} m = {n - m}".replace("-", MINUS) in text
                scores[theta, m, n] = read
        for theta in options(page, "rope2d", "theta"):
            assert scores[theta, 2, 5] == scores[theta, 10, 13], "the same r must show the same q·k"
            assert scores[theta, 2, 5] != scores[theta, 5, 2], "r = 3 and r = -3 differ"
        assert scores["0.1", 2, 5] != scores["1", 2, 5]

        # As a reader does it: the keyboard moves both sliders by the same number of steps.
        set_controls(page, "rope2d", m="2", n="5", theta="0.3")
        before, _ = drawn(page, "rope2d")
        for key in ("m", "n"):
            slider = page.locator(f'figure[data-explorer="rope2d"] input[data-key="{key}"]')
            for _ in range(4):
                slider.press("ArrowRight")
        after, text = drawn(page, "rope2d")
        assert "m = 6, n = 9" in text
        assert after["score"] == before["score"] and after["q"] != before["q"]


def test_t5_buckets_are_posencs(browser, base_url):
    rel = torch.arange(-300, 301)
    with explorer_page(browser, base_url, "t5") as page:
        drawn_sets = {}
        for num_buckets in options(page, "t5", "num_buckets"):
            for max_distance in options(page, "t5", "max_distance"):
                for bidirectional in (True, False):
                    shown, text = set_controls(
                        page, "t5", num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional
                    )
                    try:
                        expected = posenc.t5_relative_bucket(
                            rel,
                            bidirectional=bidirectional,
                            num_buckets=int(num_buckets),
                            max_distance=int(max_distance),
                        )
                    except ValueError:
                        assert shown is None, f"posenc refuses {num_buckets}, {max_distance}, but the figure drew"
                        assert "ValueError" in text and "Dmax" in text
                        continue
                    assert shown == expected.tolist(), f"N_bkt={num_buckets}, D_max={max_distance}, bi={bidirectional}"
                    used = re.search(r"가운데 (\d+)개", text).group(1)
                    assert int(used) == len(set(expected.tolist())), text
                    drawn_sets[num_buckets, max_distance, bidirectional] = shown
        assert drawn_sets["32", "128", True] != drawn_sets["32", "128", False]
        assert drawn_sets["32", "128", True] != drawn_sets["32", "64", True]
        assert ("64", "32", False) not in drawn_sets  # the one refused setting of the grid

        # A click on the checkbox's label switches to the causal buckets.
        set_controls(page, "t5", num_buckets="32", max_distance="128", bidirectional=True)
        page.locator('figure[data-explorer="t5"] label', has_text="양방향").click()
        shown, text = drawn(page, "t5")
        assert shown == posenc.t5_relative_bucket(rel, bidirectional=False).tolist() and "인과" in text


SCALINGS = {
    "linear": lambda alpha: {"rope_type": "linear", "factor": alpha},
    "dynamic": lambda alpha: {"rope_type": "dynamic", "factor": alpha, "original_max_position_embeddings": 8192},
    "yarn": lambda alpha: {"rope_type": "yarn", "factor": alpha, "original_max_position_embeddings": 8192},
    "llama3": lambda alpha: {
        "rope_type": "llama3",
        "factor": alpha,
        "original_max_position_embeddings": 8192,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
}


def expected_scaling(method: str, alpha: float) -> tuple[torch.Tensor, float]:
    """Chapter 6's settings: Llama 3.1 (d = 128, base = 500000, L_0 = 8192); NTK-aware as plain RoPE."""
    d, base = 128, 500000.0
    original, _ = posenc.rope_inv_freq(d, base=base)
    if method == "ntk":
        inv_freq, scale = posenc.rope_inv_freq(d, base=base * alpha ** (d / (d - 2)))
    else:
        seq_len = int(alpha * 8192) if method == "dynamic" else None
        inv_freq, scale = posenc.rope_inv_freq(d, base=base, scaling=SCALINGS[method](alpha), seq_len=seq_len)
    return inv_freq.double() / original.double(), scale


def test_scaling_ratios_are_posencs(browser, base_url):
    with explorer_page(browser, base_url, "scaling") as page:
        methods = page.evaluate(
            """Array.from(document.querySelectorAll('figure[data-explorer="scaling"] input[type="radio"]'))
                 .map(r => r.value)"""
        )
        assert methods == ["linear", "ntk", "dynamic", "yarn", "llama3"]
        seen = {}
        for method in methods:
            for alpha in options(page, "scaling", "alpha"):
                shown, text = set_controls(page, "scaling", method=method, alpha=alpha)
                ratio, scale = expected_scaling(method, float(alpha))
                got = torch.tensor(shown["ratios"], dtype=torch.float64)
                assert torch.allclose(got, ratio, rtol=5e-4, atol=0), f"{method}, alpha={alpha}"
                assert math.isclose(shown["attention_scale"], scale, rel_tol=5e-4), f"{method}, alpha={alpha}"
                fastest, slowest, shown_scale = (
                    number(x) for x in re.findall(r"(?:은|는) " + NUMBER + r"(?:배|이다)", text)
                )
                assert math.isclose(fastest, ratio[0].item(), rel_tol=5e-4), text
                assert math.isclose(slowest, ratio[-1].item(), rel_tol=5e-4), text
                assert math.isclose(shown_scale, scale, rel_tol=5e-4), text
                seen[method, alpha] = got
        assert not torch.equal(seen["yarn", "8"], seen["llama3", "8"])
        assert not torch.equal(seen["yarn", "8"], seen["yarn", "16"])

        # A click on a method's label selects it.
        set_controls(page, "scaling", method="yarn", alpha="8")
        page.locator('figure[data-explorer="scaling"] label', has_text="위치 보간").click()
        shown, text = drawn(page, "scaling")
        got = torch.tensor(shown["ratios"], dtype=torch.float64)
        assert torch.allclose(got, torch.full((64,), 1 / 8, dtype=torch.float64))
        assert text.startswith("위치 보간")


def visible_drawing(page, name: str) -> float:
    """The share of canvas pixels that differ from the card's colour (its corner pixel): the drawing is there."""
    return page.evaluate(
        """(name) => { const c = document.querySelector(`figure[data-explorer="${name}"] canvas`);
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let ink = 0;
             for (let i = 0; i < d.length; i += 4)
               if (Math.abs(d[i] - d[0]) + Math.abs(d[i + 1] - d[1]) + Math.abs(d[i + 2] - d[2]) > 40) ink++;
             return ink / (d.length / 4); }""",
        name,
    )


def card(page, name: str) -> list[int]:
    """The canvas's corner pixel: the colour of the card it is drawn on."""
    return page.evaluate(
        """(name) => Array.from(document.querySelector(`figure[data-explorer="${name}"] canvas`)
                               .getContext('2d').getImageData(1, 1, 1, 1).data)""",
        name,
    )


# What a reader sees of each explorer, looked at on the shared visits of its chapter (tests/site/
# conftest.py: one load per page, size and theme, guarded against console errors and outside requests
# by test_browser.py): 1280 px light and dark, and a phone.
EXPLORER_OF = {path: name for name, path in PAGES.items()}
COLOURS = """(name) => { const fig = document.querySelector(`figure[data-explorer="${name}"]`);
  const bg = getComputedStyle(document.body).backgroundColor;
  return {text: getComputedStyle(fig.querySelector('.posenc-explorer-readout')).color,
          label: getComputedStyle(fig.querySelector('label')).color, background: bg}; }"""
LABELS = """(name) => Array.from(document.querySelectorAll(`figure[data-explorer="${name}"] input`))
  .map(i => (i.labels && i.labels.length ? i.labels[0].innerText : '').trim())"""
NUMBERS = """() => Array.from(document.querySelectorAll('article figure'))
  .map(f => [f.dataset.explorer || '', f.id,
             f.querySelector(':scope > figcaption .caption-number')?.innerText.trim() || '',
             f.querySelector(':scope > figcaption .caption-text')?.innerText || ''])"""
# The theme's sticky headers would cover the figure's top in the picture: hidden while it is taken.
HIDE_HEADERS = ".bd-header, .bd-header-article, .skip-link { visibility: hidden !important; }"


@probe("1280", "1280-dark", "phone")
def explorer_seen(page, page_path: str) -> dict | None:
    """On a chapter with an explorer: it drawn, scrolled into view, its card, ink, colours, labels,
    box and the page's overflow, the figures' numbers, and a picture of it (explorer-<name>-<label>.png);
    the page is scrolled back to where it was. None on any other page."""
    name = EXPLORER_OF.get(page_path)
    if name is None:
        return None
    wait_drawn(page, name)
    viewport = page.viewport_size
    theme = page.evaluate("document.documentElement.dataset.theme")
    label = "phone" if viewport["width"] < DESKTOP["width"] else theme
    scrolled = page.evaluate("[window.scrollX, window.scrollY]")
    figure = page.locator(f'figure[data-explorer="{name}"]')
    figure.scroll_into_view_if_needed()
    found = {
        "name": name,
        "label": label,
        "theme": theme,
        "width": viewport["width"],
        "card": card(page, name),
        "ink": visible_drawing(page, name),
        "colours": page.evaluate(COLOURS, name),
        "labels": page.evaluate(LABELS, name),
        "overflow": page.evaluate("document.documentElement.scrollWidth - window.innerWidth"),
        "box": figure.bounding_box(),
        "numbers": page.evaluate(NUMBERS),
        "caption_link": figure.locator(":scope > figcaption a.headerlink").get_attribute("href"),
        "drawn": drawn(page, name)[0],
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    figure.screenshot(path=str(SCREENSHOTS / f"explorer-{name}-{label}.png"), style=HIDE_HEADERS)
    page.evaluate("([x, y]) => window.scrollTo(x, y)", scrolled)
    return found


@pytest.mark.parametrize("name", list(PAGES))
def test_explorers_follow_the_theme(name, browser, base_url, visit):
    """An explorer is drawn on a white card in the light theme and on a dark one in the dark theme,
    and is drawn again, in the other palette, when the reader switches the theme."""
    with explorer_page(browser, base_url, name, mode="light") as page:
        assert card(page, name)[:3] == [255, 255, 255]
        page.evaluate("document.documentElement.dataset.theme = 'dark'")
        page.wait_for_function(
            "(name) => document.querySelector(`figure[data-explorer=\"${name}\"]`).dataset.theme === 'dark'", arg=name
        )
        dark = card(page, name)
        assert sum(dark[:3]) < 120 and dark[3] == 255, dark
        assert visible_drawing(page, name) > 0.01, f"{name}: nothing drawn on the dark card"
    # opened in the dark theme: the same card at once
    assert visit("1280-dark", PAGES[name], explorer_seen)["card"] == dark


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize(("mode", "kind"), [("light", "1280"), ("dark", "1280-dark"), ("light", "phone")])
def test_explorer_reads_well(name, mode, kind, visit):
    seen = visit(kind, PAGES[name], explorer_seen)
    label = seen["label"]
    assert seen["theme"] == mode
    assert seen["ink"] > 0.01, f"{name} ({label}): the canvas is (nearly) blank"
    colours = seen["colours"]
    assert colours["text"] != colours["background"] and colours["label"] != colours["background"], colours
    # Every control has a Korean or mathematical label a screen reader can read.
    labels = seen["labels"]
    assert labels and all(labels), f"{name}: a control without a label: {labels}"
    assert all(HANGUL.search(t) or t in ("YaRN", "Llama 3") for t in labels), labels
    assert seen["overflow"] <= 1, f"{name} ({label}): the page is {seen['overflow']}px wider than the window"
    box = seen["box"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= seen["width"] + 1, f"{name} ({label}): {box}"


# --- explorers as figures: numbered, linked to by their settings, reproduced by a posenc call ----------------


@pytest.mark.parametrize("name", list(PAGES))
def test_explorers_are_numbered_like_the_other_figures(name, visit):
    """Each explorer's caption starts with its number in the page's sequence of figures (그림 2.1,
    2.2, ... in document order, the explorer among them), and reads in Korean."""
    path = PAGES[name]
    chapter = int(re.match(r"book/(\d+)_", path).group(1))
    seen = visit("1280", path, explorer_seen)
    numbers = seen["numbers"]
    mine = [n for n in numbers if n[0] == name]
    assert len(mine) == 1, f"{path}: {numbers}"
    _, anchor, number, caption = mine[0]
    assert anchor == f"fig-explorer-{name}", anchor
    assert number, f"{path}: the {name} explorer has no figure number"
    assert HANGUL.search(caption), f"{name}: no Korean caption: {caption!r}"
    wanted = [f"그림 {chapter}.{i}" for i in range(1, len(numbers) + 1)]
    assert [n[2] for n in numbers] == wanted, f"{path}: {[n[2] for n in numbers]}"
    # The caption's link leads to the figure.
    assert seen["caption_link"] == f"#fig-explorer-{name}"


# One setting of each explorer other than its default (the address must carry it), and a second one
# that a control then changes to.
VIEWS = {
    "sinusoidal": ({"d": "128", "base": "100"}, {"base": "500000"}),
    "rope2d": ({"m": "7", "n": "30", "theta": "1"}, {"theta": "0.1"}),
    "t5": ({"num_buckets": "16", "max_distance": "64", "bidirectional": False}, {"max_distance": "256"}),
    "scaling": ({"method": "llama3", "alpha": "32"}, {"method": "ntk"}),
}


def query_of(settings: dict) -> str:
    return "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items())


def address_settings(page) -> dict:
    return dict(parse_qsl(urlsplit(page.url).query))


@pytest.mark.parametrize("name", list(PAGES))
def test_settings_round_trip_through_the_address(name, browser, base_url, visit):
    first, change = VIEWS[name]
    # The default view: what the chapter drew when it was opened with no settings in its address.
    default = visit("1280", PAGES[name], explorer_seen)["drawn"]
    # A value that is not a setting of the control leaves the default.
    key = next(iter(first))
    with explorer_page(browser, base_url, name, query=f"{key}=999999") as page:
        assert drawn(page, name)[0] == default
        wanted_first, _ = set_controls(page, name, **first)
        wanted_second, _ = set_controls(page, name, **change)
    # The address's settings are read when the page opens.
    with explorer_page(browser, base_url, name, query=query_of(first)) as page:
        shown, _ = drawn(page, name)
        assert shown == wanted_first, f"{name}: ?{query_of(first)} did not open that view"
        history = page.evaluate("history.length")
        # A change of a control is written to the address without a new history entry.
        set_controls(page, name, **change)
        expected = {k: str(v).lower() if isinstance(v, bool) else v for k, v in {**first, **change}.items()}
        assert address_settings(page) == expected, page.url
        assert page.evaluate("history.length") == history
        again = page.url
    # The rewritten address opens the same view.
    with explorer_page(browser, base_url, name, query=urlsplit(again).query) as page:
        assert drawn(page, name)[0] == wanted_second


# The call each view must copy: written out here from posenc's documented signatures, not taken from
# the page.
def expected_call(name: str, s: dict) -> str:
    if name == "sinusoidal":
        return f"import posenc; posenc.sinusoidal_table(64, {s['d']}, base={s['base']})"
    if name == "rope2d":
        return (
            f"import torch, posenc; cos, sin = posenc.rope_cos_sin(torch.tensor([{s['m']}, {s['n']}]), "
            f"torch.tensor([{s['theta']}], dtype=torch.float64), dtype=torch.float64); "
            "q, k = posenc.rope_rotate(torch.tensor([[[[0.8, 0.6], [0.96, 0.28]]]], dtype=torch.float64), "
            'cos, sin, pairing="interleaved")[0, 0]; q @ k'
        )
    if name == "t5":
        return (
            "import torch, posenc; posenc.t5_relative_bucket(torch.arange(-300, 301), "
            f"bidirectional={s['bidirectional']}, num_buckets={s['num_buckets']}, max_distance={s['max_distance']})"
        )
    a = s["alpha"]
    common = f'"factor": {a}, "original_max_position_embeddings": {L0}'
    args = {
        "linear": f'base={BASE}, scaling={{"rope_type": "linear", "factor": {a}}}',
        "ntk": f"base={BASE} * {a} ** ({DIM} / {DIM - 2})",
        "dynamic": f'base={BASE}, seq_len={a} * {L0}, scaling={{"rope_type": "dynamic", {common}}}',
        "yarn": f'base={BASE}, scaling={{"rope_type": "yarn", {common}}}',
        "llama3": (
            f'base={BASE}, scaling={{"rope_type": "llama3", {common}, "low_freq_factor": 1.0, "high_freq_factor": 4.0}}'
        ),
    }[s["method"]]
    return (
        f"import posenc; inv_freq, scale = posenc.rope_inv_freq({DIM}, {args}); "
        f"inv_freq / posenc.rope_inv_freq({DIM}, base={BASE})[0], scale"
    )


def run_call(line: str):
    """Run the copied line as a notebook cell runs it: the statements, then the value of the last
    expression; returns (that value, the names the line defined)."""
    tree = ast.parse(line)
    *body, last = tree.body
    assert isinstance(last, ast.Expr), f"the line does not end in an expression: {line}"
    names: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "<copied>", "exec"), names)
    return eval(compile(ast.Expression(last.value), "<copied>", "eval"), names), names


COPY_SETTINGS = {
    "sinusoidal": [{"d": "16", "base": "1000"}, {"d": "128", "base": "10000"}],
    "rope2d": [{"m": "2", "n": "5", "theta": "0.3"}, {"m": "31", "n": "0", "theta": "1"}],
    "t5": [
        {"num_buckets": "32", "max_distance": "128", "bidirectional": True},
        {"num_buckets": "8", "max_distance": "256", "bidirectional": False},
        {"num_buckets": "64", "max_distance": "32", "bidirectional": False},  # refused by posenc
    ],
    "scaling": [{"method": m, "alpha": a} for m in ("linear", "ntk", "dynamic", "yarn", "llama3") for a in ("2", "32")],
}


@pytest.mark.parametrize("name", list(PAGES))
def test_copy_button_copies_the_posenc_call_of_the_view(name, browser, base_url):
    with explorer_page(browser, base_url, name, clipboard=True) as page:
        button = page.locator(f'figure[data-explorer="{name}"] button.posenc-explorer-copy')
        assert button.inner_text().strip() == "posenc 호출 복사"
        status = page.locator(f'figure[data-explorer="{name}"] .posenc-explorer-copied')
        for settings in COPY_SETTINGS[name]:
            shown, _ = set_controls(page, name, **settings)
            assert status.inner_text() == "", "the feedback of an earlier copy is left after a change"
            page.evaluate("navigator.clipboard.writeText('')")
            button.click()
            page.wait_for_function(
                f"""() => document.querySelector('figure[data-explorer="{name}"] .posenc-explorer-copied')
                      .innerText.length > 0"""
            )
            assert status.inner_text().startswith("복사했다"), status.inner_text()
            copied = page.evaluate("navigator.clipboard.readText()")
            view = {k: (str(v) if isinstance(v, bool) else v) for k, v in settings.items()}
            assert copied == expected_call(name, view), copied
            # The line is also shown under the figure.
            assert page.locator(f'figure[data-explorer="{name}"] code.posenc-explorer-code').inner_text() == copied
            # It runs in posenc and computes what the figure drew.
            if name == "t5" and shown is None:
                with pytest.raises(ValueError, match="max_distance"):
                    run_call(copied)
                continue
            value, names = run_call(copied)
            if name == "sinusoidal":
                got = torch.tensor(shown, dtype=torch.float64)
                assert value.shape == got.shape and (value.double() - got).abs().max() <= 0.005 + 1e-9, settings
            elif name == "rope2d":
                assert abs(float(value) - shown["score"]) <= 1e-4, settings
                assert torch.allclose(names["q"], torch.tensor(shown["q"], dtype=torch.float64), atol=1e-4)
                assert torch.allclose(names["k"], torch.tensor(shown["k"], dtype=torch.float64), atol=1e-4)
            elif name == "t5":
                assert value.tolist() == shown, settings
            else:
                ratios, scale = value
                assert torch.allclose(ratios.double(), torch.tensor(shown["ratios"], dtype=torch.float64), rtol=5e-4)
                assert math.isclose(scale, shown["attention_scale"], rel_tol=5e-4), settings


def test_the_text_links_to_a_view_of_an_explorer(browser, base_url):
    """Chapter 2 links to its table at base 100: the link carries the settings, and following it
    draws posenc's table of that setting."""
    with explorer_page(browser, base_url, "sinusoidal", whole=True) as page:
        link = page.locator("article a.posenc-explorer-view").first
        href = link.get_attribute("href")
        assert urlsplit(href).fragment == "fig-explorer-sinusoidal", href
        assert dict(parse_qsl(urlsplit(href).query)) == {"d": "64", "base": "100"}, href
        link.click()
        page.wait_for_url(re.compile(r"base=100"))
        wait_drawn(page, "sinusoidal")
        shown, _ = drawn(page, "sinusoidal")
        expected = posenc.sinusoidal_table(64, 64, base=100.0, dtype=torch.float64)
        assert (torch.tensor(shown, dtype=torch.float64) - expected).abs().max() <= 0.005 + 1e-9

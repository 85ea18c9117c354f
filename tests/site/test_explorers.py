"""The interactive figures (book/_ext/explorers.py, book/_static_files/explorers.js) in headless Chromium.

Each figure is moved through its controls as a reader would (slider values with input events, the
keyboard, clicks on labels), and what it then shows (the numbers it drew, in its ``data-values``
attribute, its readout line, and for the heatmap the colours of the canvas pixels) is compared with
posenc computed here, in the test process, to the precision of the figure's data file. Settings that
draw different values are always among those checked, so a figure that drew the wrong slice fails.
Every figure is also opened in the dark theme and at phone width: no console error, no request
leaving the site, no horizontal overflow, and a drawing that is visible on the page. Screenshots of
each figure (light, dark, phone) are saved as _build/screenshots/explorer-*.png.
"""

from __future__ import annotations

import json
import math
import re
from contextlib import contextmanager

import pytest
import torch

import posenc

from conftest import DESKTOP, PHONE, SITE, guard

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


@contextmanager
def explorer_page(browser, base_url, name, *, viewport=DESKTOP, mode="light"):
    """The chapter page of one figure, loaded and drawn; fails on console errors and outside requests."""
    context = browser.new_context(viewport=viewport)
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    page = context.new_page()
    problems = guard(page)
    try:
        page.goto(base_url + PAGES[name], wait_until="load")
        page.wait_for_function(
            f"() => ['true', 'error'].includes(document.querySelector('figure[data-explorer=\"{name}\"]')"
            "?.dataset.ready)",
            timeout=15000,
        )
        figure = page.locator(f'figure[data-explorer="{name}"]')
        assert figure.get_attribute("data-ready") == "true", f"{name}: {readout(page, name)}"
        yield page
        page.wait_for_load_state("networkidle")
        assert not problems, f"{PAGES[name]}:\n  " + "\n  ".join(problems)
    finally:
        context.close()


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
    """The share of canvas pixels that are not the card's white: the drawing is there."""
    return page.evaluate(
        """(name) => { const c = document.querySelector(`figure[data-explorer="${name}"] canvas`);
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let ink = 0; for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 600) ink++;
             return ink / (d.length / 4); }""",
        name,
    )


@pytest.mark.parametrize("name", list(PAGES))
@pytest.mark.parametrize(("mode", "viewport"), [("light", DESKTOP), ("dark", DESKTOP), ("light", PHONE)])
def test_explorer_reads_well(name, mode, viewport, browser, base_url, screenshots):
    label = "phone" if viewport is PHONE else mode
    with explorer_page(browser, base_url, name, viewport=viewport, mode=mode) as page:
        assert page.evaluate("document.documentElement.dataset.theme") == mode
        figure = page.locator(f'figure[data-explorer="{name}"]')
        figure.scroll_into_view_if_needed()
        assert visible_drawing(page, name) > 0.01, f"{name} ({label}): the canvas is (nearly) blank"
        colours = page.evaluate(
            """(name) => { const fig = document.querySelector(`figure[data-explorer="${name}"]`);
                 const bg = getComputedStyle(document.body).backgroundColor;
                 return {text: getComputedStyle(fig.querySelector('.posenc-explorer-readout')).color,
                         label: getComputedStyle(fig.querySelector('label')).color, background: bg}; }""",
            name,
        )
        assert colours["text"] != colours["background"] and colours["label"] != colours["background"], colours
        # Every control has a Korean or mathematical label a screen reader can read.
        labels = page.evaluate(
            """(name) => Array.from(document.querySelectorAll(`figure[data-explorer="${name}"] input`))
                 .map(i => (i.labels && i.labels.length ? i.labels[0].innerText : '').trim())""",
            name,
        )
        assert labels and all(labels), f"{name}: a control without a label: {labels}"
        assert all(HANGUL.search(t) or t in ("YaRN", "Llama 3") for t in labels), labels
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name} ({label}): the page is {overflow}px wider than the window"
        box = figure.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1, f"{name} ({label}): {box}"
        # The theme's sticky headers would cover the figure's top in the picture: hidden while it is taken.
        hide = ".bd-header, .bd-header-article, .skip-link { visibility: hidden !important; }"
        figure.screenshot(path=str(screenshots / f"explorer-{name}-{label}.png"), style=hide)

"""axe-core (4.12.1, bundled by axe-playwright-python) finds no accessibility violation of impact
moderate or higher on any page of the site, in the light and the dark theme.

The fixes: book/_ext/accessibility.py (bibliography roles), book/_templates/navbar-logo.html (the
sidebar's book title inside a landmark), book/_static_files/book.css (link contrast in exercise
boxes).

Speed without losing a finding: axe's color-contrast rule measures every text element, and a chapter
has about 12,000 of them (code tokens, formula glyphs), so it took 20-25 s of a page's 30 s. Two
elements whose text colour, font size and weight, opacity, shadow, visibility and the backgrounds,
opacities, blend modes and filters of every ancestor are the same have the same contrast ratio, so
the rule runs on one element of each such kind (about 200 per chapter); every other rule runs on the
whole page. `test_contrast_sample_finds_what_the_whole_page_finds` plants low-contrast text and
checks that the sample and the whole page report it alike.

The same for link-in-text-block, which took 3 s of a chapter's remaining 5.5 s (it measures every
link's place in its text block): it runs on one link of each kind by the link's look, the look of the
elements inside it, its backgrounds and its text block's look (about 35 of 150 links a chapter);
`test_link_sample_finds_what_the_whole_page_finds` plants links that only their colour tells from
the text, in paragraphs, list items and table cells. Tried once on every page in both themes with
such links planted in seven kinds of place (paragraphs, lists, tables, captions, admonitions,
navigation, definition lists): in the light theme the sample found every kind the whole page
found (in the dark theme those dark plants stand out from the light text, and neither found any).
"""

from __future__ import annotations

import functools

import pytest

from conftest import open_page, probe, site_pages

PAGES = site_pages()
SERIOUS = {"moderate", "serious", "critical"}

# One element of each kind of text, by everything the contrast ratio is computed from. An element
# counts when it holds text of its own or is a form control; ancestors' keys are cached. Then one link
# of each kind, for link-in-text-block (window.__linkSample).
SAMPLE_TARGETS = r"""
() => {
  const chains = new Map();
  const chain = (el) => {
    if (!el || el.nodeType !== 1) return '';
    if (chains.has(el)) return chains.get(el);
    const s = getComputedStyle(el);
    const key = [s.backgroundColor, s.backgroundImage, s.opacity, s.mixBlendMode, s.filter].join(';')
      + '<' + chain(el.parentElement);
    chains.set(el, key);
    return key;
  };
  const kinds = new Map();
  let texts = 0;
  for (const el of document.body.querySelectorAll('*')) {
    const own = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own && !el.matches('input, select, textarea, button')) continue;
    texts++;
    const s = getComputedStyle(el);
    const key = [s.color, s.fontSize, s.fontWeight, s.textShadow, s.visibility,
                 el.getClientRects().length > 0, chain(el)].join('|');
    if (!kinds.has(key)) kinds.set(key, el);
  }
  window.__contrastSample = Array.from(kinds.values());
  // Links: one of each kind by everything link-in-text-block compares (the link's colour, weight,
  // style, size, decoration, border and backgrounds, the same of the elements inside it, and its text
  // block's colour, weight, style and size); of each kind, the link with the most text of its block
  // around it.
  const look = (el) => { const s = getComputedStyle(el);
    return [el.tagName, s.color, s.fontWeight, s.fontStyle, s.fontSize, s.textDecorationLine,
            s.textDecorationStyle, s.borderBottomStyle, s.borderBottomWidth, s.borderBottomColor].join(','); };
  const block = (el) => {
    let b = el.parentElement;
    while (b && ['inline', 'contents'].includes(getComputedStyle(b).display)) b = b.parentElement;
    return b || document.body;
  };
  const links = new Map();
  for (const a of document.body.querySelectorAll('a[href], [role="link"]')) {
    const p = block(a), ps = getComputedStyle(p);
    const key = [look(a), Array.from(a.querySelectorAll('*'), look).join(';'), a.getClientRects().length > 0,
                 chain(a), ps.color, ps.fontWeight, ps.fontStyle, ps.fontSize].join('|');
    const around = p.textContent.length - a.textContent.length;
    if (!links.has(key) || links.get(key).around < around) links.set(key, {a, around});
  }
  window.__linkSample = Array.from(links.values(), v => v.a);
  return [texts, kinds.size];
}
"""

# Points the two rules at the samples: the sampled elements get an attribute, and axe.configure's
# `selector` replaces each rule's own (its `matches` test still applies), so that one axe.run over the
# whole page runs every rule, these two on the sample only. Three runs (every other rule; contrast on
# the sample's subtrees; links on the sample's) took 9.2 s on chapter 9, one run 4.4 s: each run walks
# the page again, and an included element brought its whole subtree into the contrast rule.
ON_SAMPLE = r"""
() => {
  window.__contrastSample.forEach(e => e.setAttribute('data-axe-contrast-sample', ''));
  window.__linkSample.forEach(e => e.setAttribute('data-axe-link-sample', ''));
  axe.configure({rules: [{id: 'color-contrast', selector: '[data-axe-contrast-sample]'},
                         {id: 'link-in-text-block', selector: '[data-axe-link-sample]'}]});
}
"""
EVERY_RULE = "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)"
# One rule over the whole page (unsampled, as long as ON_SAMPLE has not run).
ONE_RULE = (
    "(rule) => axe.run(document, {runOnly: {type: 'rule', values: [rule]}, resultTypes: ['violations']})"
    ".then(r => r.violations)"
)


@functools.cache
def axe_script() -> str:
    from axe_playwright_python.sync_playwright import Axe

    return Axe().axe_script


@probe("1280", "1280-dark", last=True)
def axe_violations(page, page_path: str) -> dict:
    """The theme the page is in, and axe's violations on it: every rule on the whole page, but
    color-contrast and link-in-text-block on their samples (see the module's docstring)."""
    page.evaluate(axe_script())
    found = sampled_violations(page)
    return {"theme": page.evaluate("document.documentElement.dataset.theme"), "violations": found}


def sampled_violations(page, rule: str | None = None) -> list[dict]:
    """axe's violations on a page with axe loaded: every rule (or only ``rule``) in one run over the
    whole page, color-contrast and link-in-text-block on their samples (SAMPLE_TARGETS, ON_SAMPLE)."""
    texts, kinds = page.evaluate(SAMPLE_TARGETS)
    assert 0 < kinds <= texts
    page.evaluate(ON_SAMPLE)
    return page.evaluate(EVERY_RULE) if rule is None else page.evaluate(ONE_RULE, rule)


def serious(found: list[dict]) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']}; first: {v['nodes'][0]['target']}"
        for v in found
        if v["impact"] in SERIOUS
    ]


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("page_path", PAGES)
def test_no_accessibility_violations(page_path, mode, visit):
    found = visit("1280" if mode == "light" else "1280-dark", page_path, axe_violations)
    assert found["theme"] == mode
    problems = serious(found["violations"])
    assert not problems, f"{page_path} ({mode}):\n  " + "\n  ".join(problems)


# Low-contrast text planted in three places the sample must reach: prose, a code token and an output.
PLANTS = {"p": "#c8c8c8", "div.cell_input pre span.n": "#d0d0d0", "div.cell_output pre": "#cccccc"}
PLANT = (
    "(plants) => { const s = document.createElement('style'); s.textContent = Object.entries(plants)"
    ".map(([sel, fg]) => `${sel} { color: ${fg} !important; background: #ffffff !important; }`).join(' ');"
    " document.head.append(s); }"
)
# For each violating node, the planted selectors it is inside of (text inherits the planted colour).
MATCHED = (
    "([found, sels]) => found.flatMap(v => v.nodes.map("
    "n => sels.filter(s => document.querySelector(n.target[0]).closest(s))))"
)


def test_contrast_sample_finds_what_the_whole_page_finds(browser, base_url):
    """On a chapter with prose, code and outputs, with low-contrast text planted in each: the whole page
    and the sample (as the accessibility test's run samples it) both find every plant, and neither finds
    anything else."""
    with open_page(browser, base_url, "book/01_why_position.html") as page:
        page.evaluate(axe_script())
        page.evaluate(PLANT, PLANTS)
        runs = {"whole page": page.evaluate(ONE_RULE, "color-contrast")}
        runs["sample"] = sampled_violations(page, "color-contrast")
        for run, violations in runs.items():
            matched = page.evaluate(MATCHED, [violations, list(PLANTS)])
            assert all(matched), f"{run}: a violation that was not planted"
            assert {s for m in matched for s in m} == set(PLANTS), f"{run}: a plant not found"


# Links made indistinguishable from their text (no underline, nearly the text's colour), planted in
# prose paragraphs, list items and table cells: places the link sample must reach.
LINK_PLANTS = {"section > p a[href]": "#2a2f38", "li a[href]": "#30343c", "td a[href]": "#262b33"}
LINK_PLANT = (
    "(plants) => { const s = document.createElement('style'); s.textContent = Object.entries(plants)"
    ".map(([sel, fg]) => `${sel} { color: ${fg} !important; text-decoration: none !important;"
    " border: none !important; font-weight: inherit !important; }`).join(' ');"
    " document.head.append(s); }"
)


@pytest.mark.parametrize("page_path", ["book/06_rope.html", "book/01_why_position.html"])
def test_link_sample_finds_what_the_whole_page_finds(page_path, browser, base_url):
    """link-in-text-block runs on one link of each kind (see SAMPLE_TARGETS): with links
    planted that only their colour, close to the text's, tells from the text, the whole page and the
    sample both find every kind of plant, and neither finds anything else."""
    with open_page(browser, base_url, page_path) as page:
        page.evaluate(axe_script())
        page.evaluate(LINK_PLANT, LINK_PLANTS)
        runs = {"whole page": page.evaluate(ONE_RULE, "link-in-text-block")}
        runs["sample"] = sampled_violations(page, "link-in-text-block")
        found = {}
        for run, violations in runs.items():
            matched = page.evaluate(MATCHED, [violations, list(LINK_PLANTS)])
            assert all(matched), f"{run}: a violation that was not planted"
            found[run] = {s for m in matched for s in m}
        planted = {s for s in LINK_PLANTS if page.locator(s).count()}
        assert planted and found["whole page"] == planted, f"the whole page found {found['whole page']} of {planted}"
        assert found["sample"] == planted, f"the sample found {found['sample']} of {planted}"

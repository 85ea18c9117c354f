"""axe-core (4.12.1, bundled by axe-playwright-python) finds no accessibility violation of impact
moderate or higher on any page of the site, in the light and the dark theme.

The fixes: book/_ext/accessibility.py (bibliography roles), book/_templates/navbar-logo.html (the
sidebar's book title inside a landmark), book/_static_files/book.css (link contrast in exercise
boxes).
"""

from __future__ import annotations

import pytest

from conftest import site_pages

PAGES = site_pages()
SERIOUS = {"moderate", "serious", "critical"}


@pytest.fixture(scope="module")
def axe():
    from axe_playwright_python.sync_playwright import Axe

    return Axe()


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("page_path", PAGES)
def test_no_accessibility_violations(page_path, mode, axe, browser, base_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}');")
    page = context.new_page()
    try:
        page.goto(base_url + page_path)
        page.wait_for_load_state("networkidle")
        if page.evaluate("document.querySelectorAll('.math').length"):
            page.evaluate("MathJax.startup.promise")
        assert page.evaluate("document.documentElement.dataset.theme") == mode
        violations = axe.run(page).response["violations"]
    finally:
        context.close()
    found = [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']}; first: {v['nodes'][0]['target']}"
        for v in violations
        if v["impact"] in SERIOUS
    ]
    assert not found, f"{page_path} ({mode}):\n  " + "\n  ".join(found)

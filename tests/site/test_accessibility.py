"""axe-core (4.12.1, bundled by axe-playwright-python) finds no accessibility violation of impact
moderate or higher on any page of the site, in the light and the dark theme.

The fixes: book/_ext/accessibility.py (bibliography roles), book/_templates/navbar-logo.html (the
sidebar's book title inside a landmark), book/_static_files/book.css (link contrast in exercise
boxes).
"""

from __future__ import annotations

import pytest

from conftest import open_page, site_pages

PAGES = site_pages()
SERIOUS = {"moderate", "serious", "critical"}


@pytest.fixture(scope="module")
def axe():
    from axe_playwright_python.sync_playwright import Axe

    return Axe()


@pytest.mark.parametrize("mode", ["light", "dark"])
@pytest.mark.parametrize("page_path", PAGES)
def test_no_accessibility_violations(page_path, mode, axe, browser, base_url):
    with open_page(browser, base_url, page_path, mode=mode) as page:
        assert page.evaluate("document.documentElement.dataset.theme") == mode
        violations = axe.run(page).response["violations"]
    found = [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']}; first: {v['nodes'][0]['target']}"
        for v in violations
        if v["impact"] in SERIOUS
    ]
    assert not found, f"{page_path} ({mode}):\n  " + "\n  ".join(found)

"""The visits kept between runs (conftest: VISIT_CACHE) are used only while everything a visit depends
on is byte for byte the same, and a visit that saw a problem is never kept. No browser needed: a small
site in a temporary folder stands in for the built one."""

from __future__ import annotations

import json

import pytest

from conftest import GUARDED, REQUESTED, code_digest, keep_visit, kept_visit, site_file_digest

CODE = code_digest("Chromium 1.0")


@pytest.fixture
def small_site(tmp_path):
    site = tmp_path / "html"
    (site / "book").mkdir(parents=True)
    (site / "_static").mkdir()
    (site / "book" / "a.html").write_text("<p>a</p>")
    (site / "_static" / "book.css").write_text("p { color: #222; }")
    (site / "_static" / "index.html").write_text("index")
    return site


def findings(requested, problems=(), failed=(), error=False) -> dict:
    found = {
        "test_x.probe": {"error": "TimeoutError: late"} if error else {"value": {"seen": 1}},
        GUARDED: {"value": {"problems": list(problems), "failed": list(failed)}},
        REQUESTED: {"value": sorted(requested)},
    }
    return json.loads(json.dumps(found))


REQUESTED_FILES = ["/book/a.html", "/_static/book.css?digest=abc", "/_static/logo.svg"]


def test_a_kept_visit_is_used_while_nothing_changed(small_site, tmp_path):
    cache = tmp_path / "cache" / "1280--book__a.html.json"
    found = findings(REQUESTED_FILES)
    keep_visit(cache, small_site, CODE, found, "book/a.html")
    assert kept_visit(cache, small_site, CODE) == found


def test_a_kept_visit_without_a_probe_this_run_registered_is_visited_again(small_site, tmp_path):
    # a run of one test module keeps visits with that module's probes only; a later run with more
    # modules must not read a missing probe from it (it raised KeyError)
    cache = tmp_path / "cache" / "1280--book__a.html.json"
    found = findings(REQUESTED_FILES)
    keep_visit(cache, small_site, CODE, found, "book/a.html")
    assert kept_visit(cache, small_site, CODE, [GUARDED, REQUESTED]) == found
    assert kept_visit(cache, small_site, CODE, [GUARDED, "test_other.some_probe"]) is None


@pytest.mark.parametrize(
    "change",
    ["the page", "a style sheet it asked for", "a file it asked for that was missing", "the code", "the record"],
)
def test_a_kept_visit_is_not_used_after_a_change(change, small_site, tmp_path):
    cache = tmp_path / "cache" / "1280--book__a.html.json"
    keep_visit(cache, small_site, CODE, findings(REQUESTED_FILES), "book/a.html")
    code = CODE
    if change == "the page":
        (small_site / "book" / "a.html").write_text("<p>b</p>")
    elif change == "a style sheet it asked for":
        (small_site / "_static" / "book.css").write_text("p { color: #ccc; }")
    elif change == "a file it asked for that was missing":
        (small_site / "_static" / "logo.svg").write_text("<svg/>")
    elif change == "the code":
        code = code_digest("Chromium 2.0")
    else:
        cache.write_text("{not json")
    assert kept_visit(cache, small_site, code) is None


def test_a_file_it_did_not_ask_for_does_not_matter(small_site, tmp_path):
    cache = tmp_path / "cache" / "1280--book__a.html.json"
    keep_visit(cache, small_site, CODE, findings(REQUESTED_FILES), "book/a.html")
    (small_site / "book" / "other.html").write_text("<p>other</p>")
    assert kept_visit(cache, small_site, CODE) is not None


@pytest.mark.parametrize(
    "trouble",
    [
        {"problems": ["console error: boom"]},
        {"failed": [{"url": "/x.js", "failure": "net::ERR_ABORTED", "at": "/book/a.html"}]},
        {"error": True},
    ],
)
def test_a_visit_that_saw_a_problem_is_not_kept(trouble, small_site, tmp_path):
    cache = tmp_path / "cache" / "1280--book__a.html.json"
    keep_visit(cache, small_site, CODE, findings(REQUESTED_FILES, **trouble), "book/a.html")
    assert not cache.exists()


def test_digest_of_an_address(small_site):
    css = site_file_digest(small_site, "/_static/book.css?digest=abc")
    assert css == site_file_digest(small_site, "/_static/book.css") != site_file_digest(small_site, "/book/a.html")
    assert site_file_digest(small_site, "/_static/") == site_file_digest(small_site, "/_static/index.html")
    assert site_file_digest(small_site, "/nothing.js") == "missing"
    assert site_file_digest(small_site, "/book/").startswith("folder:a.html")


def test_the_code_digest_follows_the_browser():
    assert code_digest("Chromium 1.0") == CODE != code_digest("Chromium 1.1")


@pytest.mark.parametrize(("page", "kept"), [("book/a.html", True), ("search.html", False)])
def test_the_search_index_counts_only_for_the_search_page(page, kept, small_site, tmp_path):
    """Any edited word changes the search index, which every page loads: it is part of the search
    page's key only (conftest: the search page's own visit fails if the index does not load)."""
    (small_site / "searchindex.js").write_text("Search.setIndex({})")
    (small_site / "search.html").write_text("<p>search</p>")
    cache = tmp_path / "cache" / "1280--page.json"
    keep_visit(cache, small_site, CODE, findings([f"/{page}", "/searchindex.js"]), page)
    (small_site / "searchindex.js").write_text("Search.setIndex({'terms': {}})")
    assert (kept_visit(cache, small_site, CODE) is not None) == kept

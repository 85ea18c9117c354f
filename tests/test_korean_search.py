"""Tests of the book's Korean search language (book/_ext/korean_search.py), the Python half.

The browser test (tests/site/test_reading.py) checks the JavaScript half through the site's
own search page.
"""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("korean_search", ROOT / "book" / "_ext" / "korean_search.py")
korean_search = importlib.util.module_from_spec(spec)
spec.loader.exec_module(korean_search)


# fmt: off
STEMS = [  # (word, stem), a noun per line (the formatter would put each pair on its own line)
    ("트랜스포머는", "트랜스포머"), ("트랜스포머의", "트랜스포머"), ("트랜스포머", "트랜스포머"),
    ("위치를", "위치"), ("위치에서", "위치"), ("위치로", "위치"), ("위치와", "위치"),
    ("회전으로", "회전"), ("회전은", "회전"), ("편향이", "편향"), ("거리만", "거리"),
    ("각도", "각도"), ("효과", "효과"), ("나는", "나는"),  # never fewer than two syllables left
]
# fmt: on


@pytest.mark.parametrize(("word", "stem"), STEMS)
def test_particles_are_removed(word, stem):
    assert korean_search.strip_particle(word) == stem


def test_search_language_stems_korean_and_english():
    language = korean_search.SearchKorean({})
    assert language.lang == "ko"
    assert language.stem("위치를") == "위치"
    assert language.stem("RoPE는") == "rope"  # particle off, then the English stemmer
    assert language.stem("caches") == language.stem("cache")
    assert language.stem("attention") == "attent"
    assert not language.word_filter("the")  # English stop words stay out of the index
    assert language.word_filter("위치")


def test_particles_are_tried_longest_first():
    lengths = [len(p) for p in korean_search.PARTICLES]
    assert lengths == sorted(lengths, reverse=True)
    assert korean_search.strip_particle("행렬에서는") == "행렬"

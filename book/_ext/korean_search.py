"""Sphinx extension: a Korean search language for the HTML full-text search.

Sphinx ships no Korean search language; its fallback indexes whole space-separated words, so
a search for 트랜스포머 misses a page that only says 트랜스포머는 or 트랜스포머의. Korean marks
grammatical roles with particles (조사) attached to the noun, so this language "stems" a word
by removing one trailing particle, in Python when the index is built and, identically, in the
JavaScript that the search page runs on the reader's query. Latin-script words (RoPE, KV,
cache, attention) get the English treatment: stop words and the Porter stemmer, the same
code Sphinx uses for English.

Only particles are removed, never verb endings, and only when at least two syllables remain
(so 각도, 효과, 회의 stay whole).
"""

from __future__ import annotations

import json
import re

import snowballstemmer
from sphinx.application import Sphinx
from sphinx.search import SearchLanguage
from sphinx.search.en import english_stopwords, js_porter_stemmer

# Particles, longest first so that 에서 is tried before 서-less 에. Kept in rows by length
# (the formatter would give each its own line).
# fmt: off
PARTICLES = sorted(
    {
        "은", "는", "이", "가", "을", "를", "의", "에", "로", "와", "과", "도", "만",
        "에서", "으로", "에게", "까지", "부터", "처럼", "보다", "이나", "이며", "이고", "이다",
        "에는", "에도", "으로는", "에서는", "에서도", "로는", "와는", "과는", "만큼", "마다",
        "다",  # the copula after a vowel: RoPE다, 행렬이다 -> 행렬이 -> (이) handled by 이다
    },
    key=lambda p: (-len(p), p),
)
# fmt: on
HANGUL = re.compile(r"[\uac00-\ud7a3]")
ASCII_WORD = re.compile(r"^[\x00-\x7f]+$")


def strip_particle(word: str) -> str:
    """Remove one trailing particle from a Korean word, keeping at least two syllables."""
    for particle in PARTICLES:
        if word.endswith(particle) and len(word) - len(particle) >= 2:
            return word[: -len(particle)]
    return word


# The same rules in JavaScript, for the reader's query. English words use Sphinx's own Porter
# stemmer (from sphinx.search.en), renamed so that this file's Stemmer can wrap it.
JS_STEMMER = (
    js_porter_stemmer.replace("var Stemmer = function", "var EnglishStemmer = function")
    + f"\nvar KOREAN_PARTICLES = {json.dumps(PARTICLES, ensure_ascii=False)};\n"
    + """var Stemmer = function() {
  var english = new EnglishStemmer();
  this.stemWord = function(w) {
    if (/^[\\x00-\\x7f]+$/.test(w)) return english.stemWord(w);
    if (/[\\uac00-\\ud7a3]/.test(w)) {
      for (var i = 0; i < KOREAN_PARTICLES.length; i++) {
        var p = KOREAN_PARTICLES[i];
        if (w.length - p.length >= 2 && w.slice(-p.length) === p) { w = w.slice(0, -p.length); break; }
      }
      if (/^[\\x00-\\x7f]+$/.test(w)) return english.stemWord(w);
    }
    return w;
  };
};
"""
)


class SearchKorean(SearchLanguage):
    lang = "ko"
    language_name = "Korean"
    stopwords = english_stopwords  # Korean text is indexed whole; English words as in English
    js_stemmer_code = JS_STEMMER

    def init(self, options: dict[str, str]) -> None:
        self.english = snowballstemmer.stemmer("porter")

    def stem(self, word: str) -> str:
        if ASCII_WORD.match(word):
            return self.english.stemWord(word.lower())
        if HANGUL.search(word):
            word = strip_particle(word)
            if ASCII_WORD.match(word):  # RoPE는 -> RoPE -> rope
                return self.english.stemWord(word.lower())
        return word


def setup(app: Sphinx) -> dict[str, object]:
    app.add_search_language(SearchKorean)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

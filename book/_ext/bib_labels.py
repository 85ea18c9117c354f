"""Sphinx extension: the bibliography labels read as the citations in the text do.

The text cites author and year (``bibtex_reference_style: author_year``: "[Vaswani et al., 2017]"),
but pybtex's plain style numbers the list ([1], [2], ...), so a reader who follows a citation
finds a number there. The formatting style ``authoryear`` registered here is pybtex's plain
style (same entries, same order: by author, year, title) with labels made like the citations:
one author "Dao, 2024", two "Abdin and others, 2024", more "Vaswani et al., 2017". Two works of
one author in one year carry a letter in their bibtex year (2024a, 2024b), so that the text's
citation and the list's label tell them apart alike.
"""

from __future__ import annotations

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx


def _last_name(person) -> str:
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def author_year(entry) -> str:
    """The citation text of an entry, as sphinxcontrib-bibtex's author_year style writes it."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons]
    if not names:
        who = entry.fields.get("organization") or entry.fields.get("title", "")
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    year = entry.fields.get("year", "")
    return f"{who}, {year}" if year else who


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            yield author_year(entry)


class AuthorYearStyle(PlainStyle):
    default_label_style = "authoryear"


register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)


def setup(app: Sphinx) -> dict[str, object]:
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

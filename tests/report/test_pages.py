"""The claims report as an HTML page (twoscale.report.pages): tables, inline HTML and links as a reader of the
report meets them, on Markdown written by hand."""

from __future__ import annotations

from html.parser import HTMLParser

from twoscale.report.pages import html_page

MARKDOWN = """# Claims per recipe

Seeds: huginn 1337.

| claim | huginn |
|---|---|
| [C1](../docs/claims.md#c1) | **reproduced**<br>gain 0.07 |
| [C7](#c7) | see [the paper](https://arxiv.org/abs/2510.14961) |
"""


class Cells(HTMLParser):
    """The text of each table cell, and each element's tag with its attributes, in document order."""

    def __init__(self):
        super().__init__()
        self.cells: list[str] = []
        self.elements: list[tuple[str, dict]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("|")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cells.append("".join(self._cell or []))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parsed(markdown: str) -> Cells:
    cells = Cells()
    cells.feed(html_page(markdown))
    return cells


def test_the_page_is_a_whole_document_titled_by_its_first_heading():
    page = html_page(MARKDOWN)
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>Claims per recipe</title>" in page
    assert '<meta charset="utf-8">' in page
    assert page.rstrip().endswith("</html>")


def test_a_markdown_table_becomes_an_html_table_with_line_breaks_kept():
    cells = parsed(MARKDOWN).cells
    assert cells == ["claim", "huginn", "C1", "reproduced|gain 0.07", "C7", "see the paper"]


def test_a_link_into_the_repository_keeps_its_text_and_names_the_file_while_others_stay_links():
    elements = parsed(MARKDOWN).elements
    links = [attrs["href"] for tag, attrs in elements if tag == "a"]
    assert links == ["#c7", "https://arxiv.org/abs/2510.14961"]
    spans = [attrs for tag, attrs in elements if tag == "span"]
    assert spans == [{"class": "repository-file", "title": "docs/claims.md#c1 in the repository"}]


def test_a_page_without_a_heading_has_an_empty_title_and_text_is_escaped():
    page = html_page("a < b & c\n")
    assert "<title></title>" in page
    assert "<p>a &lt; b &amp; c</p>" in page

"""A Markdown report as one HTML page that needs nothing beside it (Snakemake's report shows HTML inline and offers
Markdown only as a download). Links into the repository (relative paths) cannot be followed from such a page:
their text stays, with the file they name as its tooltip."""

from __future__ import annotations

import html
import re
from urllib.parse import urlparse

from markdown_it import MarkdownIt
from markdown_it.token import Token

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.2em; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0 1.6em; }
th, td { border: 1px solid #ccc; padding: 4px 7px; vertical-align: top; text-align: left; }
th { background: #f2f2f2; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
.repository-file { border-bottom: 1px dotted #888; }
"""


def _repository_path(href: str) -> str | None:
    """The repository file a link names, or None for a link a page can follow (a URL or an anchor of its own)."""
    if not href or href.startswith("#") or urlparse(href).scheme:
        return None
    return re.sub(r"^(\.\./|\./)+", "", href)


def _unlink_repository_files(tokens: list[Token]) -> None:
    """Turn each link to a repository file into a span carrying the file's name as its title."""
    for token in tokens:
        opened: list[bool] = []
        for child in token.children or []:
            if child.type == "link_open":
                path = _repository_path(str(child.attrGet("href") or ""))
                opened.append(path is not None)
                if path is not None:
                    child.type, child.tag = "repository_file_open", "span"
                    child.attrs = {"class": "repository-file", "title": f"{path} in the repository"}
            elif child.type == "link_close" and opened.pop():
                child.type, child.tag = "repository_file_close", "span"


def html_page(markdown: str) -> str:
    """The page of `markdown` (CommonMark with tables and inline HTML), titled by its first heading."""
    parser = MarkdownIt("commonmark", {"html": True}).enable("table")
    tokens = parser.parse(markdown)
    _unlink_repository_files(tokens)
    heading = next((tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"), "")
    body = parser.renderer.render(tokens, parser.options, {})
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(heading)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")

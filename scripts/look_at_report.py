"""Open a Snakemake report (`make report`) in headless Chromium as a reader would, and say what each entry shows.

Every category under the report's Results, every subcategory inside one, every entry: its view (the eye: an image
or, for the claims, a page) and its caption (the info pane, shown beside the view). One screenshot per entry, view
and caption together, lands in --out; a table of what was found goes to stdout. Exit 1, naming them, where an entry
shows nothing, its page is empty, it has no caption, or a category is empty.

Needs Playwright's Python package and a Chromium, neither a dependency of the project (docs/running.md#the-report):
  python3 -m venv /tmp/look && /tmp/look/bin/pip install playwright   # and Debian's chromium (apt-get install chromium)
  /tmp/look/bin/python scripts/look_at_report.py report.html --out /tmp/report-shots
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

EYE, INFO = "a[iconname='eye']", "a[iconname='information-circle']"
SETTLE_MS = 1200  # the report is a script-driven page: time for a click's result to be drawn


def open_at(page: Page, report: Path, path: list[str]) -> None:
    """The report's home page, then each name of `path` clicked in turn (a category, a subcategory)."""
    page.goto(report.resolve().as_uri())
    page.wait_for_selector("#app nav")
    for name in path:
        page.get_by_text(name, exact=True).first.click()
        page.wait_for_timeout(SETTLE_MS)


def categories(page: Page) -> list[str]:
    """The names the home page lists under RESULTS."""
    lines = [line.strip() for line in page.locator("#app nav").first.inner_text().splitlines() if line.strip()]
    return lines[[line.upper() for line in lines].index("RESULTS") + 1:]


def entry_rows(page: Page) -> list[str]:
    """The text of each entry row of the list shown (its title and labels)."""
    rows = page.locator("tr").filter(has=page.locator(EYE))
    return [" ".join(rows.nth(i).inner_text().split()) for i in range(rows.count())]


def listed_names(page: Page) -> list[str]:
    """The names of a list of subcategories."""
    return page.locator("#app nav").first.locator("div.p-3 li span").all_inner_texts()


def look_at_entry(page: Page, index: int, shot: Path) -> tuple[str, int, list[str]]:
    """Open entry `index` of the list shown, then its caption; what it shows, the caption's words, the defects."""
    page.locator(EYE).nth(index).click()
    page.wait_for_timeout(SETTLE_MS)
    defects = []
    view = page.locator("iframe, img").filter(has_not=page.locator("nav")).last
    box = view.bounding_box() if view.count() else None
    tag = view.evaluate("element => element.tagName.toLowerCase()") if box else ""
    if not box or box["width"] < 100 or box["height"] < 100 or tag not in ("img", "iframe"):
        defects.append("shows nothing")
    elif tag == "iframe" and len(page.frames[-1].inner_text("body").split()) < 50:
        defects.append("its page is empty")
    page.locator(INFO).nth(index).click()
    page.wait_for_timeout(SETTLE_MS)
    pane = page.locator("#app nav").first.inner_text()
    caption = re.search(r"^DESCRIPTION$(.*?)^(SIZE|SNAKEMAKE RULE)$", pane, re.S | re.M)
    words = len(caption.group(1).split()) if caption else 0
    if words < 20:
        defects.append("no caption beside it")
    page.screenshot(path=str(shot))
    return ("page" if tag == "iframe" else "image" if tag == "img" else "nothing"), words, defects


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="a folder for one screenshot per entry")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    if not args.report.is_file():
        print(f"{args.report}: no such report (make report writes one)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    problems = []
    print("| category | entry | shows | caption words | screenshot |\n|---|---|---|---|---|")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_at(page, args.report, [])
        for category in categories(page):
            open_at(page, args.report, [category])
            places = [[category]] if entry_rows(page) else [[category, name] for name in listed_names(page)]
            if not places:
                problems.append(f"{category}: empty")
            for path in places:
                open_at(page, args.report, path)
                rows = entry_rows(page)
                if not rows:
                    problems.append(f"{' / '.join(path)}: empty")
                for index, row in enumerate(rows):
                    open_at(page, args.report, path)
                    shot = args.out / f"{'-'.join(re.sub(r'[^a-z0-9]+', '_', p.lower()) for p in path)}-{index}.png"
                    shows, words, defects = look_at_entry(page, index, shot)
                    problems += [f"{' / '.join(path)}: {row}: {defect}" for defect in defects]
                    print(f"| {' / '.join(path)} | {row} | {shows} | {words} | {shot.name} |")
        browser.close()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

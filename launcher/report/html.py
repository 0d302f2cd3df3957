"""The report as one self-contained HTML page: styles inline, figures embedded
as data URIs, nothing fetched, so it opens offline and can be mailed around.
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from html import escape

from hpcai.launcher.report.tables import Table

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1360px; padding: 0 1em; color: #1d1d1f; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
.meta { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.82em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.45em; text-align: right; }
/* Wide tables fit the page: long paths and run ids wrap anywhere; numbers stay whole. */
td.long { overflow-wrap: anywhere; min-width: 14em; } td.num { white-space: nowrap; }
th { background: #eef2f7; } td:first-child, td:nth-child(2), th:first-child { text-align: left; }
td.best { font-weight: bold; background: #e4f6e4; } td.unenforced { color: #9a5b00; }
td.noisy { background: #fff4d6; } tr.reference td { color: #555; font-style: italic; }
.notes { color: #444; font-size: 0.85em; margin-top: 0; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #444; }
.scroll { overflow-x: auto; }
@media (max-width: 700px) { body { margin: 1em auto; } table { font-size: 0.75em; } }
"""

# Records whether every embedded figure decoded, which tables are wider than
# their box, and whether the page scrolls sideways: a headless browser reads them back.
CHECK_SCRIPT = """
window.addEventListener("load", function () {
  var images = document.images, decoded = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { decoded++; }
  }
  document.body.setAttribute("data-images-decoded", decoded + "/" + images.length);
  var wide = [], boxes = document.querySelectorAll("div.scroll");
  for (var j = 0; j < boxes.length; j++) {
    if (boxes[j].scrollWidth > boxes[j].clientWidth + 1) {
      wide.push(boxes[j].firstElementChild.getAttribute("data-table"));
    }
  }
  document.body.setAttribute("data-wide-tables", wide.join(","));
  document.body.setAttribute("data-page-width",
    document.documentElement.scrollWidth + "/" + window.innerWidth);
});
"""


@dataclass(frozen=True)
class Linked:
    """A line under the title that ends in a link to a file the report wrote beside
    itself (href: relative, made by the report, never from a result)."""

    text: str
    href: str

    def html(self) -> str:
        return f'{escape(self.text)} <a href="{escape(self.href)}">{escape(self.href)}</a>'

    def markdown(self) -> str:
        from hpcai.launcher.report.safe_text import md_text

        return f"{md_text(self.text)} [{md_text(self.href)}]({self.href})"


def meta_html(line) -> str:
    return line.html() if isinstance(line, Linked) else escape(line)
CODE_SPAN = re.compile(r"`([^`]+)`")


def prose(text: str) -> str:
    """Notes and paragraphs as the Markdown page shows them: escaped, and a `command`
    set as code instead of its raw backticks."""
    return CODE_SPAN.sub(r"<code>\1</code>", escape(text))


def _long_word(text: str) -> bool:
    """A word that would hold its column wider than the page (a path, a run id)."""
    return any(len(word) > 24 for word in text.split())


def table_html(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.header)
    rows = []
    for row in table.rows:
        reference = any(c.reference for c in row)
        cells = []
        for c in row:
            classes = [name for name, on in (("best", c.best), ("unenforced", c.unenforced),
                                             ("noisy", c.noisy), ("num", c.value is not None and " " not in c.text),
                                             ("long", _long_word(c.text))) if on]
            attr = f' class="{" ".join(classes)}"' if classes else ""
            cells.append(f"<td{attr}>{escape(c.text)}</td>")
        cls = ' class="reference"' if reference else ""
        rows.append(f"<tr{cls}>{''.join(cells)}</tr>")
    notes = "".join(f"<li>{prose(n)}</li>" for n in table.notes)
    return (f'<h3>{escape(table.title)}</h3>\n<div class="scroll"><table data-table="{table.key}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>\n"
            + (f'<ul class="notes">{notes}</ul>\n' if notes else ""))


def figure_html(plot) -> str:
    data = base64.b64encode(plot.png.read_bytes()).decode("ascii")
    return (f'<figure data-plot="{escape(plot.name)}"><img alt="{escape(plot.title)}" '
            f'src="data:image/png;base64,{data}">'
            f"<figcaption><b>{escape(plot.title)}.</b> {prose(plot.caption)}</figcaption></figure>\n")


def page(title: str, meta: list[str], sections: list[tuple[str, list]]) -> str:
    """sections: (heading, [Table | Plot | str paragraph])."""
    body = [f"<h1>{escape(title)}</h1>",
            '<div class="meta">' + "<br>".join(meta_html(m) for m in meta) + "</div>"]
    for heading, items in sections:
        if not items:
            continue
        body.append(f"<h2>{escape(heading)}</h2>")
        for item in items:
            if isinstance(item, Table):
                body.append(table_html(item))
            elif isinstance(item, str):
                body.append(f"<p>{prose(item)}</p>")
            else:
                body.append(figure_html(item))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{STYLE}</style>"
            f"<script>{CHECK_SCRIPT}</script></head>\n<body>\n" + "\n".join(body)
            + "\n</body></html>\n")

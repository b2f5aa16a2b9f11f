"""``icir leaderboard build``: a static leaderboard site from a leaderboard folder.

The site works from ``file://``, GitHub Pages or a static Hugging Face Space: plain HTML files,
inline CSS and JavaScript, local PNGs, nothing fetched from the network::

    index.html                    the table: one row per submission, sortable, filterable by family;
                                  below it the external retrievers (``retrievers/*.json``), if any
    models/<page>.html            one page per submission: figures, protocol, deviations
    models/<page>/*.png           its figures (`harness.plots`)
    leaderboard.json              the rows (sorted keys), in the table's order
    leaderboard.parquet           the rows' scalar fields, one column each
    retrievers.json               the external-retriever rows (only when there are any)

Every file is a pure function of the leaderboard folder: the same submissions give the same
bytes (no timestamps, sorted iteration, PNGs without a Software chunk). Every submitted string
is HTML-escaped; the table sorts from the DOM, so no submitted data sits inside a script, and a
Content-Security-Policy admits only the page's own script and style (by hash) as a second fence.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.constants import TOP_K_SETS
from harness.leaderboard.entries import (
    COLUMNS,
    VERIFIED,
    Entry,
    load_entry,
    submission_folders,
    verification_path,
    vhs_columns,
)
from harness.leaderboard.retrievers import retriever_rows
from harness.leaderboard.validate import load_config, validate
from harness.protocol import PROTOCOL
from icir_common import BUILD_MARKER, UserInputError, atomic_file, atomic_output_dir, build_kind, check_out_dir

SITE_KIND = "leaderboard-site"
INDEX, ROWS_JSON, ROWS_PARQUET, MODELS = "index.html", "leaderboard.json", "leaderboard.parquet", "models"
RETRIEVERS_JSON = "retrievers.json"  # the external-retriever rows, when the leaderboard has any
MISSING = "\u2013"  # en dash
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_PAGE_NAME = 120  # well under the 255-byte file-name limit, with room for the hash suffix

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 1.5rem;
       color: #1b1f24; background: #fff; }
h1 { font-size: 1.5rem; margin: 0 0 .5rem; }
h2 { font-size: 1.15rem; margin-top: 1.75rem; }
a { color: #0b5cad; }
.controls { margin: .75rem 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .85rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; vertical-align: top; }
td { white-space: nowrap; }
td.model { white-space: normal; min-width: 12rem; max-width: 22rem; overflow-wrap: anywhere; }
thead th { background: #f3f5f7; position: sticky; top: 0; }
th button { all: unset; cursor: pointer; font-weight: 600; }
th button:focus-visible { outline: 2px solid #0b5cad; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; }
th[aria-sort="descending"] button::after { content: " \\25BC"; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #fafbfc; }
.badge { display: inline-block; padding: .05rem .45rem; border-radius: .7rem; font-size: .75rem;
         font-weight: 600; white-space: nowrap; }
.badge.verified { background: #dafbe1; color: #116329; border: 1px solid #4ac26b; }
.badge.self-reported { background: #fff8c5; color: #7d4e00; border: 1px solid #d4a72c; }
.meta { color: #57606a; font-size: .75rem; display: block; }
.figures { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; }
figcaption { font-size: .8rem; color: #57606a; }
img { max-width: 100%; height: auto; border: 1px solid #d0d7de; }
dl { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; font-size: .9rem; }
dt { font-weight: 600; }
dd { margin: 0; }
footer { margin-top: 2rem; font-size: .8rem; color: #57606a; max-width: 60rem; }
pre { background: #f6f8fa; padding: .5rem; overflow-x: auto; font-size: .8rem; }
"""

# Sorts and filters the rows already in the DOM: each cell's data-sort holds its value (absent when
# missing), each numeric header data-type="number". Missing values stay last in both directions.
_SCRIPT = """
(function () {
  "use strict";
  var table = document.getElementById("board");
  var body = table.tBodies[0];
  var headers = Array.prototype.slice.call(table.tHead.rows[0].cells);
  var current = {column: -1, descending: false};
  function value(row, column, numeric) {
    var cell = row.cells[column];
    if (!cell.hasAttribute("data-sort")) { return null; }
    var text = cell.getAttribute("data-sort");
    return numeric ? parseFloat(text) : text;
  }
  function sortBy(column) {
    var numeric = headers[column].getAttribute("data-type") === "number";
    var descending = current.column === column ? !current.descending : numeric;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a, column, numeric), y = value(b, column, numeric);
      if (x === null || y === null) { return (x === null) - (y === null); }
      var order = numeric ? x - y : x.localeCompare(y);
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    headers.forEach(function (header, index) {
      if (index === column) {
        header.setAttribute("aria-sort", descending ? "descending" : "ascending");
      } else {
        header.removeAttribute("aria-sort");
      }
    });
    current = {column: column, descending: descending};
  }
  headers.forEach(function (header, index) {
    header.addEventListener("click", function () { sortBy(index); });
  });
  var family = document.getElementById("family");
  var shown = document.getElementById("shown");
  family.addEventListener("change", function () {
    var count = 0;
    Array.prototype.forEach.call(body.rows, function (row) {
      row.hidden = family.value !== "" && row.getAttribute("data-family") !== family.value;
      count += row.hidden ? 0 : 1;
    });
    shown.textContent = count + " of " + body.rows.length + " submissions shown";
  });
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _head(title: str, script: bool) -> str:
    """``<head>`` of a page; its policy admits exactly `_STYLE` (and `_SCRIPT` when `script`)."""
    scripts = _csp_hash(_SCRIPT) if script else "'none'"
    policy = (f"default-src 'none'; img-src 'self'; style-src {_csp_hash(_STYLE)}; script-src {scripts}; "
              "base-uri 'none'; form-action 'none'")
    return (f'<head>\n<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta name="referrer" content="no-referrer">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n")


def page_name(key: str, taken: set[str]) -> str:
    """A safe, unique file stem for entry `key` (``org__model/revision`` -> ``org__model--revision``).

    Characters outside ``[A-Za-z0-9._-]`` become ``_``, and a name that had to change (or that
    is already in `taken`) gets the first 10 hex digits of the key's sha256, so two keys never
    share a page. The result is added to `taken`.
    """
    plain = key.replace("/", "--")
    name = _UNSAFE.sub("_", plain).lstrip(".")[:_MAX_PAGE_NAME] or "entry"
    if name != plain or name in taken:
        name = f"{name}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:10]}"
    taken.add(name)
    return name


def format_value(value: Any) -> str:
    """A table cell's text: floats with 3 decimals, None as an en dash, everything else as ``str``."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _sort_order(entry: Entry) -> tuple:
    """ICIR-MCQ pointer R@1 descending (missing last), then the key."""
    r1 = entry.row.get("pointer_r1")
    return (r1 is None, -(r1 or 0.0), entry.key)


def build_site(leaderboard: str | os.PathLike, out: str | os.PathLike,
               config: Mapping[str, Any] | None = None) -> Path:
    """Validate every submission of `leaderboard` and write the static site to `out`.

    Args:
        leaderboard: a folder laid out as `harness.leaderboard.entries` describes
            (``results/<org__model>/<revision>/``, optional ``verifications/``), and optional
            external-retriever records ``retrievers/*.json`` (`harness.leaderboard.retrievers`).
        out: the site folder; it may be absent, empty, or an earlier build of this command
            (replaced whole). Written through a temporary folder beside it and renamed, so a
            failed build leaves `out` as it was.
        config: the leaderboard config of `validate` (`load_config`), or None.

    Returns:
        The path of the site's ``index.html``.

    Raises:
        UserInputError: a malformed leaderboard folder, a submission that fails validation
            (naming it and its first failure; nothing is written), a submission folder that is
            not where its manifest says it belongs, a retriever record that fails its check
            (`retriever_rows`), `out` overlapping `leaderboard`, or `out` holding anything but an
            earlier site build.
    """
    leaderboard, out = Path(leaderboard), Path(out)
    _check_out(out, leaderboard)
    folders = submission_folders(leaderboard)
    for folder in folders:
        failures = validate(folder, config).failures
        if failures:
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise UserInputError(f"{folder} does not validate: {failures[0]}{more}; run icir leaderboard validate "
                                 "on it, fix or remove it; nothing was written")
    entries = []
    for folder in folders:
        key = folder.relative_to(leaderboard / "results").as_posix()
        entry = load_entry(folder, verification_path(leaderboard, key))
        if entry.key != key:
            raise UserInputError(f"{folder} holds the submission of {entry.key}; move it to results/{entry.key}/")
        entries.append(entry)
    entries.sort(key=_sort_order)
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        out.rmdir()  # an empty folder is as good as none; atomic_output_dir replaces only marked builds
    retrievers = retriever_rows(leaderboard)
    with atomic_output_dir(out, overwrite=True, kind=SITE_KIND, inputs=[("SUBMISSIONS_DIR", leaderboard)]) as tmp:
        _write_site(tmp, entries, retrievers)
    return out / INDEX


def _check_out(out: Path, leaderboard: Path) -> None:
    """Refuse an `out` overlapping `leaderboard` or that is neither absent, nor empty, nor an earlier site build."""
    check_out_dir(out, [("SUBMISSIONS_DIR", leaderboard)])
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and not out.is_symlink():
        if not any(out.iterdir()) or build_kind(out) == SITE_KIND:
            return
    raise UserInputError(f"--out {out} exists and is not an earlier leaderboard site (no {BUILD_MARKER} of kind "
                         f"{SITE_KIND!r}); choose another --out or remove it yourself")


def _write_site(root: Path, entries: list[Entry], retrievers: list[dict[str, Any]]) -> None:
    taken: set[str] = set()
    pages = [page_name(entry.key, taken) for entry in entries]
    sizes = sorted({n for entry in entries for n in entry.row["vhs_sizes"]})
    columns = list(COLUMNS) + vhs_columns(sizes)
    for entry, page in zip(entries, pages):
        _write_model_page(root / MODELS, page, entry)
    _write_text(root / INDEX, _index_html(entries, pages, columns, retrievers))
    rows = [{"key": entry.key, "page": f"{MODELS}/{page}.html", **entry.row} for entry, page in zip(entries, pages)]
    _write_text(root / ROWS_JSON, json.dumps(rows, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    _write_parquet(root / ROWS_PARQUET, rows)
    if retrievers:
        _write_text(root / RETRIEVERS_JSON, json.dumps(retrievers, indent=2, sort_keys=True) + "\n")


def _write_text(path: Path, text: str) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    """The scalar fields of `rows` as columns (sorted names): bool, int64, float64, string, or null (no value yet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def scalar(value: Any) -> bool:
        return value is None or isinstance(value, (str, int, float))

    every = {name for row in rows for name in row}
    names = sorted(name for name in every if all(scalar(row.get(name)) for row in rows))
    fields, arrays = [], []
    for name in names:
        values = [row.get(name) for row in rows]
        present = [v for v in values if v is not None]
        if not present:  # nobody submitted it yet: typed by its first value once there is one
            kind = pa.null()
        elif all(isinstance(v, bool) for v in present):
            kind = pa.bool_()
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            kind = pa.int64()
        elif all(_is_number(v) for v in present):
            kind, values = pa.float64(), [None if v is None else float(v) for v in values]
        else:
            kind, values = pa.string(), [None if v is None else str(v) for v in values]
        fields.append(pa.field(name, kind))
        arrays.append(pa.array(values, type=kind))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    with atomic_file(path) as tmp:
        pq.write_table(table, tmp)


def _cell(column: str, entry: Entry, page: str) -> str:
    row = entry.row
    value = row.get(column)
    sort = "" if value is None else f' data-sort="{html.escape(repr(value) if _is_number(value) else str(value))}"'
    if column == "model":
        extra = []
        if row.get("submitter"):
            extra.append(f'<span class="meta">by {html.escape(row["submitter"])}</span>')
        if row.get("link"):  # validate's schema admits only http(s):// links, so no javascript: URL
            extra.append(f'<a class="meta" href="{html.escape(row["link"])}" rel="nofollow noopener noreferrer">'
                         f"{html.escape(row['link'])}</a>")
        text = f'<a class="model-name" href="{MODELS}/{page}.html">{html.escape(str(value))}</a>' + "".join(extra)
        return f'<td class="model"{sort}>{text}</td>'
    if column == "badge":
        kind = "verified" if value == VERIFIED else "self-reported"
        return f'<td{sort}><span class="badge {kind}">{html.escape(str(value))}</span></td>'
    number = ' class="number"' if _is_number(value) else ""
    return f"<td{number}{sort}>{html.escape(format_value(value))}</td>"


def _retrievers_html(rows: list[dict[str, Any]], entries: list[Entry]) -> str:
    """The external-retriever table (Table 2's right half), each row naming the submissions that
    evaluated the same documents (equal dataset fingerprint)."""
    if not rows:
        return ""
    body = ""
    for row in rows:
        same = [entry.row["model"] for entry in entries
                if entry.row["dataset_fingerprints"].get(row["task"]) == row["fingerprint"]]
        cells = [html.escape(row["retriever"]), html.escape(row["kind"]), html.escape(row["task"]),
                 str(row["documents"]), format_value(row["r1"]), html.escape(", ".join(same) or MISSING)]
        body += "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>\n"
    heads = "".join(f'<th scope="col">{h}</th>' for h in
                    ("Retriever", "Kind", "Task", "Documents", "R@1", "Same documents as"))
    return ("<h2>External retrievers</h2>\n<p>Text-to-image retrieval R@1 inside each Visual Haystacks haystack "
            "(anchor query against every image, cosine, argmax; §4.3, Table 2), recomputed from each haystack's "
            "pick, beside the submissions that evaluated the same documents.</p>\n"
            f'<div class="scroll"><table id="retrievers">\n<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}'
            "</tbody>\n</table></div>\n")


def _index_html(entries: list[Entry], pages: list[str], columns: list[tuple[str, str]],
                retrievers: list[dict[str, Any]]) -> str:
    numeric = {column for column, _ in columns
               if any(_is_number(e.row.get(column)) for e in entries)
               and all(e.row.get(column) is None or _is_number(e.row.get(column)) for e in entries)}
    heads = "".join(f'<th scope="col" data-column="{html.escape(column)}"'
                    + (' data-type="number"' if column in numeric else "")
                    + f'><button type="button">{html.escape(heading)}</button></th>' for column, heading in columns)
    body = "".join(f'<tr data-key="{html.escape(entry.key)}" data-family="{html.escape(str(entry.row["family"]))}">'
                   + "".join(_cell(column, entry, page) for column, _ in columns) + "</tr>\n"
                   for entry, page in zip(entries, pages))
    families = sorted({str(entry.row["family"]) for entry in entries})
    options = "".join(f'<option value="{html.escape(f)}">{html.escape(f)}</option>' for f in families)
    protocols = sorted({str(entry.row["protocol"]) for entry in entries}) or [PROTOCOL]
    off = sum(1 for entry in entries if not entry.row["on_protocol"])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n" + _head("ICIR heads leaderboard", script=True)
        + "<body>\n<h1>Image-retrieval heads leaderboard</h1>\n"
        "<p>Pointer and writer heads of vision-language models on ICIR-MCQ and Visual Haystacks. "
        "Click a column heading to sort (again to reverse); a model's name opens its figures.</p>\n"
        f'<div class="controls"><label for="family">Family</label> <select id="family">'
        f'<option value="">all families</option>{options}</select> '
        f'<span id="shown">{len(entries)} of {len(entries)} submissions shown</span></div>\n'
        f'<div class="scroll"><table id="board">\n<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}</tbody>\n'
        "</table></div>\n"
        + _retrievers_html(retrievers, entries)
        + "<footer>\n"
        f"<p>Protocol: {html.escape(', '.join(protocols))}; {off} of {len(entries)} submissions deviate from it "
        "(see each model's page). <span class=\"badge verified\">verified</span>: a reviewer's "
        "verification record passed for this exact submission.json; "
        "<span class=\"badge self-reported\">self-reported</span>: the validator recomputed every number "
        "from the submitted per-document records, nobody reran the model.</p>\n"
        "<p>Pointer R@1 is the best head's R@1 under the run's ranking score, Eq. 3 on protocol icir-heads/2 "
        "(a run ranked otherwise lists it among its deviations; on VHs: the transferred ICIR-MCQ "
        "head's, scored as it was ranked, which equals the K = 1 vote); the exact column scores the model's "
        "attention rows (Eq. 1). "
        "Chance levels: pointer R@1 on ICIR-MCQ is the mean of 1/N over documents with N candidate "
        "images; writer R@1 is 1/pool size (both on each model's heatmaps); the pointer-writer overlap@K "
        f"of two top-K sets of the L·H heads has overlap chance K²/(L·H), K = min({TOP_K_SETS}, L·H). "
        "Values are shown with 3 decimals; "
        f"{MISSING} means not submitted.</p>\n"
        "</footer>\n"
        f"<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )


def _figure(src: str, caption: str) -> str:
    return (f'<figure><img src="{html.escape(src)}" alt="{html.escape(caption)}" width="640" height="480">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _figures(folder: Path, page: str, entry: Entry) -> tuple[list[str], list[str]]:
    """``(ICIR-MCQ figures, VHs vote figures)`` of `entry` as HTML, their PNGs drawn into `folder`."""
    from harness.plots import plot_head_grid, plot_pointer_vs_writer, plot_vote_curves

    grids, chance = entry.grids, entry.chance
    heads = []
    for name, title, chance_value in (("pointer_exact", "pointer R@1 per head (exact, Eq. 1)", chance["pointer"]),
                                      ("pointer_eq3", "pointer R@1 per head (Eq. 3)", chance["pointer"]),
                                      ("writer", "writer R@1 per head", chance["writer"])):
        if grids[name] is not None:
            path = folder / f"{name}.png"
            plot_head_grid(np.asarray(grids[name], dtype=float), path, title, chance_value)
            heads.append(_figure(f"{page}/{path.name}", f"L x H heatmap: {title}"))
    pointer = grids.get(f"pointer_{entry.row['pointer_score']}")  # the score pointer_r1 and the overlap use
    if pointer is not None and grids["writer"] is not None:
        path = folder / "pointer_vs_writer.png"
        plot_pointer_vs_writer(np.asarray(pointer, dtype=float), np.asarray(grids["writer"], dtype=float),
                               path, top_k=entry.row["overlap_k"], pointer_chance=chance["pointer"])
        heads.append(_figure(f"{page}/{path.name}", "pointer R@1 vs writer R@1 per head (top-K sets)"))
    votes = []
    for task in sorted(entry.vote_curves):
        curves = {label: curve for label, curve in sorted(entry.vote_curves[task].items()) if curve}
        path = folder / f"vote_{_UNSAFE.sub('_', task)}.png"
        plot_vote_curves({f"{label} ranking": curve for label, curve in curves.items()}, path)
        votes.append(_figure(f"{page}/{path.name}", f"{task}: top-K majority-vote R@1 ({', '.join(curves)} ranking)"))
    return heads, votes


def _write_model_page(models: Path, page: str, entry: Entry) -> None:
    row = entry.row
    heads, votes = _figures(models / page, page, entry)
    facts = [("Model", row["model"]), ("Revision", row["revision"]), ("Family", row["family"]),
             ("Architecture", row["architecture"]), ("Parameters", f"{row['n_parameters']:,}"),
             ("L x H", row["shape"]), ("Status", row["badge"]), ("Submitter", row.get("submitter")),
             ("Protocol", row["protocol"]), ("On protocol", "yes" if row["on_protocol"] else "no")]
    facts += [(heading, format_value(row.get(column))) for column, heading in COLUMNS
              if column not in {"model", "revision", "family", "badge", "shape"}]
    facts += [(heading, format_value(row.get(column))) for column, heading in vhs_columns(row["vhs_sizes"])]
    listing = "".join(f"<dt>{html.escape(name)}</dt><dd>{html.escape(format_value(value))}</dd>"
                      for name, value in facts)
    if row.get("link"):
        listing += (f'<dt>Link</dt><dd><a href="{html.escape(row["link"])}" rel="nofollow noopener noreferrer">'
                    f"{html.escape(row['link'])}</a></dd>")
    deviations = "".join(f"<li>{html.escape(str(line))}</li>" for line in row["deviations"])
    dose = "<p>No ablation submitted.</p>"
    if entry.dose_response is not None:
        from harness.ablation.results import plot_dose_response
        from harness.ablation.stats import CellStats

        path = models / page / "dose_response.png"
        plot_dose_response([CellStats.from_row(r) for r in entry.dose_response], path)
        dose = _figure(f"{page}/{path.name}", "accuracy of each arm and of the random controls (mean, +-1 sd) "
                                               "against the number of heads ablated")
    text = (
        "<!DOCTYPE html>\n<html lang=\"en\">\n" + _head(f"{row['model']} ({row['revision']}): ICIR heads", script=False)
        + "<body>\n<p><a href=\"../index.html\">\u2190 leaderboard</a></p>\n"
        f"<h1>{html.escape(str(row['model']))}</h1>\n"
        f'<p><span class="badge {"verified" if row["badge"] == VERIFIED else "self-reported"}">'
        f"{html.escape(str(row['badge']))}</span></p>\n"
        f"<dl>{listing}</dl>\n"
        "<h2>Protocol deviations</h2>\n"
        + (f"<ul>{deviations}</ul>\n" if deviations else "<p>None: the run followed the protocol.</p>\n")
        + "<h2>ICIR-MCQ heads</h2>\n"
        + (f'<div class="figures">{"".join(heads)}</div>\n' if heads else "<p>No ICIR-MCQ unit submitted.</p>\n")
        + "<h2>VHs vote curves</h2>\n"
        + (f'<div class="figures">{"".join(votes)}</div>\n' if votes else "<p>No VHs task submitted.</p>\n")
        + f"<h2>Ablation dose-response</h2>\n{dose}\n</body>\n</html>\n"
    )
    _write_text(models / f"{page}.html", text)


def register_build(actions: argparse._SubParsersAction) -> None:
    """Add ``icir leaderboard build SUBMISSIONS_DIR --out SITE [--config LEADERBOARD.json]`` to `actions`."""
    build = actions.add_parser("build", help="validate every submission and write the static leaderboard site",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("submissions", type=Path, metavar="SUBMISSIONS_DIR",
                       help="a leaderboard folder: results/<org__model>/<revision>/ (and verifications/)")
    build.add_argument("--out", type=Path, required=True, metavar="SITE",
                       help=f"the site folder (absent, empty, or an earlier build: it holds {BUILD_MARKER})")
    build.add_argument("--config", type=Path, metavar="LEADERBOARD.json",
                       help=f"the leaderboard config of icir leaderboard validate (default: protocol {PROTOCOL})")
    build.set_defaults(func=run_build)


def run_build(args: argparse.Namespace) -> int:
    """``icir leaderboard build``: build the site, print the path of its ``index.html``."""
    index = build_site(args.submissions, args.out, load_config(args.config))
    print(f"leaderboard: {index}")
    return 0

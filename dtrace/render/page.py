"""HTML building blocks of the reports: the page shell (inline CSS and script), tables, notices.

Everything is inline: the page needs no network. The only script makes tables sortable by
clicking a header and marks ``<body data-ready="1">`` when it has run (the browser tests check
it). Values keep their raw number in ``data-v`` so sorting is numeric while cells show units.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

import numpy as np
import pandas as pd

from .._version import __version__
from . import charts as ch
from .text import distinct_names

# ---------------------------------------------------------------------------------------------
# page shell

CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2329;background:#f4f5f7}
header.top{background:#1f2d3d;color:#fff;padding:18px 28px}
header.top h1{margin:0;font-size:22px;font-weight:600}
header.top .sub{opacity:.75;font-size:13px;margin-top:4px}
nav{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid #dde1e6;padding:6px 28px;
  display:flex;flex-wrap:wrap;gap:4px 14px;font-size:13px}
nav a{color:#2a5d9f;text-decoration:none}
nav a:hover{text-decoration:underline}
main{max-width:1640px;margin:0 auto;padding:10px 18px 60px}
section{background:#fff;border:1px solid #dde1e6;border-radius:8px;margin:18px 0;padding:14px 20px}
section h2{margin:2px 0 10px;font-size:18px}
section h3{margin:16px 0 6px;font-size:15px}
p.note{color:#555;font-size:13px;margin:4px 0 8px}
p.na{color:#8a5a00;background:#fff8e6;border-left:3px solid #e0a800;padding:6px 10px;margin:6px 0}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:6px 0 10px}
.card{border:1px solid #dde1e6;border-radius:6px;padding:8px 12px;min-width:130px;background:#fafbfc}
.card .v{font-size:19px;font-weight:600}
.card .k{font-size:12px;color:#555}
.card.warn{border-color:#e15759;background:#fdf1f1}
.card .ids{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#8a1f21;margin-top:3px;max-width:260px}
figure.chart{margin:8px 0 12px;overflow-x:auto}
figure.chart figcaption{font-size:12px;color:#555;margin-top:2px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:2px 0 4px}
.legend .key i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
svg rect.mark:hover{opacity:.75}
.tablewrap{overflow-x:auto;max-height:560px;overflow-y:auto;margin:6px 0 10px}
table.data{border-collapse:collapse;font-size:12.5px;width:100%}
table.data th{position:sticky;top:0;background:#eef1f5;text-align:left;padding:5px 8px;cursor:pointer;
  vertical-align:bottom;border-bottom:1px solid #cfd5dc;user-select:none}
table.data th[data-dir=asc]::after{content:' \\25B2'}
table.data th[data-dir=desc]::after{content:' \\25BC'}
table.data td{padding:4px 8px;border-bottom:1px solid #eceff2;vertical-align:top}
table.data td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.data tr.flag td{background:#fdf1f1}
table.data td.hot{background:#f8d4d4}
table.data td.cold{background:#d7e6f7}
table.data tr.flag td.hot{background:#f4b6b6}
table.data tr.flag td.cold{background:#c4daf2}
td.evidence{min-width:360px}
table.data td:first-child{white-space:nowrap}
table.data td.nm{max-width:460px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
details{margin:6px 0}
code{font-size:12px}
"""

JS = """
(function(){
  function key(td){var v=td.getAttribute('data-v');if(v===null){v=td.textContent;}
    var x=parseFloat(v);return isNaN(x)?{s:v.toLowerCase()}:{n:x};}
  function sortBy(table,col,th){
    var body=table.tBodies[0];if(!body){return;}
    var rows=Array.prototype.slice.call(body.rows);
    var dir=th.getAttribute('data-dir')==='desc'?'asc':'desc';
    var heads=table.tHead.rows[0].cells;
    for(var i=0;i<heads.length;i++){heads[i].removeAttribute('data-dir');}
    th.setAttribute('data-dir',dir);
    rows.sort(function(a,b){var x=key(a.cells[col]),y=key(b.cells[col]);var r;
      if(x.n!==undefined&&y.n!==undefined){r=x.n-y.n;}
      else{var s=(x.s!==undefined?x.s:String(x.n)),t=(y.s!==undefined?y.s:String(y.n));r=s<t?-1:(s>t?1:0);}
      return dir==='asc'?r:-r;});
    for(var j=0;j<rows.length;j++){body.appendChild(rows[j]);}
  }
  var tables=document.querySelectorAll('table.sortable');
  for(var t=0;t<tables.length;t++){(function(table){
    if(!table.tHead){return;}
    var heads=table.tHead.rows[0].cells;
    for(var c=0;c<heads.length;c++){(function(th,col){
      th.title='click to sort';th.addEventListener('click',function(){sortBy(table,col,th);});
    })(heads[c],c);}
    table.setAttribute('data-sortable','ready');
  })(tables[t]);}
  document.body.setAttribute('data-ready','1');
})();
"""


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole HTML document: header, a navigation bar, one ``<section>`` per entry.

    ``sections`` holds ``(id, heading, body_html)``.
    """
    nav = "".join(f'<a href="#{escape(sid)}">{escape(head)}</a>' for sid, head, _ in sections)
    body = "".join(
        f'<section id="{escape(sid)}"><h2>{escape(head)}</h2>{html}</section>' for sid, head, html in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="dtrace {escape(__version__)}">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<header class="top"><h1>{escape(title)}</h1><div class="sub">{escape(subtitle)}</div></header>'
        f"<nav>{nav}</nav><main>{body}</main><script>{JS}</script></body></html>\n"
    )


# ---------------------------------------------------------------------------------------------
# small HTML helpers


def na(table: str, why: str = "") -> str:
    """The standard notice for a section or chart whose table is missing."""
    return f'<p class="na">not available ({escape(why or f"table {table} absent")})</p>'


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def cards(items: Sequence[tuple]) -> str:
    """Key figures: ``(label, value[, warn[, ids]])`` per card. ``value`` is the big figure (a
    count, a time, a share); ``ids`` (e.g. ``rank 5, rank 137``) are shown under the label in
    the style of identifiers, never as the big figure."""
    out = []
    for it in items:
        k, v = it[0], it[1]
        warn = len(it) > 2 and it[2]
        ids = f'<div class="ids">{escape(it[3])}</div>' if len(it) > 3 and it[3] else ""
        out.append(
            f'<div class="card{" warn" if warn else ""}"><div class="v">{escape(v)}</div>'
            f'<div class="k">{escape(k)}</div>{ids}</div>'
        )
    return f'<div class="cards">{"".join(out)}</div>'


#: Column kinds of :func:`table`: how a value is shown and sorted.
KINDS = ("time", "num", "pct", "text", "name", "bytes", "bool", "z", "ratio")


def table(
    df: pd.DataFrame, columns: Sequence[tuple[str, str, str]], *, flag: Sequence[bool] | None = None, table_id: str = ""
) -> str:
    """A sortable HTML table. ``columns`` holds ``(column, header, kind)`` with kind in :data:`KINDS`.

    Numbers keep their raw value in ``data-v`` so sorting is numeric; names are shortened with
    the full name as a tooltip; ``flag`` marks rows (stragglers) in red.
    """
    head = "".join(f"<th>{escape(h)}</th>" for _, h, _ in columns)
    cols = {c: df[c].to_numpy() for c, _, _ in columns}
    shorts = {c: distinct_names(list(cols[c]), 72) for c, _, kind in columns if kind == "name"}
    flags = list(flag) if flag is not None else [False] * len(df)
    rows = []
    for i in range(len(df)):
        cells = []
        for c, _, kind in columns:
            cells.append(_td(cols[c][i], kind, shorts[c][i] if c in shorts else None))
        rows.append(f"<tr{' class=flag' if flags[i] else ''}>{''.join(cells)}</tr>")
    tid = f' id="{escape(table_id)}"' if table_id else ""
    return (
        f'<div class="tablewrap"><table class="data sortable"{tid}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _missing(v: object) -> bool:
    """None, NaN and pandas' NA/NaT: a value the table does not have."""
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, (float, np.floating)) and math.isnan(v))


def _td(v: object, kind: str, short: object = None) -> str:
    """One cell; ``short``: a name column's text (:func:`~dtrace.render.text.distinct_names`)."""
    if kind in ("text", "name"):
        return _text_td(v, kind, short)
    if kind == "bool":
        if _missing(v):
            return '<td data-v="">–</td>'
        b = bool(v)
        return f'<td data-v="{int(b)}">{"yes" if b else ""}</td>'
    if _missing(v):
        return '<td class="n" data-v="">–</td>'
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"<td>{escape(str(v))}</td>"
    dv = f'data-v="{x!r}"' if np.isfinite(x) else 'data-v=""'
    if kind == "z":
        s = f"{x:+.2f}" if np.isfinite(x) else "–"
        cls = " hot" if np.isfinite(x) and x >= 3 else (" cold" if np.isfinite(x) and x <= -3 else "")
        return f'<td class="n{cls}" {dv}>{s}</td>'
    return f'<td class="n" {dv}>{escape(_number_text(x, kind))}</td>'


def _text_td(v: object, kind: str, short: object) -> str:
    """A text cell; a name shows ``short`` with the full name as its tooltip."""
    s = "" if _missing(v) else str(v)
    if kind == "name":
        short = s if _missing(short) or short is None else str(short)
        tip = f' title="{escape(s)}"' if short != s else ""
        return f'<td class="nm"{tip}>{escape(short)}</td>'
    return f'<td class="evidence">{escape(s)}</td>' if len(s) > 80 else f"<td>{escape(s)}</td>"


def _number_text(x: float, kind: str) -> str:
    """A number as its column's kind shows it (time, pct, bytes, ratio, else a plain number)."""
    if kind == "time":
        return ch.fmt_time(x)
    if kind == "pct":
        return ch.fmt_pct(x)
    if kind == "bytes":
        return ch.fmt_bytes(x)
    if kind == "ratio":
        return f"{x:.2f}×" if np.isfinite(x) else "–"
    return ch.fmt_num(x)

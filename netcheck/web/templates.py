"""Jinja2 templates of the dashboard (kept in Python so they ship with the package).

Autoescaping is on for every template; the only unescaped values are SVG documents
produced by :mod:`netcheck.web.plots` (passed through ``|safe``).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from jinja2 import DictLoader, Environment, StrictUndefined

from netcheck.references.pool import CONFIG_PLACEHOLDER

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}netcheck{% endblock %} · netcheck</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.4rem;align-items:center}
header a{color:#cfd6e4;text-decoration:none}header a:hover{color:#fff}
header .brand{font-weight:700;color:#fff}
header form.logout{margin:0}header form.logout button{font:inherit;color:#cfd6e4;background:none;border:0;padding:0;cursor:pointer}
header form.logout button:hover{color:#fff}
main{padding:1rem 1.2rem;max-width:1200px}
h1{font-size:1.3rem;margin:.4rem 0 .8rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;background:#fff;width:100%;margin-bottom:.6rem}
th,td{border-bottom:1px solid #e3e6eb;padding:.3rem .55rem;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.key{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
.v{display:inline-block;padding:0 .45rem;border-radius:.6rem;color:#fff;font-size:12px}
.v-pass{background:#009E73}.v-late{background:#E69F00}.v-wrong-answer{background:#D55E00}
.v-malformed{background:#CC79A7}.v-missing{background:#56B4E9}.v-disconnected{background:#0072B2}
.v-profile-mismatch{background:#999}
.v-unchecked{background:#fff;color:#7a4d00;border:1px dashed #b8860b}
.pool{background:#e8f1fb;border-bottom:1px solid #c6d8ee;padding:.35rem 1.2rem;display:flex;flex-wrap:wrap;gap:.3rem 1.2rem}
.pool-warn{background:#fff4d6;border-bottom-color:#e6c36a}.pool-empty b,.pool-low b{color:#b42318}
.pool-fix{flex-basis:100%}
.plot{background:#fff;padding:.4rem;margin:.4rem 0 1rem;overflow-x:auto}
.plot svg{max-width:100%;height:auto}
.muted{color:#6b7280}.facts td:first-child{width:14rem;color:#4b5563}
.on{color:#009E73;font-weight:600}
a{color:#0b5cad}
</style></head>
<body><header><span class="brand">netcheck</span>
{% block nav %}<a href="/dashboard/nodes">Nodes</a><a href="/dashboard/rounds">Rounds</a>
<a href="/dashboard/flags">Flags</a><a href="/dashboard/exports">Exports</a>
<span style="flex:1"></span><form method="post" action="/dashboard/logout" class="logout">
<button type="submit" id="logout">Log out</button></form>{% endblock %}</header>
{% if pool %}<div id="pool-banner" class="pool{% if pool[0].state != 'ok' %} pool-warn{% endif %}">
<strong>Canary pool</strong>{% for p in pool %}<span class="pool-entry pool-{{ p.state }}" data-fingerprint="{{ p.fingerprint_id }}">
{{ p.profile }} / <code>{{ p.fingerprint_id[:12] }}</code>: <b class="rounds-left">{{ p.rounds_left }}</b> round{{ "" if p.rounds_left == 1 else "s" }} left{% if not p.nodes %} for one node{% endif %}
({{ p.unspent }} unspent, {% if p.nodes %}{{ p.nodes }} node{{ "" if p.nodes == 1 else "s" }}{% else %}no node connected{% endif %})</span>{% endfor %}
{% if pool[0].state != 'ok' %}<span class="pool-fix">nodes of an empty pool are <b>unchecked</b>; build more:
<code>{{ pool[0].build_command }}</code></span>{% endif %}</div>{% endif %}
<main>{% for w in capacity_warnings|default([]) %}<p class="capacity-warning" style="color:#a40000">{{ w }}</p>{% endfor %}{% block body %}{% endblock %}</main></body></html>
"""

_LOGIN = """{% extends "base.html" %}{% block title %}Log in{% endblock %}
{% block nav %}{% endblock %}
{% block body %}<h1>Log in</h1>
<form method="post" action="/dashboard/login">
<p>Admin token (<code>admin_token</code> in the coordinator config):</p>
<input type="password" name="token" autofocus size="40">
<input type="hidden" name="next" value="{{ next }}">
<button type="submit">Log in</button></form>
{% if error %}<p class="muted" id="login-error">{{ error }}</p>{% endif %}
{% endblock %}"""

_NODES = """{% extends "base.html" %}{% block title %}Nodes{% endblock %}
{% block body %}<h1>Nodes <span class="muted">({{ nodes|length }} known, {{ connected }} connected)</span></h1>
<table id="nodes"><thead><tr><th>node</th><th>profile</th><th>connected</th>{% if gateways %}<th>gateway</th>{% endif %}{% if hosts %}<th title="declared co-hosting (node_hosts in the coordinator config)">host</th>{% endif %}<th>last seen</th>
<th class="num">rounds</th><th class="num" title="passed / checked rounds">pass rate</th><th class="num" title="failing verdicts among the last {{ window }} (unchecked is not a failure)">recent failures</th>
<th class="num">flags</th><th>last verdict</th></tr></thead><tbody>
{% for n in nodes %}<tr data-node="{{ n.node_key }}">
<td><a href="{{ n.node_key|node_url }}">{{ n.node_key|label(n.name) }}</a></td>
<td>{{ n.profile }}</td><td>{% if n.connected %}<span class="on">yes</span>{% else %}no{% endif %}</td>
{% if gateways %}<td class="gateway">{{ n.gateway }}</td>{% endif %}{% if hosts %}<td class="host">{{ n.host }}</td>{% endif %}<td>{{ n.last_seen_at|when }}</td><td class="num">{{ n.rounds }}</td>
<td class="num pass-rate" title="passed / checked; {{ n.rounds - n.checked }} unchecked">{{ n.pass_rate|pct }}</td><td class="num strikes">{{ n.strikes }}</td>
<td class="num">{% if n.flags %}<a href="/dashboard/flags?node={{ n.node_key|urlencode }}">{{ n.flags }}</a>{% else %}0{% endif %}</td>
<td class="verdict">{% if n.last_verdict %}<span class="v v-{{ n.last_verdict }}">{{ n.last_verdict }}</span> <a class="muted" href="{{ n.last_round|round_url }}">{{ n.last_round }}</a>{% endif %}</td>
</tr>{% else %}<tr><td colspan="9" class="muted">no node has joined yet</td></tr>{% endfor %}
</tbody></table>{% endblock %}"""

_ROUNDS = """{% extends "base.html" %}{% block title %}Rounds{% endblock %}
{% block body %}<h1>Rounds <span class="muted">({{ total }})</span></h1>
<table id="rounds"><thead><tr><th>round</th><th>profile</th><th>started</th><th>status</th>
<th class="num">nodes</th><th>verdicts</th><th class="num">release skew</th><th class="num">duration</th></tr></thead><tbody>
{% for r in rounds %}<tr data-round="{{ r.round_id }}"><td><a href="{{ r.round_id|round_url }}">{{ r.round_id }}</a></td>
<td>{{ r.profile }}</td><td>{{ r.started_at|when }}</td><td>{{ r.status }}</td><td class="num">{{ r.nodes }}</td>
<td>{% for v, n in r.counts.items() %}<span class="v v-{{ v }}">{{ v }} {{ n }}</span> {% endfor %}</td>
<td class="num">{{ (r.summary or {}).get("release_skew_s")|ms }}</td><td class="num">{{ (r.summary or {}).get("total_s")|secs }}</td></tr>
{% else %}<tr><td colspan="8" class="muted">no rounds yet</td></tr>{% endfor %}</tbody></table>
<p>{% if offset > 0 %}<a href="?offset={{ [offset - limit, 0]|max }}">newer</a>{% endif %}
{% if offset + limit < total %}<a href="?offset={{ offset + limit }}">older</a>{% endif %}</p>
{% endblock %}"""

_ROUND = """{% extends "base.html" %}{% block title %}Round {{ r.round_id }}{% endblock %}
{% block body %}<h1>Round <code>{{ r.round_id }}</code></h1>
<table class="facts"><tbody>
<tr><td>profile</td><td>{{ r.profile }} (B = {{ r.batch_size }}, {{ r.max_new_tokens }} new tokens)</td></tr>
<tr><td>started / finished</td><td>{{ r.started_at|when }} / {{ r.finished_at|when }}</td></tr>
<tr><td>status</td><td id="round-status">{{ r.status }}</td></tr>
<tr><td>release skew</td><td id="release-skew">{{ summary.get("release_skew_s")|ms }}</td></tr>
<tr><td>phases</td><td>{% for k, v in summary.items() %}{{ k }} {{ v|ms }}{% if not loop.last %}, {% endif %}{% endfor %}</td></tr>
</tbody></table>
<h2>Verdicts</h2>
<table id="verdicts"><thead><tr><th>node</th><th>verdict</th><th class="num">elapsed</th><th class="num">deadline</th>
<th class="num">released at</th><th class="num" title="place in this round's shuffled release order">release #</th>
<th class="num" title="time its release write took">release write</th><th class="num">arrived at</th>
<th class="num" title="from the arrival stamp to the result being decrypted, checked and handed to the round: coordinator time, not counted in elapsed">arrival → processed</th>
<th class="num">rtt</th><th class="num">canaries</th><th>reason</th></tr></thead><tbody>
{% for n in rows %}<tr data-node="{{ n.node_key }}"><td><a href="{{ n.node_key|node_url }}">{{ n.node_key|label(n.name) }}</a></td>
<td class="verdict"><span class="v v-{{ n.verdict }}">{{ n.verdict }}</span></td>
<td class="num">{{ n.elapsed_s|secs }}</td><td class="num">{{ n.deadline_s|secs }}</td>
<td class="num">{{ n.rel_ms }}</td><td class="num">{{ "–" if n.release_index is none else n.release_index }}</td>
<td class="num">{{ n.release_write_s|ms }}</td><td class="num">{{ n.arr_ms }}</td>
<td class="num">{{ n.processing_delay_s|ms }}</td><td class="num">{{ n.rtt_s|ms }}</td>
<td class="num">{{ n.canaries_matched }}/{{ n.canaries_checked }}</td><td>{{ n.reason }}</td></tr>
{% else %}<tr><td colspan="12" class="muted">no verdicts recorded</td></tr>{% endfor %}</tbody></table>
<p class="muted">Each node's elapsed time runs from its own release write to its own arrival stamp
(taken when the bytes completing its result were read, before decryption), so its place in the
release order and the coordinator's processing delay are not counted against it.</p>
{% if r.skipped %}<p class="muted">skipped: {% for k, why in r.skipped %}{{ k|label }} ({{ why }}){% if not loop.last %}; {% endif %}{% endfor %}</p>{% endif %}
<h2>Timeline: release and arrival per node</h2>
<div class="plot" id="timeline-plot">{{ timeline|safe }}</div>
<p><a href="/export/verdicts.csv?round_id={{ r.round_id|urlencode }}">verdicts.csv</a> ·
<a href="/export/timings.csv?round_id={{ r.round_id|urlencode }}">timings.csv</a></p>
{% endblock %}"""

_NODE = """{% extends "base.html" %}{% block title %}Node{% endblock %}
{% block body %}<h1>Node {{ n.node_key|label(n.name) }}</h1>
<table class="facts"><tbody>
<tr><td>key</td><td class="key">{{ n.node_key }}</td></tr>
<tr><td>profile</td><td>{{ n.profile }}</td></tr>
<tr><td>fingerprint</td><td class="key">{{ n.fingerprint_id }}<br>{% for k, v in n.fingerprint.items() %}{{ k }}={{ v }}{% if not loop.last %}, {% endif %}{% endfor %}</td></tr>
<tr><td>first / last seen</td><td>{{ n.first_seen_at|when }} / {{ n.last_seen_at|when }}</td></tr>
<tr><td>connected</td><td>{% if connected %}<span class="on">yes</span>{% else %}no{% endif %}</td></tr>
{% if host %}<tr><td>declared host</td><td id="node-host">{{ host }}, shared with {% for p in peers %}<a href="{{ p|node_url }}">{{ p|label(peer_names.get(p)) }}</a>{% if not loop.last %}, {% endif %}{% else %}no other identity{% endfor %}
<br><span class="muted">declared by the operator (node_hosts): identities on one host may slow each other a little; one that slows them like a shared card is flagged <code>declared-host</code></span></td></tr>{% endif %}
<tr><td>pass rate (last {{ history|length }} rounds)</td><td id="node-pass-rate">{{ pass_rate|pct }}
<span class="muted">of {{ checked }} checked{% if checked < history|length %}; {{ history|length - checked }} unchecked (empty canary pool){% endif %}</span></td></tr>
<tr><td>flags</td><td>{% for f in flags %}<a href="{{ f.flag_id|flag_url }}">{{ f.detector }} #{{ f.flag_id }}</a> {% else %}none{% endfor %}</td></tr>
</tbody></table>
<h2>Latency history against the deadline</h2>
<div class="plot" id="latency-plot">{{ latency|safe }}</div>
<h2>Verdict history</h2>
<table id="history"><thead><tr><th>round</th><th>started</th><th>verdict</th><th class="num">elapsed</th>
<th class="num">deadline</th><th class="num">canaries</th><th>reason</th></tr></thead><tbody>
{% for h in history|reverse %}<tr data-round="{{ h.round_id }}"><td><a href="{{ h.round_id|round_url }}">{{ h.round_id }}</a></td>
<td>{{ h.started_at|when }}</td><td class="verdict"><span class="v v-{{ h.verdict }}">{{ h.verdict }}</span></td>
<td class="num">{{ h.elapsed_s|secs }}</td><td class="num">{{ h.deadline_s|secs }}</td>
<td class="num">{{ h.canaries_matched }}/{{ h.canaries_checked }}</td><td>{{ h.reason }}</td></tr>
{% else %}<tr><td colspan="7" class="muted">no verdicts yet</td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

_FLAGS = """{% extends "base.html" %}{% block title %}Flags{% endblock %}
{% block body %}<h1>Flags{% if node %} naming {{ node|label(names.get(node)) }}{% endif %} <span class="muted">({{ flags|length }})</span></h1>
{% if not has_table %}<p class="muted" id="no-flags">No flags: screening has not stored any flag in this database yet.</p>{% endif %}
<table id="flags"><thead><tr><th>flag</th><th>kind</th><th>created</th><th>status</th><th>review</th><th>nodes</th>
<th class="num">statistic</th><th class="num">threshold</th></tr></thead><tbody>
{% for f in flags %}<tr data-flag="{{ f.flag_id }}"><td><a href="{{ f.flag_id|flag_url }}">#{{ f.flag_id }}</a></td><td>{{ f.detector }}</td>
<td>{{ f.created_at|when }}</td><td>{{ f.status }}</td>
<td class="review">{{ reviews[f.flag_id].state }}{% if reviews[f.flag_id].get('by') %} <span class="muted">({{ reviews[f.flag_id].by }})</span>{% endif %}</td>
<td>{% for m in f.members %}<a href="{{ m|node_url }}">{{ m|label(names.get(m)) }}</a>{% if not loop.last %}, {% endif %}{% endfor %}</td>
<td class="num">{{ f.statistic|num }}</td><td class="num">{{ f.threshold|num }}</td></tr>
{% else %}<tr><td colspan="8" class="muted">no flags</td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

_FLAG = """{% extends "base.html" %}{% block title %}Flag {{ f.flag_id }}{% endblock %}
{% block body %}<h1>Flag #{{ f.flag_id }}: {{ f.detector }}</h1>
<table class="facts"><tbody>
<tr><td>status</td><td id="flag-status">{{ f.status }}</td></tr>
<tr><td>review</td><td id="flag-review">{{ review.state }}{% for r in reviews %}<br><span class="muted">{{ r.at|when }}</span> {{ r.state }} by {{ r.by }}{% if r.note %}: {{ r.note }}{% endif %}{% endfor %}
<br><span class="muted">change with <code id="review-command">netcheck flags ack|resolve|false-positive|reopen --config {{ coordinator_config }} {{ f.flag_id }} --by NAME --note …</code>
(--by: who reviews; a shell without $USER must give it)</span></td></tr>
{% if f.rule %}<tr><td>rule</td><td>{{ f.rule }}</td></tr>{% endif %}
<tr><td>nodes</td><td id="flag-members">{% for m in f.members %}<a href="{{ m|node_url }}">{{ m|label(names.get(m)) }}</a>{% if not loop.last %}, {% endif %}{% endfor %}</td></tr>
{% if hosts %}<tr><td>declared hosts</td><td id="flag-hosts">{% for m in f.members %}{{ m|label(names.get(m)) }}: {{ hosts.get(m, "not declared") }}{% if not loop.last %}<br>{% endif %}{% endfor %}</td></tr>{% endif %}
<tr><td>statistic</td><td id="flag-statistic">{{ f.statistic|num }}</td></tr>
<tr><td>threshold</td><td id="flag-threshold">{{ f.threshold|num }}</td></tr>
<tr><td>evidence rounds</td><td id="evidence-rounds">{{ matrix.round_ids|length }}{% if not f.round_ids %} (most recent with a node loaded){% endif %}:
{% for rid in matrix.round_ids %}<a href="{{ rid|round_url }}">{{ rid }}</a>{% if not loop.last %}, {% endif %}{% endfor %}</td></tr>
<tr><td>receipts</td><td><a id="receipts-link" href="{{ f.flag_id|flag_url }}/receipts.json">receipts.json</a>
<span class="muted">(check each with <code>netcheck receipt verify</code>)</span></td></tr>
</tbody></table>
{% if f.edges %}<h2>Screening: the pairs that nominated this group</h2>
<p class="muted">Screening only nominates pairs for the confirmation rounds; the flag's own statistic and threshold are above.</p>
<table id="edges"><thead><tr>{% for k in edge_cols %}<th title="{{ k }}">{{ edge_headers.get(k, k) }}</th>{% endfor %}</tr></thead><tbody>
{% for e in f.edges %}<tr>{% for k in edge_cols %}<td>{% if k in ("a", "b") %}{{ e.get(k)|label(names.get(e.get(k))) }}{% elif k == "detector" %}{{ edge_tests.get(e.get(k), e.get(k)) }}{% else %}{{ e.get(k)|num }}{% endif %}</td>{% endfor %}</tr>{% endfor %}
</tbody></table>{% endif %}
<h2 id="loaded-title">{% if pair_plots %}Service times with partners loaded vs idle{% else %}Service times in the evidence rounds{% endif %}</h2>
<div class="plot" id="loaded-plot">{{ loaded_plot|safe }}</div>
{% if pair_plots %}<h2>Co-loading matrix (rounds both were loaded)</h2>
<div class="plot" id="coload-plot">{{ coload_plot|safe }}</div>
<h2>Residual correlation (median-polished log service time)</h2>
<div class="plot" id="corr-plot">{{ corr_plot|safe }}</div>{% else %}
<p class="muted" id="no-pair-plots">One node: no co-loading or correlation between nodes to show.</p>{% endif %}
<h2>Stored row</h2>
<table class="facts" id="flag-row"><tbody>{% for k, v in f.row.items() %}<tr><td>{{ k }}</td><td><code>{{ v|jsonish }}</code></td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

_EXPORTS = """{% extends "base.html" %}{% block title %}Exports{% endblock %}
{% block body %}<h1>Exports</h1>
<p>Whole tables, for re-running the statistics elsewhere. CSV cells holding JSON (lists,
maps) are JSON text; empty cells are nulls. Add <code>?round_id=...</code> to limit rounds,
verdicts and timings to one round.</p>
<table><thead><tr><th>data</th><th>CSV</th><th>JSON</th></tr></thead><tbody>
{% for k in kinds %}<tr><td>{{ k }}</td><td><a href="/export/{{ k }}.csv">{{ k }}.csv</a></td><td><a href="/export/{{ k }}.json">{{ k }}.json</a></td></tr>{% endfor %}
</tbody></table>{% endblock %}"""

_ERROR = """{% extends "base.html" %}{% block title %}{{ title }}{% endblock %}
{% block body %}<h1>{{ title }}</h1><p>{{ message }}</p>{% endblock %}"""


def _when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return "–"
    return _dt.datetime.fromtimestamp(float(ts), _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return "–" if v is None else str(v)
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}"


def _secs(v: Any) -> str:
    return f"{float(v):.3f} s" if isinstance(v, int | float) else "–"


def _ms(v: Any) -> str:
    return f"{float(v) * 1e3:.3f} ms" if isinstance(v, int | float) else "–"


def _pct(v: Any) -> str:
    return f"{float(v) * 100:.0f}%" if isinstance(v, int | float) else "–"


def label(key: Any, name: Any = None) -> str:
    """Display name of a node: its stored name, else the start of its key."""
    if isinstance(name, str) and name:
        return name
    text = str(key or "")
    body = text.removeprefix("ed25519:")
    return body[:10] + "…" if len(body) > 10 else body


def _jsonish(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True)[:2000]
    return str(v)


def make_env() -> Environment:
    """The dashboard's Jinja2 environment (autoescape on, strict undefined)."""
    from urllib.parse import quote

    env = Environment(
        loader=DictLoader(
            {
                "base.html": _BASE,
                "login.html": _LOGIN,
                "nodes.html": _NODES,
                "rounds.html": _ROUNDS,
                "round.html": _ROUND,
                "node.html": _NODE,
                "flags.html": _FLAGS,
                "flag.html": _FLAG,
                "exports.html": _EXPORTS,
                "error.html": _ERROR,
            }
        ),
        autoescape=True,
        undefined=StrictUndefined,
    )
    env.filters.update(
        when=_when,
        num=_num,
        secs=_secs,
        ms=_ms,
        pct=_pct,
        label=label,
        jsonish=_jsonish,
        node_url=lambda k: "/dashboard/nodes/" + quote(str(k), safe=""),
        round_url=lambda r: "/dashboard/rounds/" + quote(str(r), safe=""),
        flag_url=lambda f: "/dashboard/flags/" + quote(str(f), safe=""),
    )
    # The page does not know the coordinator's config path: the placeholder the pool's
    # build command uses too (netcheck.references.pool).
    env.globals["coordinator_config"] = CONFIG_PLACEHOLDER
    return env

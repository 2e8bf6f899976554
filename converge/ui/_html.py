"""The console's page frame: layout, stylesheet, script, content security policy, escaping.

Every page is built on the server; the one script (live refresh of a run page, the report's
interactions) is allowed by its hash, like the report's, and nothing else may run, load or
be fetched but this console's own event stream.
"""

from __future__ import annotations

from base64 import b64encode
from dataclasses import dataclass
from hashlib import sha256
from typing import Final, final

from .._core._escape import esc
from .._report._assets import CSS as REPORT_CSS
from .._report._assets import SCRIPT as REPORT_SCRIPT
from .._report._assets import SCRIPT_HASH as REPORT_SCRIPT_HASH

__all__ = ["POLICY", "Viewer", "hidden", "page"]

LIVE_SCRIPT: Final = """(function () {
  var source = document.body.getAttribute("data-events");
  if (!source || !window.EventSource) { return; }
  var events = new EventSource(source);
  var status = document.getElementById("live");
  var count = function (name, value) {
    var node = document.querySelector('[data-count="' + name + '"]');
    if (node) { node.setAttribute("data-value", String(value)); node.textContent = value; }
  };
  events.addEventListener("delta", function (event) {
    var change = JSON.parse(event.data);
    document.body.setAttribute("data-version", String(change.version));
    count("cycles", change.cycles);
    count("facts", change.fact_count);
    var added = change.facts.length + change.more;
    if (status) {
      status.textContent = "running: cycle " + change.cycles + " saved, " + added +
        " new fact(s), " + change.fact_count + " in all";
    }
    var list = document.getElementById("live-facts");
    if (!list) { return; }
    change.facts.forEach(function (fact) {
      var item = document.createElement("li");
      var ref = document.createElement("code");
      ref.textContent = fact.ref;
      item.setAttribute("data-live-fact", fact.ref);
      item.appendChild(ref);
      item.appendChild(document.createTextNode(" (cycle " + fact.cycle + "): " + fact.content));
      list.insertBefore(item, list.firstChild);
    });
    while (list.children.length > 50) { list.removeChild(list.lastChild); }
  });
  events.addEventListener("tokens", function (event) {
    var box = document.getElementById("live-tokens");
    if (!box) { return; }
    while (box.firstChild) { box.removeChild(box.firstChild); }
    JSON.parse(event.data).calls.forEach(function (call) {
      var head = document.createElement("div");
      head.className = "live-call";
      head.textContent = call.suggestor + ", model call " + call.call + " (cycle " +
        call.cycle + (call.attempt > 1 ? ", attempt " + call.attempt : "") + ")" +
        (call.cut ? ": its last characters" : "");
      var text = document.createElement("pre");
      text.setAttribute("data-live-text", call.suggestor + "/" + call.call);
      text.textContent = call.text;
      box.appendChild(head);
      box.appendChild(text);
    });
  });
  events.addEventListener("changed", function () {
    events.close();
    if (status) { status.textContent = "updated: reloading"; }
    window.location.reload();
  });
  events.addEventListener("end", function () {
    events.close();
    if (status) { status.textContent = "stopped"; }
  });
})();"""

_LIVE_HASH: Final = b64encode(sha256(LIVE_SCRIPT.encode()).digest()).decode()
POLICY: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{REPORT_SCRIPT_HASH}' 'sha256-{_LIVE_HASH}'; connect-src 'self'; "
    "img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

CONSOLE_CSS: Final = """
.bar-top { display: flex; align-items: center; gap: 18px; padding: 8px 24px;
  border-bottom: 1px solid var(--line); background: #fff; font-size: 13.5px; }
.bar-top .brand { font-weight: 700; color: var(--fg); }
.bar-top .who { margin-left: auto; color: var(--muted); }
.live { color: var(--warn); font-weight: 600; }
.live-facts { margin: 6px 0 0 18px; padding: 0; font-size: 12.5px; max-height: 240px;
  overflow-y: auto; word-break: break-word; }
.live-tokens pre { margin: 2px 0 8px; padding: 6px 10px; background: var(--soft);
  border-radius: 6px; font-size: 12.5px; max-height: 240px; overflow-y: auto;
  white-space: pre-wrap; word-break: break-word; }
.live-call { font-size: 12px; color: var(--muted); margin-top: 6px; }
form.filters { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin: 12px 0; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select, textarea, button { font: inherit; }
input, select, textarea { border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px; }
button { border: 1px solid var(--line); border-radius: 6px; padding: 5px 14px; cursor: pointer;
  background: var(--soft); }
button.approve { background: var(--ok); color: #fff; border-color: var(--ok); }
button.reject { background: var(--bad); color: #fff; border-color: var(--bad); }
fieldset.decide { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
  margin: 12px 0; }
fieldset.decide textarea { width: 100%; min-height: 54px; margin: 6px 0; }
.message { border: 1px solid var(--line); border-left: 4px solid var(--warn); padding: 12px 16px;
  border-radius: 6px; background: var(--soft); }
.message.refused { border-left-color: var(--bad); }
.chain ul { margin: 2px 0 2px 18px; padding: 0; list-style: disc; }
.chain li { margin: 3px 0; word-break: break-word; }
table.payload td:first-child { width: 32%; }
.bar-top form { margin: 0; } .bar-top form button { padding: 1px 10px; font-size: 12.5px; }
.banner { margin: 0 0 14px; padding: 10px 14px; border-radius: 6px; border: 1px solid var(--bad);
  border-left: 6px solid var(--bad); background: #ffebe9; }
.banner b { color: var(--bad); }
.trust { margin: 0 0 12px; font-size: 12.5px; color: var(--muted); }
.next { margin: 8px 0; padding: 8px 12px; background: var(--soft); border-radius: 6px; }
.next p { margin: 2px 0; }
form.sign-in input[type=password] { width: 100%; max-width: 520px; margin: 6px 0; }
"""


@final
@dataclass(frozen=True, slots=True)
class Viewer:
    """Who a page is shown to: the reviewer, their forms' CSRF token, and how they signed in.

    `session` is true for a browser's session, which the page offers to end (sign out).
    """

    name: str
    csrf: str
    session: bool


def hidden(name: str, value: object) -> str:
    """A hidden form field."""
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def _who(viewer: Viewer | None) -> str:
    if viewer is None:
        return ""
    who = f'<span class="who">reviewer <b>{esc(viewer.name)}</b></span>'
    if viewer.session:
        who += (
            f'<form method="post" action="/sign-out">{hidden("csrf", viewer.csrf)}'
            '<button type="submit">Sign out</button></form>'
        )
    return who


def page(
    title: str,
    body: str,
    *,
    viewer: Viewer | None,
    banner: str = "",
    events: str | None = None,
    data: dict[str, str] | None = None,
) -> str:
    """A whole console page: the top bar (who is signed in), `banner`, `body`, the scripts.

    `events` is the URL of a run's event stream: the page applies each `delta` it sends in
    place (counts, new facts) and reloads when it says the run changed otherwise.
    `data` become `data-*` attributes of the body, for tests and tools.
    """
    who = _who(viewer)
    live = f' data-events="{esc(events)}"' if events else ""
    live += "".join(f' data-{name}="{esc(value)}"' for name, value in (data or {}).items())
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · converge</title>"
        f"<style>{REPORT_CSS}{CONSOLE_CSS}</style></head>"
        f'<body{live}><div class="bar-top"><a class="brand" href="/">converge review</a>'
        f'<a href="/">runs</a>{who}</div><main>{banner}{body}</main>'
        f"<script>{REPORT_SCRIPT}</script><script>{LIVE_SCRIPT}</script></body></html>\n"
    )

// The support console's script (docs/admin.md). It reads the admin JSON API only and builds the
// page with DOM calls: ids and error texts come from clients, so nothing goes through
// innerHTML. Everything refreshes every REFRESH_MS without reloading the page.
"use strict";

const REFRESH_MS = 5000;
const $ = (id) => document.getElementById(id);
let upstreamsByRegion = new Map();
let currentId = "";
let timer = null;

// el("td", {class: "x"}, "text", child, ...)
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function badge(text, cls) {
  return el("span", { class: "badge " + (cls || text) }, text);
}

class Unauthorized extends Error {}

async function api(path, options) {
  const resp = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  if (resp.status === 401) {
    showLogin();
    throw new Unauthorized(path);
  }
  const type = resp.headers.get("content-type") || "";
  const body = type.includes("json") ? await resp.json() : await resp.text();
  return { status: resp.status, ok: resp.ok, body };
}

function showLogin() {
  clearTimeout(timer);
  $("console").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("token").focus();
}

function showConsole() {
  $("login").hidden = true;
  $("console").hidden = false;
}

const relative = new Intl.RelativeTimeFormat("en", { numeric: "always" });
function ago(ms) {
  const s = (ms - Date.now()) / 1000;
  const steps = [[60, "second"], [60, "minute"], [24, "hour"], [30, "day"], [12, "month"], [Infinity, "year"]];
  let v = s;
  for (const [size, unit] of steps) {
    if (Math.abs(v) < size) return relative.format(Math.round(v), unit);
    v /= size;
  }
  return "";
}

function clock(iso) {
  return iso ? new Date(iso).toISOString().slice(11, 19) + " UTC" : "";
}

function stateCell(u) {
  if (u.state === "ejected") {
    const left = Math.ceil((u.ejected_for_ms || 0) / 1000);
    return el("span", {}, badge("ejected"), " until " + clock(u.ejected_until) + " (" + left + " s)");
  }
  if (u.state === "check_failed") return badge("check_failed");
  return badge(u.state);
}

// --- lookup -----------------------------------------------------------------------------

const SHOWN_APART = new Set(["region", "upstreams", "rule", "table_version", "id", "created_at", "ts_ms", "scheme", "learned_owner"]);

function ruleText(rule) {
  if (!rule) return "";
  const parts = [rule.kind];
  const details = Object.entries(rule).filter(([k]) => k !== "kind" && k !== "override")
    .map(([k, v]) => k + "=" + JSON.stringify(v));
  if (details.length) parts.push("(" + details.join(", ") + ")");
  if (rule.override) {
    const o = Object.entries(rule.override).filter(([k]) => k !== "region")
      .map(([k, v]) => k + "=" + (Array.isArray(v) ? v.map((p) => p.join("=")).join(",") : v));
    parts.push("(" + (o.join(", ") || "any id") + ")");
  }
  return parts.join(" ");
}

function regionUpstreams(region) {
  const list = upstreamsByRegion.get(region) || [];
  return el("ul", { class: "plain" }, list.map((u) =>
    el("li", {}, el("code", {}, u.authority), " ", stateCell(u), u.in_flight ? " · " + u.in_flight + " in flight" : "")));
}

function renderInvalid(list) {
  return el("ul", { class: "plain invalid-list" }, list.map((r) =>
    el("li", { class: "reading-invalid", "data-scheme": r.scheme },
      el("code", {}, r.scheme), " ", badge("invalid"), " ", el("span", { class: "error reason" }, r.error))));
}

function renderReading(r) {
  const head = el("h3", {}, el("code", {}, r.scheme));
  const reading = r.reading || {};
  head.append(badge(r.unowned ? "unowned" : "valid"));
  const card = el("div", { class: "reading", "data-scheme": r.scheme, "data-valid": "true" }, head);
  const kv = el("dl", { class: "kv" });
  const add = (k, v) => kv.append(el("dt", {}, k), el("dd", {}, v));
  if (r.unowned) {
    add("owner", el("span", { class: "error" }, r.unowned));
  } else {
    add("owner", el("span", { class: "owner" }, reading.region));
    add("rule", el("span", { class: "rule" }, ruleText(reading.rule)));
    if (reading.learned_owner) {
      // The data path follows it over the table's answer (docs/failover.md).
      add("learned owner", el("span", { class: "learned-owner" }, reading.learned_owner.region, " ",
        el("span", { class: "muted" }, "(" + reading.learned_owner.source + ")")));
    }
  }
  if (reading.created_at) {
    add("created", el("span", { class: "created" }, reading.created_at, " ", el("span", { class: "muted" }, "(" + ago(reading.ts_ms) + ")")));
  } else {
    add("created", el("span", { class: "muted" }, "this scheme carries no creation time"));
  }
  for (const [k, v] of Object.entries(reading)) {
    if (SHOWN_APART.has(k)) continue;
    add(k, el("code", {}, typeof v === "object" ? JSON.stringify(v) : String(v)));
  }
  add("canonical", el("code", {}, reading.id));
  if (!r.unowned) add("upstreams", regionUpstreams(reading.region));
  card.append(kv);
  return card;
}

async function lookup(id) {
  currentId = id.trim();
  const out = $("readings");
  if (!currentId) {
    out.replaceChildren();
    return;
  }
  history.replaceState(null, "", "#id=" + encodeURIComponent(currentId));
  const { ok, body } = await api("/admin/decode/" + encodeURIComponent(currentId));
  if (!ok) {
    out.replaceChildren(el("p", { class: "error" }, body.detail || JSON.stringify(body)));
    return;
  }
  const valid = body.readings.filter((r) => r.valid);
  const invalid = body.readings.filter((r) => !r.valid);
  const nodes = valid.map(renderReading);
  if (invalid.length) {
    nodes.push(el("p", { class: valid.length ? "muted" : "error", id: valid.length ? null : "no-scheme" },
      valid.length ? "Not read as:" : "Not an id of any scheme of this table:"));
    nodes.push(renderInvalid(invalid));
  }
  out.replaceChildren(...nodes);
}

// --- the rest of the page ---------------------------------------------------------------

function renderUpstreams(report) {
  upstreamsByRegion = new Map(report.regions.map((r) => [r.name, r.upstreams]));
  const rows = [];
  for (const region of report.regions) {
    for (const u of region.upstreams) {
      rows.push(el("tr", { "data-region": region.name, "data-state": u.state },
        el("td", {}, region.name), el("td", {}, el("code", {}, u.authority), " ", el("span", { class: "muted" }, u.protocol)),
        el("td", {}, stateCell(u)), el("td", {}, u.in_flight), el("td", {}, u.consecutive_failures), el("td", {}, u.ejections)));
    }
  }
  $("upstreams").replaceChildren(...rows);
}

function renderRegions(report) {
  $("regions").replaceChildren(...report.regions.map((r) => {
    const f = r.failover;
    return el("tr", { "data-region": r.name, "data-share": String(r.health_share) },
      el("td", {}, r.name), el("td", {}, (100 * r.health_share).toFixed(0) + " %"),
      el("td", {}, r.in_rotation + " / " + r.upstreams),
      el("td", {}, f ? [el("code", {}, f.region), " ", el("span", { class: "muted" }, f.serves)] : el("span", { class: "muted" }, "none")),
      el("td", { class: f && f.failing_over > 0 ? "error" : "" }, f ? (100 * f.failing_over).toFixed(0) + " % to " + f.region : "—"));
  }));
}

function renderRates(rates) {
  $("rates").replaceChildren(...rates.regions.map((r) => el("tr", { "data-region": r.region },
    el("td", {}, r.region), el("td", {}, r.requests), el("td", {}, r.requests_per_s.toFixed(2)),
    el("td", {}, r.errors), el("td", {}, (100 * r.error_ratio).toFixed(1) + " %"))));
}

function renderLimits(limits) {
  const store = limits.store;
  $("limits-store").textContent = store.kind === "redis"
    ? "shared through " + store.url + (store.reachable ? "" : " (unreachable: " + store.on_error + " decides)") +
      " · " + store.errors + " decisions without Redis"
    : "counters in this edge's memory";
  const rows = limits.rules.map((r) => el("tr", { "data-rule": r.name },
    el("td", {}, r.name), el("td", {}, el("code", {}, r.key)),
    el("td", {}, r.rate + " burst " + r.burst, r.routes.length ? el("div", { class: "muted" }, r.routes.join(" ")) : null),
    el("td", {}, r.keys_in_memory), el("td", {}, r.refused),
    el("td", {}, r.top_keys.map((k) => el("div", {}, el("code", {}, k.key), " ", el("span", { class: "muted" }, "× " + k.refused))))));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "no rate_limits: in router.yaml")));
  $("limits").replaceChildren(...rows);
}

// Moves between regions (docs/moves.md): the panel shows only while the table has one.
function renderMoves(moves) {
  const list = moves.moves || [];
  $("moves-section").hidden = list.length === 0;
  const counts = (c, keys) => keys.map((k) => c[k]).join(" / ");
  $("moves").replaceChildren(...list.map((m) => el("tr", { "data-move": m.name, "data-phase": m.phase },
    el("td", {}, el("code", {}, m.name)),
    el("td", {}, m.from + " → " + m.to),
    el("td", {}, badge(m.phase), m.phase === "mirror" ? el("span", { class: "muted" }, " ratio " + m.mirror_ratio) : null),
    el("td", { title: m.since }, clock(m.since), el("div", { class: "muted" }, ago(Date.parse(m.since)))),
    el("td", { class: "held-now" }, m.held_now),
    el("td", { class: "writes-to-from" }, m.writes_to_from),
    el("td", { class: "mirrored" }, counts(m.mirrored, ["same", "differs", "failed", "dropped"])),
    el("td", { class: "held" }, counts(m.held, ["released", "timed_out", "refused"])))));
}

function chips(items) {
  return el("div", { class: "chips" }, items.map((t) => el("span", {}, el("code", {}, t))));
}

function renderTable(t) {
  $("version").textContent = "table " + t.version;
  const byRegion = new Map(t.regions.map((r) => [r.name, []]));
  for (const c of t.countries) (byRegion.get(c.region) || []).push(c.id + (c.code ? " " + c.code : ""));
  const regions = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "region"), el("th", {}, "upstreams"), el("th", {}, "countries"))),
    el("tbody", {}, t.regions.map((r) => el("tr", {},
      el("td", {}, r.name, r.name === t.default_region ? el("span", { class: "muted" }, " (default)") : null),
      el("td", {}, r.upstreams.map((u) => el("div", {}, el("code", {}, u))), el("span", { class: "muted" }, r.protocol)),
      el("td", {}, chips(byRegion.get(r.name) || []))))));
  const overrides = t.overrides.length
    ? el("ol", {}, t.overrides.map((o) => el("li", {}, ruleText({ kind: "→ " + o.region, override: o }))))
    : el("p", { class: "muted" }, "no overrides");
  $("table").replaceChildren(regions,
    el("h2", {}, "Services"), chips(t.services.map((s) => s.id + " " + s.name)),
    el("h2", {}, "Schemes"), chips(t.schemes.map((s) => s.name + " (" + s.kind + ")")),
    el("h2", {}, "Overrides, first match wins"), overrides);
}

function renderReloads(status) {
  $("table-status").textContent = "serving " + status.version + " since " + status.loaded_at +
    " · " + status.reloads + " installed, " + status.failed_reloads + " refused · sha256 " + status.content_sha256.slice(0, 12);
  const rows = status.recent_reloads.map((r) => el("tr", {},
    el("td", {}, r.at), el("td", {}, badge(r.outcome)), el("td", {}, r.version),
    el("td", {}, (r.errors || []).map((e) => el("div", { class: "error mono" }, e)))));
  if (rows.length === 0) rows.push(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "no reload since start")));
  $("reloads").replaceChildren(...rows);
}

async function refresh() {
  clearTimeout(timer);
  try {
    const [up, rates, table, status, limits, moves, regions] = await Promise.all(
      ["/admin/upstreams", "/admin/rates", "/admin/routing-table/summary", "/admin/routing-table",
        "/admin/rate-limits", "/admin/moves", "/admin/regions"].map((p) => api(p)));
    showConsole();
    $("logout").hidden = false;
    renderUpstreams(up.body);
    renderRates(rates.body);
    renderRegions(regions.body);
    renderLimits(limits.body);
    renderMoves(moves.body);
    renderTable(table.body);
    renderReloads(status.body);
    if (currentId) await lookup(currentId);
    $("updated").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
  } catch (e) {
    if (e instanceof Unauthorized) return;
    $("updated").textContent = "refresh failed: " + e.message;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const resp = await fetch("/admin/login", { method: "POST", body: $("token").value, credentials: "same-origin" });
  $("token").value = "";
  if (resp.ok) {
    $("login-error").textContent = "";
    refresh();
  } else {
    $("login-error").textContent = "Wrong token.";
  }
});

$("lookup-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  lookup($("id").value).catch((e) => {
    if (!(e instanceof Unauthorized)) {
      $("readings").replaceChildren(el("p", { class: "error" }, "Lookup failed: " + e.message));
    }
  });
});

$("reload").addEventListener("click", async () => {
  try {
    await api("/admin/reload", { method: "POST" });
  } catch (e) {
    return;
  }
  refresh();
});

$("logout").addEventListener("click", async () => {
  await fetch("/admin/logout", { method: "POST", credentials: "same-origin" });
  refresh(); // without admin.token_file the console needs no login and comes straight back
});

const fromHash = new URLSearchParams(location.hash.slice(1)).get("id");
if (fromHash) {
  $("id").value = fromHash;
  currentId = fromHash;
}
refresh();

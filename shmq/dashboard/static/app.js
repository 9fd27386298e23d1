// The dashboard's pages, rendered from the JSON API (/api/...). Hash routes, so the page never
// reloads; the charts poll /api/series. Every text from the broker goes in as textContent.
"use strict";
let PALETTE = null, TIMER = null;
const page = () => document.getElementById("page");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k != null) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function table(header, rows, numeric) {
  return el("table", {}, el("tr", {}, header.map(h => el("th", {}, h))),
    rows.map(r => el("tr", {}, r.map((c, i) => el("td", numeric && numeric.includes(i) ? { class: "num" } : {}, c)))));
}
function when(ms) { return ms > 0 ? new Date(ms).toLocaleString() : "-"; }
function err(e) { return el("div", { class: "error" }, String(e.message || e)); }
function status(text) { document.getElementById("status").textContent = text; }

async function api(path, body) {
  const opt = body === undefined ? {} : { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Shmq-Dashboard": "1" } };
  const r = await fetch("/api/" + path, opt);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function chart(id, w, h) { return el("canvas", { id, class: "chart", width: w || 760, height: h || 220 }); }
function live(draws) {  // redraw the page's charts from /api/series every 2 s
  clearInterval(TIMER);
  const tick = async () => {
    try {
      const s = await api("series");
      for (const d of draws) d(s);
      status("updated " + new Date().toLocaleTimeString());
    } catch (e) { status("no data: " + e.message); }
  };
  tick(); TIMER = setInterval(tick, 2000);
}
function only(obj, keys) { const o = {}; for (const k of keys) if (k in obj) o[k] = obj[k]; return o; }

// ---- pages ----------------------------------------------------------------------------------
async function cluster() {
  const c = await api("cluster");
  page().replaceChildren(el("h2", {}, "Cluster"), el("p", { class: "note" }, "NameServer " + c.namesrv),
    table(["cluster", "broker", "id", "role", "address", "version", "workers", "commitlog max", "disk used"],
      c.brokers.map(b => [b.cluster, b.brokerName, b.brokerId, b.role, b.addr, b.version || b.error, b.workers,
        b.commitLogMaxOffset, b.diskRatio])),
    el("h3", {}, "Messages in (" + PALETTE.units.rate + ")"), chart("rates"));
  live([s => Chart.draw(document.getElementById("rates"), s.t, s.rates, PALETTE.units.rate, PALETTE)]);
}

async function topics() {
  const list = await api("topics");
  const form = el("form", { id: "create-topic", onsubmit: async ev => {
    ev.preventDefault();
    try { await api("topics", { topic: form.topic.value, queues: +form.queues.value }); location.hash = "#/topic/" + form.topic.value; }
    catch (e) { form.after(err(e)); }
  } }, el("input", { name: "topic", placeholder: "new topic", required: "" }),
    el("input", { name: "queues", type: "number", value: "4", min: "1", max: "1024" }), el("button", {}, "Create"));
  const user = list.filter(t => !t.system), sys = list.filter(t => t.system);
  page().replaceChildren(el("h2", {}, "Topics"), form,
    table(["topic"], user.map(t => [el("a", { href: "#/topic/" + encodeURIComponent(t.topic) }, t.topic)])),
    el("h3", {}, "Messages in per topic (" + PALETTE.units.rate + ")"), chart("rates"),
    el("details", {}, el("summary", {}, sys.length + " system topics"), table(["topic"], sys.map(t => [t.topic]))));
  live([s => Chart.draw(document.getElementById("rates"), s.t, s.rates, PALETTE.units.rate, PALETTE)]);
}

async function topic(name) {
  const t = await api("topics/" + encodeURIComponent(name));
  const del = el("button", { class: "danger", id: "delete-topic", onclick: async () => {
    if (!confirm("Delete topic " + name + "?")) return;
    try { await api("topics/" + encodeURIComponent(name) + "/delete", {}); location.hash = "#/topics"; }
    catch (e) { del.after(err(e)); }
  } }, "Delete topic");
  page().replaceChildren(el("h2", {}, "Topic " + name), del,
    el("h3", {}, "Route"), table(["broker", "read queues", "write queues", "perm"], t.queues.map(q => [q.brokerName, q.read, q.write, q.perm])),
    table(["broker", "addresses"], t.brokers.map(b => [b.brokerName, Object.values(b.addrs).join(", ")])),
    el("h3", {}, "Queues (" + t.total + " messages stored)"),
    table(["broker", "queue", "min offset", "max offset", "last update"],
      t.status.map(s => [s.brokerName, s.queueId, s.minOffset, s.maxOffset, when(s.lastUpdate)]), [1, 2, 3]),
    el("h3", {}, "Consumer groups"),
    t.groups === null ? el("p", { class: "note" }, "this broker does not list a topic's groups (request 300)")
      : table(["group"], t.groups.map(g => [el("a", { href: "#/group/" + encodeURIComponent(g) }, g)])),
    el("h3", {}, "Messages in (" + PALETTE.units.rate + ")"), chart("rate"));
  live([s => Chart.draw(document.getElementById("rate"), s.t, only(s.rates, [name]), PALETTE.units.rate, PALETTE)]);
}

async function groups() {
  const list = await api("groups");
  const form = el("form", { onsubmit: ev => { ev.preventDefault(); location.hash = "#/group/" + encodeURIComponent(form.group.value); } },
    el("input", { name: "group", placeholder: "consumer group", required: "" }), el("button", {}, "Open"));
  page().replaceChildren(el("h2", {}, "Consumer groups"), form,
    table(["group"], list.map(g => [el("a", { href: "#/group/" + encodeURIComponent(g) }, g)])),
    el("h3", {}, "Lag (" + PALETTE.units.lag + ")"), chart("lags"));
  live([s => Chart.draw(document.getElementById("lags"), s.t, s.lags, PALETTE.units.lag, PALETTE)]);
}

async function group(name) {
  const g = await api("groups/" + encodeURIComponent(name));
  const topicsOf = [...new Set(g.queues.map(q => q.topic))];
  const form = el("form", { id: "reset", onsubmit: async ev => {
    ev.preventDefault();
    const ts = form.when.value ? new Date(form.when.value).getTime() : Date.now();
    try { await api("groups/" + encodeURIComponent(name) + "/reset", { topic: form.topic.value, timestamp: String(ts) }); route(); }
    catch (e) { form.after(err(e)); }
  } }, "Reset offsets of ", el("select", { name: "topic" }, topicsOf.map(t => el("option", { value: t }, t))),
    " to ", el("input", { name: "when", type: "datetime-local", step: "1" }), el("button", {}, "Reset"),
    el("span", { class: "note" }, "(empty time: now, i.e. skip everything stored)"));
  const resend = el("button", { id: "dlq-resend", onclick: async () => {
    try { const r = await api("dlq/" + encodeURIComponent(name) + "/resend", {}); resend.after(el("span", { class: "note" }, " re-sent " + r.resent)); }
    catch (e) { resend.after(err(e)); }
  } }, "Re-send dead letters");
  page().replaceChildren(el("h2", {}, "Consumer group " + name),
    el("h3", { id: "lag-total" }, "Lag: " + g.lag),
    table(["topic", "broker", "queue", "broker offset", "consumer offset", "lag"],
      g.queues.map(q => [q.topic, q.brokerName, q.queueId, q.brokerOffset, q.consumerOffset, q.lag]), [2, 3, 4, 5]),
    form, el("h3", {}, "Members"),
    g.membersError ? el("p", { class: "note" }, "members not available: " + g.membersError)
      : table(["client id", "address", "language", "version"], g.members.map(m => [m.clientId, m.clientAddr, m.language, m.version])),
    el("h3", {}, "Dead letters"), resend,
    el("h3", {}, "Lag (" + PALETTE.units.lag + ")"), chart("lag"));
  live([s => Chart.draw(document.getElementById("lag"), s.t, only(s.lags, [name]), PALETTE.units.lag, PALETTE)]);
}

function messages() {
  const out = el("div", { id: "results" });
  const show = list => out.replaceChildren(
    table(["msgId", "topic", "queue", "offset", "tags", "keys", "stored"], list.map(m => [
      el("a", { href: "#", class: "msg", onclick: ev => { ev.preventDefault(); detail(m); } }, m.msgId),
      m.topic, m.queueId, m.queueOffset, m.tags || "", m.keys.join(","), when(m.storeTimestamp)])),
    list.length ? "" : el("p", { class: "note" }, "nothing found"));
  const detail = m => out.replaceChildren(el("h3", {}, "Message " + m.msgId),
    table(["field", "value"], Object.entries(m).filter(([k]) => k !== "properties" && k !== "body").map(([k, v]) => [k, String(v)])),
    el("h3", {}, "Properties"), table(["name", "value"], Object.entries(m.properties)),
    el("h3", {}, "Body"), el("pre", { id: "body" }, m.body));
  const search = (form, params) => async ev => {
    ev.preventDefault();
    const q = new URLSearchParams(Object.fromEntries(params.map(p => [p, form[p].value]).filter(([, v]) => v)));
    if (form.begin && form.begin.value) q.set("begin", new Date(form.begin.value).getTime());
    if (form.end && form.end.value) q.set("end", new Date(form.end.value).getTime());
    try { show(await api("messages?" + q)); } catch (e) { out.replaceChildren(err(e)); }
  };
  const byKey = el("form", { id: "by-key" }, el("input", { name: "topic", placeholder: "topic", required: "" }),
    el("input", { name: "key", placeholder: "key", required: "" }), el("button", {}, "Find by key"));
  byKey.onsubmit = search(byKey, ["topic", "key"]);
  const byId = el("form", { id: "by-id" }, el("input", { name: "id", placeholder: "message id", required: "", size: "36" }),
    el("input", { name: "topic", placeholder: "topic (for a client msgId)" }), el("button", {}, "Find by id"));
  byId.onsubmit = search(byId, ["id", "topic"]);
  const byTime = el("form", { id: "by-time" }, el("input", { name: "topic", placeholder: "topic", required: "" }),
    el("input", { name: "begin", type: "datetime-local", step: "1" }), el("input", { name: "end", type: "datetime-local", step: "1" }),
    el("button", {}, "Find by time"));
  byTime.onsubmit = search(byTime, ["topic"]);
  page().replaceChildren(el("h2", {}, "Messages"), byKey, byId, byTime, out);
  clearInterval(TIMER);
}

async function route() {
  const [, name, arg] = (location.hash || "#/cluster").split("/");
  const arg2 = arg ? decodeURIComponent(arg) : "";
  const pages = { cluster, topics, topic: () => topic(arg2), groups, group: () => group(arg2), messages };
  const active = { topic: "topics", group: "groups" }[name] || name;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === active);
  try { await (pages[name] || cluster)(); } catch (e) { page().replaceChildren(err(e)); }
}

(async () => {
  PALETTE = await api("palette");
  window.addEventListener("hashchange", route);
  route();
})();

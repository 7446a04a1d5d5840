// lbhash search page: plain JavaScript against the service's JSON API (same origin only).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { about: null, classNames: null, droppedFile: null, bits: 0 };

class ApiError extends Error {}

// The service's key (docs/search.md, "Exposing the service"), asked for once per tab when the
// service answers 401, and kept in this tab's sessionStorage only.
const KEY_HEADER = "X-Lbhash-Key";
function storedKey() { return sessionStorage.getItem("lbhash-key"); }
function askForKey(detail) {
  const key = window.prompt(`${detail}. Key:`);
  if (key) sessionStorage.setItem("lbhash-key", key);
  return Boolean(key);
}
function withKey(headers) {
  const key = storedKey();
  if (key) headers[KEY_HEADER] = key;
  return headers;
}

// One request to the service; a failure becomes one line: what was asked, the status, the service's detail.
async function api(method, path, body, form, asked = false) {
  const init = { method, headers: withKey({ Accept: "application/json" }) };
  if (form) init.body = form;
  else if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
  let reply;
  try { reply = await fetch(path, init); } catch (err) {
    throw new ApiError(`${method} ${path}: the service did not answer (${err.message})`);
  }
  if (reply.status === 401 && !asked) {
    const detail = (await reply.clone().json().catch(() => ({}))).detail || "this service needs a key";
    if (askForKey(detail)) return api(method, path, body, form, true);
  }
  const text = await reply.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (err) { data = null; }
  if (!reply.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail : (text || reply.statusText);
    throw new ApiError(`${method} ${path} failed (${reply.status}): ${detail}`);
  }
  return data;
}

function showError(message) { const box = $("error"); box.textContent = message; box.hidden = !message; }
function status(message) { $("status").textContent = message; }
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}
const fmt = (x, digits = 4) => (typeof x === "number" ? x.toFixed(digits) : String(x));
const labelText = (ids) => ids.length ? ids.map((c) => (state.classNames && state.classNames[c] !== undefined
  ? `${c} ${state.classNames[c]}` : String(c))).join(", ") : "none";

function facts(dl, rows) {
  dl.replaceChildren();
  for (const [name, value, id] of rows) dl.append(el("dt", { text: name }), el("dd", id ? { text: value, id } : { text: value }));
}

// --- the header: index, run, precision-recall curve ------------------------------------------
async function loadAbout() {
  const about = await api("GET", "/about");
  state.about = about; state.bits = about.index.bits;
  const ix = about.index;
  state.classNames = ix.class_names || null;
  facts($("index-info"), [["backend", `${ix.backend} ${ix.kind}`], ["bits", String(ix.bits)],
    ["codes", `${ix.ntotal}`, "ntotal"], ["classes", String(ix.num_classes ?? "?")],
    ["data", ix.data || "not recorded"], ["thumbnails", ix.sources ? `${ix.sources} items with a recorded source`
      : (ix.keeps_uploads ? "of added images" : "none")]]);
  const run = about.run;
  if (run) {
    const lb = run.lower_bound;
    facts($("run-info"), [["run", `${run.variant} (${run.lbhash ? "_D: with the lower-bound objective" : "without _D"})`],
      ["run bits", String(run.bits)], ["run data", run.data],
      ["mAP", run.map !== null && run.map !== undefined ? `${fmt(run.map)} (mAP@${run.topk}, ${run.n_query} queries`
        + (typeof run.chance_map === "number" ? `; a random ranking: ${fmt(run.chance_map, 3)})` : ")") : "not measured"],
      ["lower bound", lb ? `min D_inter ${fmt(lb.min_inter, 2)} / max D_intra ${fmt(lb.max_intra, 2)} = ${fmt(lb.ratio)}`
        + (lb.scale ? ` (${lb.scale})` : "") : "not measured"]]);
    if (run.pr_curve) { $("pr").hidden = false; $("pr-plot").replaceChildren(prPlot(run.pr_curve)); }
  } else {
    facts($("run-info"), [["run", about.input_kind ? `an encoder for ${about.input_kind}` : "none attached (hex codes and items only)"]]);
  }
  if (state.classNames) $("class-names").textContent = "Classes: " + state.classNames.map((n, i) => `${i} ${n}`).join(", ");
  const kind = about.input_kind;
  $("mode-image").disabled = kind !== "images";
  $("mode-features").disabled = kind !== "features";
  const first = kind === "images" ? "mode-image" : (kind === "features" ? "mode-features" : "mode-item");
  $(first).checked = true;
  showMode();
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) { const n = document.createElementNS(SVG, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); return n; }

function prPlot(curve) {
  const W = 260, H = 170, L = 34, B = 26, plot = svg("svg", { width: W, height: H, role: "img",
    "aria-label": "precision against recall" });
  const x = (r) => L + r * (W - L - 8), y = (p) => H - B - p * (H - B - 8);
  const points = curve.recall.map((r, i) => [r, curve.precision[i]]).filter(([r, p]) => r !== null && p !== null);
  plot.append(svg("line", { x1: L, y1: H - B, x2: W - 8, y2: H - B, class: "axis" }),
    svg("line", { x1: L, y1: 8, x2: L, y2: H - B, class: "axis" }),
    svg("polyline", { points: points.map(([r, p]) => `${x(r)},${y(p)}`).join(" "), class: "line" }));
  for (const [t, tx, ty] of [["0", L - 4, H - B + 14], ["recall 1", W - 48, H - B + 14], ["1", L - 12, 14],
    ["precision", L + 4, 14]]) { const n = svg("text", { x: tx, y: ty }); n.textContent = t; plot.append(n); }
  return plot;
}

function histogram(distances, bits) {
  const counts = new Array(bits + 1).fill(0);
  for (const d of distances) if (d >= 0 && d <= bits) counts[d] += 1;
  const W = Math.max(260, Math.min(640, 12 * (bits + 1) + 40)), H = 110, L = 28, B = 20;
  const top = Math.max(...counts, 1), bw = (W - L - 4) / (bits + 1);
  const plot = svg("svg", { width: W, height: H, role: "img", "aria-label": "number of results at each Hamming distance" });
  counts.forEach((c, d) => {
    if (!c) return;
    const h = (c / top) * (H - B - 14);
    const bar = svg("rect", { x: L + d * bw + 1, y: H - B - h, width: Math.max(bw - 2, 1), height: h, class: "bar" });
    const tip = svg("title", {}); tip.textContent = `distance ${d}: ${c}`; bar.append(tip); plot.append(bar);
  });
  plot.append(svg("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
  for (const [t, tx, ty] of [["0", L, H - 6], [String(bits), W - 22, H - 6], [String(top), 2, 14]]) {
    const n = svg("text", { x: tx, y: ty }); n.textContent = t; plot.append(n);
  }
  return plot;
}

// An archive member as it is (TARBALL:MEMBER -> MEMBER), a file by its last three path parts.
function shortSource(source) {
  if (source.startsWith("uploaded: ") || / row \d+$/.test(source)) return source;
  const member = /^.*?\.(?:tar|tar\.gz|tgz|tar\.bz2|tar\.xz):(.+)$/i.exec(source);
  return member ? member[1] : source.split("/").slice(-3).join("/");
}

function bitsOf(hex) {
  const out = [];
  for (let i = 0; i < hex.length; i += 2) {
    const byte = parseInt(hex.slice(i, i + 2), 16);
    let group = "";
    for (let b = 0; b < 8; b++) group += (byte >> b) & 1;  // bit j is bit j % 8 of byte j / 8
    out.push(group);
  }
  return out.join(" ");
}

// --- the query form ---------------------------------------------------------------------------
const mode = () => (document.querySelector("input[name=mode]:checked") || {}).value;
function showMode() {
  for (const panel of document.querySelectorAll(".mode-panel")) panel.hidden = panel.dataset.mode !== mode();
  const real = state.about && state.about.input_kind && (mode() === "image" || mode() === "features");
  $("rerank").disabled = !real; $("rerank-factor").disabled = !real;
  $("rerank-hint").textContent = real ? "" : "Re-ranking needs the query's real outputs: an image or a feature row through the attached run.";
}

function numbers(text, what) {
  const values = text.split(/[\s,]+/).filter(Boolean).map(Number);
  if (values.some(Number.isNaN)) throw new ApiError(`${what}: not a list of numbers`);
  return values;
}

async function queryCode() {
  // -> {code, real|null, label, item|null}
  const m = mode();
  const wantReal = !$("rerank").disabled && $("rerank").checked;
  if (m === "image") {
    const file = state.droppedFile || $("query-file").files[0];
    if (!file) throw new ApiError("choose or drop an image first");
    const form = new FormData(); form.append("files", file, file.name);
    const enc = await api("POST", "/encode/image", undefined, form);
    return { code: enc.codes[0], real: wantReal ? enc.real[0] : null, label: file.name };
  }
  if (m === "features") {
    const row = numbers($("query-features").value, "feature row");
    const enc = await api("POST", "/encode", { features: [row] });
    return { code: enc.codes[0], real: wantReal ? enc.real[0] : null, label: "feature row" };
  }
  if (m === "item") {
    const id = $("query-item").value.trim();
    if (!/^\d+$/.test(id)) throw new ApiError("give an item id (a non-negative integer)");
    const item = await api("GET", `/items/${id}`);
    return { code: item.code, real: null, label: `item ${id}` };
  }
  const code = $("query-code").value.trim().replace(/\s+/g, "");
  if (!code) throw new ApiError("paste a hex code first");
  return { code, real: null, label: "hex code" };
}

async function runSearch() {
  showError(""); status("Searching...");
  const q = await queryCode();
  const body = { codes: [q.code] };
  const value = $("how-value").value.trim();
  if (value !== "") { if ($("how-radius").checked) body.radius = Number(value); else body.k = Number(value); }
  const filter = $("label-filter").value.trim();
  if (filter) body.labels = [numbers(filter, "label filter")];
  if (q.real) { body.real = [q.real]; body.rerank_factor = Number($("rerank-factor").value || 4); }
  const started = performance.now();
  const reply = await api("POST", "/search", body);
  const took = performance.now() - started;
  const hits = reply.results[0].hits;
  $("query-code-view").hidden = false;
  $("query-bits").textContent = bitsOf(q.code);
  $("timing").textContent = `The search took ${took.toFixed(1)} ms (round trip).`;
  $("histogram").hidden = false;
  $("histogram-plot").replaceChildren(histogram(hits.map((h) => h.distance), state.bits));
  await showCards(hits);
  status(`${hits.length} results for ${q.label}.`);
}

// --- result cards -----------------------------------------------------------------------------
async function showCards(hits, added) {
  const grid = $("grid");
  grid.replaceChildren();
  grid.setAttribute("aria-busy", "true");
  const where = {};
  if (hits.length) {
    const ids = hits.map((h) => h.id);
    for (let i = 0; i < ids.length; i += 1000) {
      const reply = await api("POST", "/sources", { ids: ids.slice(i, i + 1000) });
      for (const item of reply.items) where[item.id] = item;
    }
  }
  hits.forEach((hit, rank) => grid.append(card(hit, rank, where[hit.id] || {}, added)));
  grid.setAttribute("aria-busy", "false");
}

// A thumbnail: its URL, or, when reads need a key (which an <img> cannot send), fetched with it.
async function showThumbnail(img, url) {
  if (!(state.about && state.about.access && state.about.access.read_key)) { img.src = url; return; }
  try {
    const reply = await fetch(url, { headers: withKey({}) });
    if (!reply.ok) throw new Error(String(reply.status));
    img.src = URL.createObjectURL(await reply.blob());
  } catch (err) { img.dispatchEvent(new Event("error")); }
}

function card(hit, rank, origin, added) {
  const li = el("li", { class: "card", "data-id": String(hit.id), "data-labels": hit.labels.join(",") });
  if (origin.image) {
    const img = el("img", { class: "thumb", loading: "lazy",
      alt: `item ${hit.id}${origin.source ? ": " + origin.source : ""}`, width: "128", height: "128" });
    let tries = 0;  // the service bounds thumbnail decoding (429 beyond it): try again a little later
    const load = () => showThumbnail(img, `/items/${hit.id}/image` + (tries ? `?try=${tries}` : ""));
    img.addEventListener("error", () => { if (++tries <= 3) setTimeout(load, 1000 * tries); });
    load();
    li.append(img);
  }
  li.append(el("div", { class: "row" }, el("strong", { class: "item-id", text: `id ${hit.id}` }),
    el("span", { class: "rank", text: added ? "added" : `#${rank + 1}` })));
  if (hit.distance !== undefined) {
    li.append(el("div", { class: "row" }, el("span", { class: "distance", "data-distance": String(hit.distance),
      text: `distance ${hit.distance}` }), hit.score !== undefined && hit.score !== null
      ? el("span", { class: "score", text: `score ${fmt(hit.score, 3)}` }) : null));
  }
  li.append(el("div", { class: "labels", text: `labels: ${labelText(hit.labels)}` }));
  const full = origin.source || "";
  li.append(el("div", { class: "source", "data-source": full, title: full || "no source recorded",
    text: full ? shortSource(full) : "source not recorded" }));
  const more = el("button", { type: "button", class: "secondary more", text: "More like this",
    "aria-label": `more like item ${hit.id}` });
  more.addEventListener("click", () => moreLike(hit.id));
  const del = el("button", { type: "button", class: "danger delete", text: "Delete", "aria-label": `delete item ${hit.id}` });
  del.addEventListener("click", () => deleteItem(hit.id, li));
  li.append(el("div", { class: "actions" }, more, del));
  return li;
}

async function moreLike(id) {
  $("mode-item").checked = true; $("query-item").value = String(id); showMode();
  await guarded(runSearch);
  $("results-title").focus();
}

async function deleteItem(id, li) {
  if (!window.confirm(`Delete item ${id} from the index?`)) return;
  await guarded(async () => {
    const reply = await api("DELETE", `/items/${id}`);
    li.remove();
    $("ntotal").textContent = String(reply.ntotal);
    status(`Deleted item ${id}; the index holds ${reply.ntotal} codes.`);
  });
}

async function addImages() {
  showError("");
  const files = $("add-files").files;
  if (!files.length) throw new ApiError("choose images to add first");
  const form = new FormData();
  for (const f of files) form.append("files", f, f.name);
  const text = $("add-labels").value.trim();
  if (text) form.append("labels", text.includes(";") ? text : Array(files.length).fill(text).join(";"));
  status("Adding...");
  const reply = await api("POST", "/items/image", undefined, form);
  $("ntotal").textContent = String(reply.ntotal);
  const items = await Promise.all(reply.ids.map((id) => api("GET", `/items/${id}`)));
  $("query-code-view").hidden = true; $("histogram").hidden = true;
  $("timing").textContent = `Added ${reply.ids.length} image(s) as id ${reply.ids.join(", ")}`;
  await showCards(items.map((it) => ({ id: it.id, labels: it.labels })), true);
  status(`Added ${reply.ids.length} image(s); the index holds ${reply.ntotal} codes.`);
  $("add-files").value = "";
}

// Every action ends by counting itself in #results[data-done] (what tests and scripts wait on).
async function guarded(task) {
  try { await task(); } catch (err) {
    showError(err instanceof ApiError ? err.message : `unexpected error: ${err.message}`);
    status("");
  } finally {
    const results = $("results");
    results.dataset.done = String(Number(results.dataset.done || 0) + 1);
  }
}

function preview(file) {  // the query image, shown from the browser's own copy (a blob: URL)
  const img = $("query-preview");
  if (img.src) URL.revokeObjectURL(img.src);
  img.hidden = !file;
  if (file) { img.src = URL.createObjectURL(file); img.alt = `query image ${file.name}`; }
}

function setUp() {
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", showMode);
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(runSearch); });
  $("add-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(addImages); });
  $("query-file").addEventListener("change", () => {
    state.droppedFile = null; const f = $("query-file").files[0];
    $("query-file-name").textContent = f ? `chosen: ${f.name}` : "";
    preview(f);
  });
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault(); drop.classList.remove("over");
    const f = e.dataTransfer.files[0];
    if (f) { state.droppedFile = f; $("query-file-name").textContent = `dropped: ${f.name}`; preview(f); }
  });
  guarded(loadAbout);
}

document.addEventListener("DOMContentLoaded", setUp);

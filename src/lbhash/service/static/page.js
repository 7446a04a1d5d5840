// lbhash search page: plain JavaScript modules against the service's JSON API (same origin only).
// This module holds the page's state, the header, the query bar and the actions; cards.js the
// results, duplicates.js the groups of copies, api.js the requests and their errors, address.js the
// query in the URL.

import { readAddress, writeAddress } from "./address.js";
import { ApiError, api } from "./api.js";
import { origins, showCards } from "./cards.js";
import { histogram, prPlot } from "./charts.js";
import { GROUPS_PER_PAGE, showDuplicates } from "./duplicates.js";
import { $, bitsView, className, el, fmt } from "./dom.js";

// file: the query image chosen or dropped (an image query is one request, /search/image, which
// encodes it and answers the hits with their sources); searched: a search has shown results;
// latest: the number of the last search started (an earlier one that ends later shows nothing).
// duplicatesAt: the first group of the duplicates view's page; searchAddress: the address it was opened from.
const state = { about: null, names: null, bits: 0, file: null, searched: false, latest: 0, duplicatesAt: 0,
  searchAddress: "" };

function status(message) { $("status").textContent = message; }
function showError(err) {
  const box = $("error");
  box.hidden = !err;
  box.textContent = !err ? "" : (err instanceof ApiError ? err.message : `Something went wrong in the page: ${err.message}.`);
  box.dataset.detail = err && err.detail ? err.detail : "";  // what the service said, for whoever runs it
  box.title = box.dataset.detail;
}

// Every action starts from a clean slate (no status or error of the last one left) and ends by
// counting itself in #results[data-done] (what tests and scripts wait on).
async function guarded(task) {
  showError(null); status(""); $("timing").textContent = "";
  try { await task(); } catch (err) { showError(err); status(""); } finally {
    const results = $("results");
    results.dataset.done = String(Number(results.dataset.done || 0) + 1);
  }
}

// --- the header: index, run, precision-recall curve ------------------------------------------
function facts(dl, rows) {
  dl.replaceChildren();
  for (const [name, value, id] of rows) dl.append(el("dt", { text: name }), el("dd", id ? { text: value, id } : { text: value }));
}

async function loadAbout() {
  const about = await api("GET", "/about");
  const ix = about.index, run = about.run, kind = about.input_kind;
  Object.assign(state, { about, bits: ix.bits, names: ix.class_names || null });
  facts($("index-info"), [["backend", `${ix.backend} ${ix.kind}`], ["bits", String(ix.bits)],
    ["codes", `${ix.ntotal}`, "ntotal"], ["classes", String(ix.num_classes ?? "?")],
    ["data", ix.data || "not recorded"], ["thumbnails", ix.sources ? `${ix.sources} items with a recorded source`
      : (kind === "images" ? "of added images" : "none")]]);
  if (run) {
    const lb = run.lower_bound;
    facts($("run-info"), [["run", `${run.variant} (${run.lbhash ? "_D: with the lower-bound objective" : "without _D"})`],
      ["run bits", String(run.bits)], ["run data", run.data],
      ["mAP", run.map !== null && run.map !== undefined ? `${fmt(run.map)} (mAP@${run.topk}, ${run.n_query} queries`
        + (typeof run.chance_map === "number" ? `; a random ranking: ${fmt(run.chance_map, 3)})` : ")")
        : typeof run.validation_map === "number" ? `${fmt(run.validation_map)} (validation mAP@all: `
          + `${run.n_validation ?? "the"} held-out training items searched among the others; no query part`
          + (run.protocol ? `, protocol ${run.protocol})` : ")") : "not measured"],
      ["lower bound", lb ? `min D_inter ${fmt(lb.min_inter, 2)} / max D_intra ${fmt(lb.max_intra, 2)} = ${fmt(lb.ratio)}`
        + (lb.scale ? ` (${lb.scale})` : "") : "not measured"]]);
    if (run.pr_curve) { $("pr").hidden = false; $("pr-plot").replaceChildren(prPlot(run.pr_curve)); }
  } else {
    facts($("run-info"), [["run", kind ? `an encoder for ${kind}` : "none attached (codes and items only)"]]);
  }
  classFilter(ix.num_classes || 0);
  $("looks-like").value = String(ix.looks_like); $("looks-like-value").textContent = String(ix.looks_like);
  if (state.names) $("class-names").textContent = "Classes: " + state.names.map((n, i) => `${i} ${n}`).join(", ");
  $("add").hidden = kind !== "images" || about.access.read_only;  // adding encodes images through the run
  $("mode-image").disabled = kind !== "images";
  $("mode-features").disabled = kind !== "features";
  // the groups of copies are found by instance codes (docs/duplicates.md)
  $("duplicates-button").disabled = !ix.instance_bits;
  $("duplicates-button").title = ix.instance_bits ? "the groups of copies inside the index"
    : "the index keeps no instance codes, so it cannot tell copies from look-alikes";
  $(kind === "images" ? "mode-image" : (kind === "features" ? "mode-features" : "mode-item")).checked = true;
  $("results-hint").textContent = (kind === "images" ? "Choose or drop an image to search; or " : "Give ")
    + "an item id, a code" + (kind === "features" ? " or a feature row" : "")
    + ". Each result's \u201cMore like this\u201d searches with it; its picture or \u201cDetails\u201d shows more.";
  showMode();
}

// --- the class filter: boxes named by class ---------------------------------------------------
function classFilter(numClasses) {
  const list = $("class-list");
  list.replaceChildren();
  $("class-filter").hidden = !numClasses;
  for (let c = 0; c < numClasses; c++) {
    const box = el("input", { type: "checkbox", value: String(c), id: `class-${c}` });
    box.addEventListener("change", () => { summarize(); if (state.searched) guarded(runSearch); });
    const name = state.names && state.names[c] !== undefined ? state.names[c] : `class ${c}`;
    list.append(el("label", { class: "chip", title: `class id ${c}` }, box, ` ${name}`));
  }
  summarize();
}
const classBoxes = () => [...document.querySelectorAll("#class-list input")];
const chosenClasses = () => classBoxes().filter((b) => b.checked).map((b) => Number(b.value));
function summarize() {
  const chosen = chosenClasses();
  $("options-summary").textContent = (chosen.length ? chosen.map((c) => className(c, state.names)).join(", ")
    : "all classes") + ($("rescore").checked && !$("rescore").disabled ? "; re-scored" : "");
}

// --- the query -----------------------------------------------------------------------------------
const mode = () => (document.querySelector("input[name=mode]:checked") || {}).value;
function showMode() {
  for (const panel of document.querySelectorAll(".mode-panel")) panel.hidden = panel.dataset.mode !== mode();
  const kept = ranks();
  const own = mode() === "item" || (state.about && state.about.input_kind && (mode() === "image" || mode() === "features"));
  $("rescore").disabled = !(kept && own); $("rescore-factor").disabled = !(kept && own);
  $("looks-like").disabled = !(kept && own);
  $("rescore-hint").textContent = !kept
    ? "The index keeps no embeddings or instance codes: results come in Hamming order, and items at the same distance in id order."
    : (own ? "" : "Re-scoring needs the query's embedding: an image, a feature row through the attached run, or an item.");
  summarize();
}

function howMany() {  // -> {k, radius}: one of them null
  const text = $("how-value").value.trim() || "10", radius = $("how-radius").checked;
  if (!/^\d+$/.test(text) || (!radius && Number(text) < 1)) {
    throw new ApiError(radius ? "The radius must be a whole number, 0 or more." : "k must be a whole number, 1 or more.");
  }
  return radius ? { k: null, radius: Number(text) } : { k: Number(text), radius: null };
}

// -> {label, item|null, labels (of an item), file|null, code|null, features|null}: what the bar asks
async function theQuery() {
  const m = mode();
  if (m === "image") {
    if (!state.file) throw new ApiError("Choose or drop an image first.");
    return { file: state.file, label: state.file.name, item: null };
  }
  if (m === "features") {
    const values = $("query-features").value.split(/[\s,]+/).filter(Boolean).map(Number);
    if (!values.length || values.some(Number.isNaN)) throw new ApiError("The feature row must be numbers separated by commas or spaces.");
    return { features: values, label: "the feature row", item: null };
  }
  if (m === "item") {
    const id = $("query-item").value.trim();
    if (!/^\d+$/.test(id)) throw new ApiError("Give an item id (a whole number, 0 or more).");
    const item = await api("GET", `/items/${id}`);
    return { code: item.code, label: `item ${id}`, item: Number(id), labels: item.labels, embedding: item.embedding };
  }
  const code = $("query-code").value.trim().replace(/\s+/g, "");
  if (!code) throw new ApiError("Paste a code (hex) first.");
  return { code, label: "the code", item: null };
}

// the index keeps what a ranked search reads: embeddings or instance codes (docs/search.md, "Ranking")
const ranks = () => Boolean(state.about && (state.about.index.embedding_dim || state.about.index.instance_bits));

// One request: /search/image for an image (the service encodes it: its code and embedding
// never travel through the page), else /search with the code (an item's with its stored
// embedding) or the feature row.
function searchRequest(q, how, labels) {
  // an item's own code is among its hits: ask for one more, shown apart as the query
  const k = how.radius !== null ? null : (q.item === null ? how.k : Math.min(how.k + 1, state.about.limits.max_k));
  const kept = ranks();
  const rescore = !$("rescore").disabled && $("rescore").checked ? Number($("rescore-factor").value || 4) : null;
  // the slider at the index's default sends nothing: left out, a codes-only index weighs each query's own
  const looksLike = Number($("looks-like").value) === Number(state.about.index.looks_like) ? null : $("looks-like").value;
  if (q.file) {
    const form = new FormData();
    form.append("files", q.file, q.file.name);
    if (k !== null) form.append("k", String(k)); else form.append("radius", String(how.radius));
    if (labels.length) form.append("labels", labels.join(","));
    if (rescore !== null && k !== null) {
      form.append("rescore_factor", String(rescore));
      if (looksLike !== null) form.append("looks_like", looksLike);
    } else if (kept) form.append("rescore", "false");
    return ["/search/image", undefined, form];
  }
  const body = q.features ? { features: [q.features] } : { codes: [q.code] };
  if (k !== null) body.k = k; else body.radius = how.radius;
  if (labels.length) body.labels = [labels];
  if (rescore !== null && k !== null && (q.features || q.embedding)) {
    body.rescore_factor = rescore;
    if (looksLike !== null) body.looks_like = Number(looksLike);
    if (q.embedding) body.embeddings = [q.embedding];
  } else if (kept && !q.code) body.rescore = false;
  return ["/search", body, undefined];
}

async function runSearch() {
  const mine = ++state.latest;
  const how = howMany(), labels = chosenClasses();
  const q = await theQuery();
  if (mine !== state.latest) return;  // a later search has started: its results are the ones to show
  status(q.file ? `Searching with ${q.file.name}...` : "Searching...");
  const [path, body, form] = searchRequest(q, how, labels);
  const started = performance.now();
  const reply = await api("POST", path, body, form);
  const took = performance.now() - started;
  const result = reply.results[0];
  let hits = result.hits;
  const entries = [];
  if (q.item !== null) {
    hits = hits.filter((h) => h.id !== q.item).slice(0, how.radius === null ? how.k : undefined);
    entries.push({ id: q.item, labels: q.labels, badge: "query", kind: "query" });
  }
  entries.push(...hits.map((h, rank) => ({ ...h, badge: `#${rank + 1}`, kind: "hit" })));
  // every search's hits carry their sources; a "more like this" item missing from its own hits is one request more
  const where = Object.fromEntries(result.hits.map((h) => [h.id, h]));
  if (q.item !== null && !(q.item in where)) Object.assign(where, await origins([q.item]));
  if (mine !== state.latest) return;
  $("results-hint").textContent = "";
  $("query-code-view").hidden = false;
  $("query-bits").replaceChildren(bitsView(result.code));
  $("histogram").hidden = false;
  $("histogram-plot").replaceChildren(histogram(hits.map((h) => h.distance), state.bits));
  showCards(entries, where, cardContext(result.code));
  showView("results");
  state.searched = true;
  writeAddress({ mode: mode(), item: q.item, code: result.code, k: how.k, radius: how.radius, labels });
  $("timing").textContent = `The search took ${took.toFixed(1)} ms (round trip).`;
  status(`${hits.length} results for ${q.label}` + (q.item !== null ? "; the query item is shown first, marked \u201cquery\u201d." : ".")
    + tiesNote(hits));
}

// Hamming order only, and most hits share the query's code: their order says nothing about them
function tiesNote(hits) {
  if (!hits.length || hits.some((h) => h.score !== undefined)) return "";
  const same = hits.filter((h) => h.distance === 0).length;
  if (2 * same <= hits.length) return "";
  const why = state.about.index.embedding_dim ? "re-scoring is off"
    : "the index keeps no embeddings to tell them apart (build it with its embeddings to re-score)";
  return ` ${same} of the ${hits.length} share the query's code exactly: at equal distance they come in id order, `
    + `since ${why}.`;
}

function cardContext(queryCode) {
  const { about } = state;
  return { names: state.names, keyed: about.access.read_key, queryCode, canChange: !about.access.read_only,
    sources: Boolean(about.index.sources) || about.input_kind === "images", onMore: moreLike, onDelete: deleteItem };
}

// The query of the page's address (a shared or reloaded link): true when it can search again.
function applyAddress() {
  const a = readAddress();
  const radio = ["image", "item", "code", "features"].includes(a.mode) ? $(`mode-${a.mode}`) : null;
  if (radio && !radio.disabled) radio.checked = true;
  if (a.item !== null) $("query-item").value = String(a.item);
  if (a.code) $("query-code").value = a.code;
  if (a.radius !== null || a.k !== null) {
    $(a.radius !== null ? "how-radius" : "how-k").checked = true;
    $("how-value").value = String(a.radius ?? a.k);
  }
  for (const box of classBoxes()) box.checked = a.labels.includes(Number(box.value));
  showMode();
  if (a.mode === "image" || a.mode === "features") {
    $("results-hint").textContent = `An ${a.mode === "image" ? "image" : "feature row"} is not kept in the page's address: `
      + "give it again to search (k and the filter are as the link had them).";
  }
  return Boolean(radio && radio.checked && (a.mode === "item" || a.mode === "code"));
}

// --- the duplicates view: shown instead of the results ------------------------------------------
function showView(view) {
  const dup = view === "duplicates";
  $("results").hidden = dup; $("duplicates").hidden = !dup;
  $("duplicates-button").setAttribute("aria-pressed", String(dup));
  $("duplicates-button").textContent = dup ? "Back to the search" : "Duplicates";
}

async function openDuplicates(offset, write = true) {
  status("Finding the copies in the index...");
  const shown = await showDuplicates(offset, { keyed: state.about.access.read_key, onMore: moreLike });
  state.duplicatesAt = shown.offset;
  showView("duplicates");
  if (write) writeAddress({ mode: "duplicates", offset: shown.offset });
  status(shown.text);
}

// The button: the duplicates view, or back to the results as they were, at their address.
async function toggleDuplicates() {
  if ($("duplicates").hidden) {
    state.searchAddress = readAddress().duplicates === null ? window.location.search : "";
    await guarded(() => openDuplicates(0));
    if (!$("duplicates").hidden) $("duplicates-title").focus();
    return;
  }
  showView("results");
  const back = window.location.pathname + state.searchAddress;
  if (back !== window.location.pathname + window.location.search) window.history.pushState(null, "", back);
}

// An address with ?duplicates= opens that page of groups; one with a query searches again.
async function followAddress() {
  const at = readAddress().duplicates;
  if (at !== null) await guarded(() => openDuplicates(at, false));
  else if (applyAddress()) await guarded(runSearch);
  else showView("results");
}

// --- actions ---------------------------------------------------------------------------------
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
  const files = $("add-files").files;
  if (!files.length) throw new ApiError("Choose images to add first.");
  const form = new FormData();
  for (const f of files) form.append("files", f, f.name);
  const text = $("add-labels").value.trim();
  if (text) form.append("labels", text.includes(";") ? text : Array(files.length).fill(text).join(";"));
  status("Adding...");
  const reply = await api("POST", "/items/image", undefined, form);
  $("ntotal").textContent = String(reply.ntotal);
  const items = await Promise.all(reply.ids.map((id) => api("GET", `/items/${id}`)));
  $("query-code-view").hidden = true; $("histogram").hidden = true;
  const entries = items.map((it) => ({ id: it.id, labels: it.labels, badge: "added", kind: "added" }));
  showCards(entries, await origins(reply.ids), cardContext(null));
  showView("results");
  status(`Added ${reply.ids.length} image(s) as id ${reply.ids.join(", ")}; the index holds ${reply.ntotal} codes.`);
  $("add-files").value = "";
}

// A chosen or dropped image searches at once.
function chooseImage(file) {
  state.file = file;
  $("mode-image").checked = true; showMode();
  const img = $("query-preview");  // shown from the browser's own copy (a blob: URL)
  if (img.src) URL.revokeObjectURL(img.src);
  img.src = URL.createObjectURL(file); img.alt = `query image ${file.name}`; img.hidden = false;
  guarded(runSearch);
}

// A drop anywhere on the page (but on the add form's own file field) is an image query.
function acceptDrops() {
  const drop = $("drop"), ours = (e) => !$("mode-image").disabled && !(e.target.closest && e.target.closest("#add"));
  document.addEventListener("dragover", (e) => { if (ours(e)) { e.preventDefault(); drop.classList.add("over"); } });
  document.addEventListener("dragleave", (e) => { if (!e.relatedTarget) drop.classList.remove("over"); });
  document.addEventListener("drop", (e) => {
    drop.classList.remove("over");
    if (!ours(e)) return;
    e.preventDefault();
    const file = e.dataTransfer && e.dataTransfer.files[0];
    if (file) chooseImage(file);
  });
}

async function setUp() {
  for (const radio of document.querySelectorAll("input[name=mode]")) radio.addEventListener("change", showMode);
  $("rescore").addEventListener("change", summarize);
  $("looks-like").addEventListener("input", () => { $("looks-like-value").textContent = $("looks-like").value; });
  // the slider let go re-ranks the results shown, as a class ticked filters them
  $("looks-like").addEventListener("change", () => { if (state.searched) guarded(runSearch); });
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(runSearch); });
  $("add-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(addImages); });
  $("query-file").addEventListener("change", () => { const f = $("query-file").files[0]; if (f) chooseImage(f); });
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  $("duplicates-button").addEventListener("click", toggleDuplicates);
  $("dup-prev").addEventListener("click", () => guarded(() => openDuplicates(Math.max(0, state.duplicatesAt - GROUPS_PER_PAGE))));
  $("dup-next").addEventListener("click", () => guarded(() => openDuplicates(state.duplicatesAt + GROUPS_PER_PAGE)));
  acceptDrops();
  // the sticky query bar's height, so that what the page scrolls to is not hidden under it
  new ResizeObserver(([entry]) => document.documentElement.style.setProperty("--bar-height",
    `${Math.ceil(entry.target.getBoundingClientRect().height)}px`)).observe($("search-form"));
  window.addEventListener("popstate", () => { if (state.about) followAddress(); });
  await guarded(loadAbout);
  if (state.about) await followAddress();
}

setUp();

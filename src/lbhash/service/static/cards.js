// The result cards and the larger view of one item.
//
// An entry is {id, labels, distance?, score?, badge, kind}: kind "query" (the item a "more like
// this" asked about, shown first and not ranked), "hit" (badge "#1", "#2", ...) or "added".
// ctx: {names (class names or null), keyed (reads need the key), sources (the index records
// where items came from), canChange, queryCode (hex or null), onMore(id), onDelete(id, li)}.

import { api, withKey } from "./api.js";
import { $, bitsView, el, fmt, labelText } from "./dom.js";

// The sources, codes and whether there is an image, of items by id (POST /sources).
export async function origins(ids) {
  const where = {};
  for (let i = 0; i < ids.length; i += 1000) {
    const reply = await api("POST", "/sources", { ids: ids.slice(i, i + 1000) });
    for (const item of reply.items) where[item.id] = item;
  }
  return where;
}

// where: origins() of the entries' ids.
export function showCards(entries, where, ctx) {
  $("grid").replaceChildren(...entries.map((entry) => card(entry, where[entry.id] || {}, ctx)));
}

// An image: its URL, or, when reads need a key (which an <img> cannot send), fetched with it.
// The service bounds thumbnail decoding (429 beyond it): a failed load is tried again later.
export function showImage(img, url, keyed) {
  let tries = 0;
  const load = async () => {
    const address = url + (tries ? `${url.includes("?") ? "&" : "?"}try=${tries}` : "");
    if (!keyed) { img.src = address; return; }
    try {
      const reply = await fetch(address, { headers: withKey({}) });
      if (!reply.ok) throw new Error(String(reply.status));
      img.src = URL.createObjectURL(await reply.blob());
    } catch (err) { img.dispatchEvent(new Event("error")); }
  };
  img.addEventListener("error", () => { if (++tries <= 3) setTimeout(load, 1000 * tries); });
  load();
}

// An archive member as it is (TARBALL:MEMBER -> MEMBER), a file by its last three path parts.
function shortSource(source) {
  if (source.startsWith("uploaded: ") || / row \d+$/.test(source)) return source;
  const member = /^.*?\.(?:tar|tar\.gz|tgz|tar\.bz2|tar\.xz):(.+)$/i.exec(source);
  return member ? member[1] : source.split("/").slice(-3).join("/");
}

function card(entry, origin, ctx) {
  const { id } = entry;
  const li = el("li", { class: `card ${entry.kind}`, "data-id": String(id), "data-labels": entry.labels.join(",") });
  const view = el("button", { type: "button", class: "view", "aria-label": `view item ${id} larger` });
  view.addEventListener("click", () => openViewer(entry, origin, ctx));
  if (origin.image) {
    const img = el("img", { class: "thumb", loading: "lazy", alt: `item ${id}${origin.source ? ": " + origin.source : ""}`,
      width: "128", height: "128" });
    showImage(img, `/items/${id}/image`, ctx.keyed);
    view.append(img);
    li.append(view);
  }
  li.append(el("div", { class: "row" }, el("strong", { class: "item-id", text: `id ${id}` }),
    el("span", { class: entry.kind === "query" ? "badge query" : "rank", text: entry.badge })));
  if (entry.distance !== undefined) {
    li.append(el("div", { class: "row" }, el("span", { class: "distance", "data-distance": String(entry.distance),
      text: `distance ${entry.distance}` }), entry.score !== undefined && entry.score !== null
      ? el("span", { class: "score", title: "the ranking's score: (1 - looks like) x class agreement + looks like x similarity\u00b3",
        text: `score ${fmt(entry.score, 3)}` }) : null,
      entry.same ? el("span", { class: "badge same", title: "an edited copy or a duplicate of the query (docs/search.md)",
        text: "same picture" }) : null));
  }
  if (origin.code) li.append(el("code", { class: "code", title: "the item's code (hex)", text: origin.code }));
  li.append(el("div", { class: "labels", text: `labels: ${labelText(entry.labels, ctx.names)}` }));
  if (ctx.sources) {
    const full = origin.source || "";
    li.append(el("div", { class: full ? "source" : "source none", "data-source": full, title: full || "no source recorded",
      text: full ? shortSource(full) : "source not recorded" }));
  }
  const actions = el("div", { class: "actions" });
  if (!origin.image) {
    view.textContent = "Details";
    view.classList.add("secondary");
    actions.append(view);
  }
  if (entry.kind !== "query") actions.append(moreButton(id, ctx));
  if (ctx.canChange) {
    const del = el("button", { type: "button", class: "danger delete", text: "Delete", "aria-label": `delete item ${id}` });
    del.addEventListener("click", () => ctx.onDelete(id, li));
    actions.append(del);
  }
  li.append(actions);
  return li;
}

function moreButton(id, ctx, close) {
  const more = el("button", { type: "button", class: "secondary more", text: "More like this",
    "aria-label": `more like item ${id}` });
  more.addEventListener("click", () => { if (close) close(); ctx.onMore(id); });
  return more;
}

// The larger view: the image at up to 512 px, the full source, and the code's bits with those
// that differ from the query's marked.
function openViewer(entry, origin, ctx) {
  const dialog = $("viewer"), body = $("viewer-body");
  $("viewer-title").textContent = `Item ${entry.id}` + (entry.kind === "query" ? " (the query)" : "");
  body.replaceChildren();
  if (origin.image) {
    const img = el("img", { class: "large", alt: `item ${entry.id}` });
    showImage(img, `/items/${entry.id}/image?size=large`, ctx.keyed);
    body.append(img);
  }
  const facts = el("dl", { class: "facts" });
  const fact = (name, value) => facts.append(el("dt", { text: name }), el("dd", {}, value));
  if (entry.distance !== undefined) {
    fact("distance", `${entry.distance} ${entry.distance === 1 ? "bit differs" : "bits differ"} from the query's code`);
  }
  fact("labels", labelText(entry.labels, ctx.names));
  if (ctx.sources) fact("source", origin.source || "not recorded");
  if (origin.code) {
    fact("code (hex)", el("code", { class: "code", text: origin.code }));
    const differs = ctx.queryCode && entry.kind !== "query";
    fact("bits", el("span", {}, bitsView(origin.code, differs ? ctx.queryCode : null),
      differs ? el("span", { class: "hint", text: " (marked: those that differ from the query's)" }) : null));
  }
  body.append(facts);
  if (entry.kind !== "query") body.append(el("p", {}, moreButton(entry.id, ctx, () => dialog.close())));
  dialog.showModal();
}

// The duplicates view: the groups of copies inside the index (GET /duplicates, largest first), a page of
// groups at a time, each a row of its items (thumbnail and id) with the pairs that joined them. A click
// on an item searches with it (ctx.onMore).
// ctx: {keyed (reads need the key), onMore(id)}.

import { api } from "./api.js";
import { showImage } from "./cards.js";
import { $, el, fmt } from "./dom.js";

export const GROUPS_PER_PAGE = 10;
const ITEMS_SHOWN = 12;  // of a group; the others are counted
const PAIRS_SHOWN = 6;   // of a group's pairs (the strongest); the others are counted

// Shows the page of groups from `offset`; -> {offset, text}: where it is and a line for the status.
export async function showDuplicates(offset, ctx) {
  const reply = await api("GET", `/duplicates?offset=${offset}&limit=${GROUPS_PER_PAGE}`);
  const { total, groups } = reply;
  $("duplicates-summary").textContent = `${total} ${total === 1 ? "group" : "groups"} of copies among `
    + `${reply.items} items: ${reply.pairs} ${reply.pairs === 1 ? "pair" : "pairs"} ${measureText(reply)}.`;
  $("dup-groups").replaceChildren(...groups.map((g, k) => group(g, reply.offset + k + 1, ctx)));
  $("dup-groups").start = reply.offset + 1;
  const last = reply.offset + groups.length;
  $("dup-page").textContent = groups.length ? `groups ${reply.offset + 1}-${last} of ${total}` : `none of ${total}`;
  $("dup-prev").disabled = reply.offset === 0;
  $("dup-next").disabled = last >= total;
  const text = !total ? "No copies found in the index." : (groups.length ? `Groups ${reply.offset + 1} to ${last} of ${total}.`
    : `There are only ${total} groups.`);
  return { offset: reply.offset, text };
}

// what a pair had to reach: the index's same-picture mark (or the threshold given)
function measureText(reply) {
  const bits = (share) => `whose instance codes differ in at most ${fmt(100 * share, 1)}% of their bits`;
  const parts = [reply.measure === "instance" ? bits(reply.threshold)
    : reply.measure === "cosine" ? `whose centred cosine similarity is at least ${fmt(reply.threshold, 3)}`
    : `whose cosine stands at least ${fmt(reply.threshold, 3)} above their neighbours'`];
  if (reply.instance_threshold != null) parts.push(bits(reply.instance_threshold));
  if (reply.perceptual_threshold != null) {
    parts.push(`whose perceptual hashes differ in at most ${Math.floor(64 * reply.perceptual_threshold)} of 64 bits`);
  }
  return parts.join(", or ");
}

function group(g, number, ctx) {
  const li = el("li", { class: "dup-group", "data-items": g.items.join(",") });
  li.append(el("h3", { text: `Group ${number}: ${g.size} items` }));
  const row = el("ul", { class: "dup-items" });
  g.items.slice(0, ITEMS_SHOWN).forEach((id, k) => row.append(item(id, g.sources[k], g.images[k], ctx)));
  if (g.size > ITEMS_SHOWN) row.append(el("li", { class: "dup-more hint", text: `and ${g.size - ITEMS_SHOWN} more` }));
  li.append(row);
  const pairs = g.pairs.slice(0, PAIRS_SHOWN).map(([a, b, s]) => `${a} & ${b}: ${fmt(s, 3)}`).join("; ");
  li.append(el("p", { class: "dup-pairs", title: "the pairs that joined the group, strongest first: id & id: similarity",
    text: `pairs: ${pairs}` + (g.pair_count > PAIRS_SHOWN ? `; ${g.pair_count - PAIRS_SHOWN} more` : "") }));
  return li;
}

function item(id, source, image, ctx) {
  const li = el("li", { class: "dup-item", "data-id": String(id) });
  const button = el("button", { type: "button", class: "view", title: source || `item ${id}`,
    "aria-label": `search with item ${id}` });
  if (image) {
    const img = el("img", { class: "thumb", loading: "lazy", alt: `item ${id}${source ? ": " + source : ""}`,
      width: "96", height: "96" });
    showImage(img, image, ctx.keyed);
    button.append(img);
  } else {
    button.append(el("span", { class: "no-thumb", text: "no image" }));
  }
  button.addEventListener("click", () => ctx.onMore(id));
  li.append(button, el("span", { class: "item-id", text: `id ${id}` }));
  return li;
}

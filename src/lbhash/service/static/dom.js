// Small DOM helpers shared by the page's modules.

export const $ = (id) => document.getElementById(id);

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

export const fmt = (x, digits = 4) => (typeof x === "number" ? x.toFixed(digits) : String(x));

// A class id with its name when the index recorded names ("2 red"), else the id alone.
export function className(id, names) {
  return names && names[id] !== undefined ? `${id} ${names[id]}` : String(id);
}
export const labelText = (ids, names) => (ids.length ? ids.map((c) => className(c, names)).join(", ") : "none");

// The bits of a packed code: bit j is bit j % 8 of byte j / 8 (as lbhash packs them).
export function bitsOf(hex) {
  const out = [];
  for (let i = 0; i < hex.length; i += 2) {
    const byte = parseInt(hex.slice(i, i + 2), 16);
    for (let b = 0; b < 8; b++) out.push((byte >> b) & 1);
  }
  return out;
}

// The bits in groups of 8, those that differ from `other` (when given) marked: <mark>.
export function bitsView(hex, other) {
  const mine = bitsOf(hex), theirs = other ? bitsOf(other) : null;
  const code = el("code", { class: "bits" });
  mine.forEach((bit, j) => {
    if (j && j % 8 === 0) code.append(" ");
    code.append(theirs && theirs[j] !== bit ? el("mark", { text: String(bit), title: `bit ${j} differs` }) : String(bit));
  });
  return code;
}

// The query in the page's address (?item=12&k=5&labels=1,3), so that a result can be shared,
// reloaded and gone back to. An image or a feature row is not kept there (a file cannot be in a
// URL): their address keeps the mode, k or radius and the filter. The duplicates view is ?duplicates=OFFSET.

export function readAddress() {
  const p = new URLSearchParams(window.location.search);
  const whole = (name) => (/^\d+$/.test(p.get(name) || "") ? Number(p.get(name)) : null);
  const code = /^[0-9a-fA-F]+$/.test(p.get("code") || "") ? p.get("code") : null;
  const item = whole("item");
  return {
    mode: item !== null ? "item" : (code ? "code" : p.get("mode")), item, code, k: whole("k"), radius: whole("radius"),
    labels: (p.get("labels") || "").split(",").filter((s) => /^\d+$/.test(s)).map(Number), duplicates: whole("duplicates"),
  };
}

// q: {mode, item, code, k, radius, labels}, or {mode: "duplicates", offset}: a new history entry when the
// address changes.
export function writeAddress(q) {
  const parts = q.mode === "duplicates" ? [`duplicates=${q.offset}`] : searchParts(q);
  const address = `${window.location.pathname}?${parts.join("&")}`;
  if (address !== window.location.pathname + window.location.search) window.history.pushState(null, "", address);
}

function searchParts(q) {
  const parts = [q.mode === "item" ? `item=${q.item}` : (q.mode === "code" ? `code=${q.code}` : `mode=${q.mode}`)];
  if (q.radius !== null) parts.push(`radius=${q.radius}`); else if (q.k !== null) parts.push(`k=${q.k}`);
  if (q.labels.length) parts.push(`labels=${q.labels.join(",")}`);
  return parts;
}

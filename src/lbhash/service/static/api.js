// Requests to the service (same origin only), its key, and its errors in plain words.

// An error to show to the reader: `message` is a sentence; `detail` what the service said.
export class ApiError extends Error {
  constructor(message, detail = "") { super(message); this.detail = detail; }
}

// The service's key (docs/search.md, "Exposing the service"), asked for once per tab when the
// service answers 401, and kept in this tab's sessionStorage only.
const KEY_HEADER = "X-Lbhash-Key";
function askForKey(detail) {
  const key = window.prompt(`${detail}. Key:`);
  if (key) sessionStorage.setItem("lbhash-key", key);
  return Boolean(key);
}
export function withKey(headers) {
  const key = sessionStorage.getItem("lbhash-key");
  if (key) headers[KEY_HEADER] = key;
  return headers;
}

// One request to the service; a failure becomes an ApiError in plain words.
export async function api(method, path, body, form, asked = false) {
  const init = { method, headers: withKey({ Accept: "application/json" }) };
  if (form) init.body = form;
  else if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
  let reply;
  try { reply = await fetch(path, init); } catch (err) {
    throw new ApiError(`${doing(method, path)}: the service did not answer (is it still running?).`, err.message);
  }
  if (reply.status === 401 && !asked) {
    const detail = (await reply.clone().json().catch(() => ({}))).detail || "this service needs a key";
    if (askForKey(detail)) return api(method, path, body, form, true);
  }
  const text = await reply.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (err) { data = null; }
  if (!reply.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail : "";
    throw new ApiError(plainError(method, path, reply.status, detail),
      `${method} ${path}: ${reply.status} ${detail || reply.statusText}`);
  }
  return data;
}

// What the page was doing when a request failed.
const DOING = [["POST", /^\/search\/image$/, "The image search failed"], ["POST", /^\/search/, "The search failed"],
  ["GET", /^\/items\/(\d+)$/, "Item $1 could not be read"],
  ["POST", /^\/items/, "Adding failed"], ["DELETE", /^\/items\/(\d+)$/, "Deleting item $1 failed"],
  ["GET", /^\/about$/, "The index's description could not be loaded"], ["GET", /^\/duplicates/, "The duplicates could not be listed"], ["POST", /^\/sources$/, "The results' sources could not be read"]];
function doing(method, path) {
  for (const [m, pattern, text] of DOING) {
    const found = method === m && pattern.exec(path);
    if (found) return text.replace("$1", found[1]);
  }
  return `${method} ${path} failed`;
}

// The service's {"detail": one line} as a sentence: the names of request fields become words,
// and what reads as Python (quoted reprs, <object at 0x...>) is left out.
const FIELDS = [[/^(?:body|query|path|form)\./, ""], [/\bcodes\[0\]/g, "the code"], [/\bfeatures\[0\]/g, "the feature row"],
  [/\bfiles\[\d+\] \(([^)]*)\)/g, "$1"], [/\bfiles\[\d+\.\.\d+\]/g, "the images"], [/\bInput should be\b/g, "should be"],
  [/^(\w+): Field required$/, "$1 is missing"], [/\s*<[^<>]* at 0x[0-9a-f]+>/g, ""], [/'([^']*)'/g, "\u201c$1\u201d"],
  [/\s*\(lbhash\.limits\.\w+\)/g, ""]];
const BY_STATUS = {
  401: () => "this service needs its key; reload the page to give it",
  429: () => "the service is busy; try again in a moment",
  500: () => "the service hit an internal error (its log says more)",
  502: () => "the service is unavailable", 503: () => "the service is too busy or unavailable; try again shortly",
  507: (d) => `the service has no room left for added images (${d})`,
};
export function plainError(method, path, status, detail) {
  let reason = detail;
  for (const [pattern, words] of FIELDS) reason = reason.replace(pattern, words);
  reason = BY_STATUS[status] ? BY_STATUS[status](reason) : (reason || `the service answered ${status}`);
  return `${doing(method, path)}: ${reason.replace(/[.\s]+$/, "")}.`;
}

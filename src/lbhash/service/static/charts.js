// The page's two small plots, as SVG: the run's precision-recall curve and the results' distances.

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  return n;
}
function texts(plot, items) {
  for (const [t, x, y] of items) { const n = svg("text", { x, y }); n.textContent = t; plot.append(n); }
}
// A plot of W x H that shrinks with a narrow screen (viewBox; CSS keeps it within its column).
const frame = (W, H, label) => svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });

export function prPlot(curve) {
  const W = 260, H = 170, L = 34, B = 26, plot = frame(W, H, "precision against recall");
  const x = (r) => L + r * (W - L - 8), y = (p) => H - B - p * (H - B - 8);
  const points = curve.recall.map((r, i) => [r, curve.precision[i]]).filter(([r, p]) => r !== null && p !== null);
  plot.append(svg("line", { x1: L, y1: H - B, x2: W - 8, y2: H - B, class: "axis" }),
    svg("line", { x1: L, y1: 8, x2: L, y2: H - B, class: "axis" }),
    svg("polyline", { points: points.map(([r, p]) => `${x(r)},${y(p)}`).join(" "), class: "line" }));
  texts(plot, [["0", L - 4, H - B + 14], ["recall 1", W - 48, H - B + 14], ["1", L - 12, 14], ["precision", L + 4, 14]]);
  return plot;
}

export function histogram(distances, bits) {
  const counts = new Array(bits + 1).fill(0);
  for (const d of distances) if (d >= 0 && d <= bits) counts[d] += 1;
  const W = Math.max(260, Math.min(640, 12 * (bits + 1) + 40)), H = 110, L = 28, B = 20;
  const top = Math.max(...counts, 1), bw = (W - L - 4) / (bits + 1);
  const plot = frame(W, H, "number of results at each Hamming distance");
  counts.forEach((c, d) => {
    if (!c) return;
    const h = (c / top) * (H - B - 14);
    const bar = svg("rect", { x: L + d * bw + 1, y: H - B - h, width: Math.max(bw - 2, 1), height: h, class: "bar" });
    const tip = svg("title", {}); tip.textContent = `distance ${d}: ${c}`; bar.append(tip); plot.append(bar);
  });
  plot.append(svg("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
  texts(plot, [["0", L, H - 6], [String(bits), W - 22, H - 6], [String(top), 2, 14]]);
  return plot;
}

/* What every memtrace page's script shares; scripts/embed.py puts it in
 * place of the line "include common.js" of each page. */
/* "1 allocation", "2 allocations" */
function fmtCount(n, one, many) { return n.toLocaleString('en') + ' ' + (n === 1 ? one : many); }
/* "512 B", "1.50 MiB", "-3.00 KiB" */
function fmtBytes(n) {
  var neg = n < 0, u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], i = 0;
  n = Math.abs(n);
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (neg ? '-' : '') + (i ? n.toFixed(2) : String(Math.round(n))) + ' ' + u[i];
}
function fmtPct(part, whole) { return whole ? (100 * part / whole).toFixed(2) + '%' : '-'; }
function fmtTime(us) { return (us / 1e6).toFixed(3) + ' s'; }
function baseName(p) { var i = p.lastIndexOf('/'); return i < 0 ? p : p.slice(i + 1); }
/* the tooltip @tip shown beside the pointer of @ev, inside the window */
function placeTip(tip, ev) {
  tip.style.display = 'block';
  var tx = ev.clientX + 14, ty = ev.clientY + 14;
  if (tx + tip.offsetWidth > window.innerWidth) tx = Math.max(0, ev.clientX - tip.offsetWidth - 10);
  if (ty + tip.offsetHeight > window.innerHeight) ty = Math.max(0, ev.clientY - tip.offsetHeight - 10);
  tip.style.left = tx + 'px'; tip.style.top = ty + 'px';
}
/* the node of the box under the pointer of @ev on @canvas: @drawn holds
 * {node, depth, x, w} boxes of rows @row pixels high (in row .at, if set,
 * else in row .depth), the last on top */
function hitBox(canvas, drawn, row, ev) {
  var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, d = Math.floor((ev.clientY - r.top) / row);
  for (var i = drawn.length - 1; i >= 0; i--) {
    var b = drawn[i];
    if ((b.at != null ? b.at : b.depth) === d && x >= b.x && x < b.x + Math.max(b.w, 1)) return b.node;
  }
  return null;
}
/* A flame chart, as the flamegraph and diff pages draw it: boxes of rows
 * @row pixels high on @canvas, under the page's #chart. */
/* A canvas taller than 32,767 pixels, or of more than about 2^28 of
 * them, is not drawn at all: a deep graph gets fewer pixels than the
 * device has (blurred), not a blank page. */
var CANVAS_SIDE = 32000, CANVAS_AREA = 1 << 25;
/* sizes @canvas to #chart's width and @rows rows, in the device's pixels
 * (fewer for a very deep graph), clears it and sets the labels' font;
 * returns its width */
function flameCanvas(canvas, ctx, rows, row) {
  var W = Math.max(200, document.getElementById('chart').clientWidth - 32), H = rows * row;
  var dpr = Math.min(window.devicePixelRatio || 1, CANVAS_SIDE / H, Math.sqrt(CANVAS_AREA / (W * H)));
  canvas.style.width = W + 'px'; canvas.style.height = H + 'px';
  canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  ctx.font = '12px system-ui, sans-serif';
  ctx.textBaseline = 'middle';
  return W;
}
/* @box(nd, x, w) for @f at the full width @W and, breadth first, for
 * each node below it at least half a pixel wide: its share of @size(f) */
function flameLayout(f, W, size, box) {
  var scale = size(f) ? W / size(f) : 0, queue = [[f, 0]];
  for (var q = 0; q < queue.length; q++) {
    var nd = queue[q][0], x = queue[q][1], w = nd === f ? W : size(nd) * scale;
    if (nd !== f && w < 0.5) continue;
    box(nd, x, w);
    var cx = x;
    for (var i = 0; i < nd.children.length; i++) {
      queue.push([nd.children[i], cx]);
      cx += size(nd.children[i]) * scale;
    }
  }
}
/* a box @w wide at @x in row @depth, filled with @fill, and @text in @ink
 * clipped to it where it is over 34 pixels wide; returns whether the
 * text is drawn */
function paintBox(ctx, depth, row, x, w, fill, text, ink) {
  var y = depth * row;
  ctx.fillStyle = fill;
  ctx.fillRect(x, y, Math.max(w - 1, 0.5), row - 1);
  if (!(w > 34)) return false;
  ctx.fillStyle = ink;
  ctx.save(); ctx.beginPath(); ctx.rect(x, y, w - 2, row); ctx.clip();
  ctx.fillText(text, x + 3, y + row / 2);
  ctx.restore();
  return true;
}
/* the pointer and keys on the chart: @describe(nd, line) fills the
 * tooltip @tip for the box under the pointer, a line(cls, text) at a
 * time; a click zooms into a box (on the one zoomed into: out to its
 * parent), the button #reset and Escape out to the whole tree. @state
 * holds tree, focus and the boxes drawn; @render draws them again. */
function flameControls(canvas, tip, state, row, describe, render) {
  function hit(ev) { return hitBox(canvas, state.drawn, row, ev); }
  function line(cls, text) { var e = document.createElement('div'); e.className = cls; e.textContent = text; tip.appendChild(e); }
  canvas.addEventListener('mousemove', function (ev) {
    var nd = hit(ev);
    if (!nd) { tip.style.display = 'none'; return; }
    tip.textContent = '';
    describe(nd, line);
    placeTip(tip, ev);
  });
  canvas.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  canvas.addEventListener('click', function (ev) {
    var nd = hit(ev);
    if (!nd) return;
    state.focus = nd === state.focus ? (nd.parent || state.tree) : nd;
    render();
  });
  function resetZoom() { state.focus = state.tree; render(); }
  document.getElementById('reset').addEventListener('click', resetZoom);
  document.addEventListener('keydown', function (ev) { if (ev.key === 'Escape') resetZoom(); });
}

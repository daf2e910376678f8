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
 * {node, depth, x, w} boxes of rows @row pixels high, the last on top */
function hitBox(canvas, drawn, row, ev) {
  var r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, d = Math.floor((ev.clientY - r.top) / row);
  for (var i = drawn.length - 1; i >= 0; i--) {
    var b = drawn[i];
    if (b.depth === d && x >= b.x && x < b.x + Math.max(b.w, 1)) return b.node;
  }
  return null;
}

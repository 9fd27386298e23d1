// A small line chart on a canvas: several series, one y axis, a legend, the palette's colours
// and units (the same module shmq-bench --plot uses, served as /api/palette).
"use strict";
const Chart = (() => {
  function si(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + " G";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + " M";
    if (a >= 1e3) return (v / 1e3).toPrecision(3) + " k";
    return (Math.round(v * 100) / 100).toString();
  }
  // series: {name: [values or null]}, times: [seconds]; unit: axis label
  function draw(canvas, times, series, unit, palette) {
    const ctx = canvas.getContext("2d");
    const W = canvas.width, H = canvas.height, L = 64, R = 150, T = 14, B = 26;
    ctx.fillStyle = palette.background; ctx.fillRect(0, 0, W, H);
    const names = Object.keys(series).sort();
    let max = 0;
    for (const n of names) for (const v of series[n]) if (v != null && v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const n = times.length;
    const x = i => L + (n > 1 ? i * (W - L - R) / (n - 1) : 0);
    const y = v => T + (H - T - B) * (1 - v / max);
    ctx.strokeStyle = palette.grid; ctx.fillStyle = palette.text; ctx.font = "11px sans-serif"; ctx.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = max * k / 4, yy = y(v);
      ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(W - R, yy); ctx.stroke();
      ctx.textAlign = "right"; ctx.fillText(si(v), L - 6, yy + 4); ctx.textAlign = "left";
    }
    ctx.save(); ctx.translate(12, T + (H - T - B) / 2 + 20); ctx.rotate(-Math.PI / 2); ctx.fillText(unit, 0, 0); ctx.restore();
    if (n > 1) {
      const span = Math.round(times[n - 1] - times[0]);
      ctx.fillText("-" + span + " s", L, H - 8); ctx.fillText("now", W - R - 20, H - 8);
    }
    names.forEach((name, k) => {
      const c = palette.series[k % palette.series.length];
      ctx.strokeStyle = c; ctx.lineWidth = 1.8; ctx.beginPath();
      let started = false;
      series[name].forEach((v, i) => {
        if (v == null) { started = false; return; }
        if (!started) { ctx.moveTo(x(i), y(v)); started = true; } else ctx.lineTo(x(i), y(v));
      });
      ctx.stroke();
      ctx.fillStyle = c; ctx.fillRect(W - R + 10, T + k * 16, 10, 10);
      ctx.fillStyle = palette.text; ctx.fillText(name.slice(0, 20), W - R + 26, T + k * 16 + 9);
    });
    if (!names.length) { ctx.fillStyle = palette.text; ctx.fillText("no data yet", L + 10, T + 20); }
  }
  return { draw, si };
})();

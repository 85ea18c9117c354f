/* The book's interactive figures (book/_ext/explorers.py writes their HTML and their data).
 *
 * Each <figure class="posenc-explorer"> names a JSON file that posenc computed when the site was
 * built, over every setting of the figure's controls. This script only looks up the slice of the
 * current settings and draws it on a canvas: it implements none of the book's formulas. What it
 * drew is also written to the figure's data-values attribute (read by tests/site/test_explorers.py).
 * No library, no network access beyond the site itself.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  var STATIC = script && script.src
    ? new URL(".", script.src)
    : new URL((document.documentElement.dataset.content_root || "./") + "_static/", window.location.href);

  // Two palettes: drawn on white in the light theme (like the book's matplotlib figures) and on a
  // dark card in the dark theme; every explorer is drawn again when the theme changes.
  var PALETTES = {
    light: {
      PAPER: "#ffffff", INK: "#222222", FAINT: "#bbbbbb", GRID: "#e6e6e6", BLUE: "#1f77b4",
      ORANGE: "#ff7f0e", PALE_BLUE: "#9ec5e8", PALE_ORANGE: "#ffc899", NOTE: "#666666",
      MARK: "#777777", GUIDE: "#555555", ERROR: "#b00020",
    },
    dark: {
      PAPER: "#1a1d21", INK: "#e3e3e3", FAINT: "#6b6b6b", GRID: "#30343a", BLUE: "#5fa8e8",
      ORANGE: "#ffa257", PALE_BLUE: "#3d6a91", PALE_ORANGE: "#8f6038", NOTE: "#a8a8a8",
      MARK: "#9a9a9a", GUIDE: "#b0b0b0", ERROR: "#ff6b81",
    },
  };
  var PAPER, INK, FAINT, GRID, BLUE, ORANGE, PALE_BLUE, PALE_ORANGE, NOTE, MARK, GUIDE, ERROR;

  function theme() {
    return document.documentElement.dataset.theme === "dark" ? "dark" : "light";
  }

  function usePalette(name) {
    var c = PALETTES[name];
    PAPER = c.PAPER; INK = c.INK; FAINT = c.FAINT; GRID = c.GRID; BLUE = c.BLUE; ORANGE = c.ORANGE;
    PALE_BLUE = c.PALE_BLUE; PALE_ORANGE = c.PALE_ORANGE; NOTE = c.NOTE; MARK = c.MARK; GUIDE = c.GUIDE;
    ERROR = c.ERROR;
  }
  usePalette("light");
  var MINUS = "\u2212";

  // --- controls ------------------------------------------------------------------------------

  function settings(fig) {
    var state = {};
    fig.querySelectorAll("input[data-key]").forEach(function (input) {
      var key = input.dataset.key;
      if (input.type === "range") {
        var options = JSON.parse(input.dataset.options);
        state[key] = options[Number(input.value)];
      } else if (input.type === "checkbox") {
        state[key] = input.checked;
      } else if (input.type === "radio" && input.checked) {
        state[key] = input.value;
      }
    });
    return state;
  }

  function showValues(fig) {
    fig.querySelectorAll('input[type="range"][data-key]').forEach(function (input) {
      var value = JSON.parse(input.dataset.options)[Number(input.value)];
      input.setAttribute("aria-valuetext", value);
      var output = document.getElementById(input.id + "-value");
      if (output) output.textContent = value;
    });
  }

  // --- drawing helpers -----------------------------------------------------------------------

  function surface(fig, height) {
    var canvas = fig.querySelector("canvas");
    var width = Math.max(200, Math.floor(canvas.parentElement.clientWidth));
    var h = Math.round(height(width));
    var ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(h * ratio);
    canvas.style.height = h + "px";
    var ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.fillStyle = PAPER;
    ctx.fillRect(0, 0, width, h);
    ctx.fontSize = width < 480 ? 11 : 12;
    ctx.font = ctx.fontSize + "px sans-serif";
    ctx.lineJoin = "round";
    return { ctx: ctx, width: width, height: h };
  }

  // A plot area with linear scales: x from xr[0] to xr[1], y from yr[0] (bottom) to yr[1] (top).
  function frame(ctx, box, xr, yr) {
    return {
      box: box,
      x: function (v) { return box.x + ((v - xr[0]) / (xr[1] - xr[0])) * box.w; },
      y: function (v) { return box.y + box.h - ((v - yr[0]) / (yr[1] - yr[0])) * box.h; },
    };
  }

  // Text with math subscripts: "R_m q" draws m as a subscript of R ("_" and one word).
  function text(ctx, s, x, y, align, baseline, color) {
    var size = ctx.fontSize, small = Math.round(size * 0.78);
    var parts = s.split(/_([A-Za-z0-9]+)/); // even: normal text, odd: subscript
    var widths = parts.map(function (part, i) {
      ctx.font = (i % 2 ? small : size) + "px sans-serif";
      return ctx.measureText(part).width;
    });
    var total = widths.reduce(function (a, b) { return a + b; }, 0);
    var start = align === "left" ? x : align === "right" ? x - total : x - total / 2;
    ctx.fillStyle = color || INK;
    ctx.textAlign = "left";
    ctx.textBaseline = baseline || "alphabetic";
    parts.forEach(function (part, i) {
      ctx.font = (i % 2 ? small : size) + "px sans-serif";
      ctx.fillText(part, start, i % 2 ? y + size * 0.3 : y);
      start += widths[i];
    });
    ctx.font = size + "px sans-serif";
  }

  function line(ctx, x0, y0, x1, y1, color, width, dash) {
    ctx.save();
    ctx.strokeStyle = color;
    ctx.lineWidth = width || 1;
    ctx.setLineDash(dash || []);
    ctx.beginPath();
    ctx.moveTo(x0, y0);
    ctx.lineTo(x1, y1);
    ctx.stroke();
    ctx.restore();
  }

  // Axes: a box, ticks with labels, axis titles. ticks: [{at, label}] in data units.
  function axes(ctx, f, xticks, yticks, xtitle, ytitle) {
    var b = f.box;
    xticks.forEach(function (t) {
      var x = f.x(t.at);
      if (t.grid) line(ctx, x, b.y, x, b.y + b.h, GRID);
      line(ctx, x, b.y + b.h, x, b.y + b.h + 4, INK);
      text(ctx, t.label, x, b.y + b.h + 6, "center", "top");
    });
    yticks.forEach(function (t) {
      var y = f.y(t.at);
      if (t.grid) line(ctx, b.x, y, b.x + b.w, y, GRID);
      line(ctx, b.x - 4, y, b.x, y, INK);
      text(ctx, t.label, b.x - 6, y, "right", "middle");
    });
    ctx.strokeStyle = INK;
    ctx.lineWidth = 1;
    ctx.strokeRect(b.x, b.y, b.w, b.h);
    if (xtitle) text(ctx, xtitle, b.x + b.w / 2, b.y + b.h + 22, "center", "top");
    if (ytitle) {
      ctx.save();
      ctx.translate(12, b.y + b.h / 2);
      ctx.rotate(-Math.PI / 2);
      text(ctx, ytitle, 0, 0, "center", "middle");
      ctx.restore();
    }
  }

  function polyline(ctx, points, color, width, dash) {
    ctx.save();
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    ctx.setLineDash(dash || []);
    ctx.beginPath();
    points.forEach(function (p, i) { if (i === 0) ctx.moveTo(p[0], p[1]); else ctx.lineTo(p[0], p[1]); });
    ctx.stroke();
    ctx.restore();
  }

  function arrow(ctx, x0, y0, x1, y1, color, width, dash) {
    var angle = Math.atan2(y1 - y0, x1 - x0), head = 9;
    line(ctx, x0, y0, x1, y1, color, width, dash);
    ctx.save();
    ctx.fillStyle = color;
    ctx.beginPath();
    ctx.moveTo(x1, y1);
    ctx.lineTo(x1 - head * Math.cos(angle - 0.4), y1 - head * Math.sin(angle - 0.4));
    ctx.lineTo(x1 - head * Math.cos(angle + 0.4), y1 - head * Math.sin(angle + 0.4));
    ctx.closePath();
    ctx.fill();
    ctx.restore();
  }

  // Ticks 0, n/4, n/2, 3n/4 and the last index n - 1 of n cells (0, 16, 32, 48, 63 for 64).
  function indexTicks(n) {
    var ticks = [];
    [0, 0.25, 0.5, 0.75].forEach(function (q) {
      var at = Math.round(n * q);
      if (at < n - 1 && (!ticks.length || ticks[ticks.length - 1].at !== at)) ticks.push({ at: at, label: String(at) });
    });
    ticks.push({ at: n - 1, label: String(n - 1) });
    return ticks;
  }

  function signed(v) { return v < 0 ? MINUS + Math.abs(v) : String(v); }

  function fixed(v, digits) { return (v < 0 ? MINUS : "") + Math.abs(v).toFixed(digits); }

  // --- the four figures ----------------------------------------------------------------------

  var draw = {};

  // Chapter 2: the sinusoidal table, positions x dimensions, as a heatmap.
  draw.sinusoidal = function (fig, data, s) {
    var columns = data.columns[s.d], table = data.tables[s.base];
    var values = table.map(function (row) {
      return columns.map(function (c) { return row[c] / data.scale; });
    });
    var rows = values.length, cols = columns.length;
    var g = surface(fig, function (w) { return Math.min(420, Math.max(250, w * 0.55)); });
    var ctx = g.ctx;
    var box = { x: 46, y: 10, w: g.width - 46 - 62, h: g.height - 10 - 44 };

    var image = document.createElement("canvas");
    image.width = cols;
    image.height = rows;
    var pixels = image.getContext("2d").createImageData(cols, rows);
    var cmap = data.colormap;
    values.forEach(function (row, p) {
      row.forEach(function (v, j) {
        var color = cmap[Math.max(0, Math.min(cmap.length - 1, Math.round(((v + 1) / 2) * (cmap.length - 1))))];
        var o = 4 * (p * cols + j);
        pixels.data[o] = color[0];
        pixels.data[o + 1] = color[1];
        pixels.data[o + 2] = color[2];
        pixels.data[o + 3] = 255;
      });
    });
    image.getContext("2d").putImageData(pixels, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(image, box.x, box.y, box.w, box.h);

    // cells: column j spans [j, j + 1), row p spans [p, p + 1) from the top
    var f = frame(ctx, box, [0, cols], [rows, 0]);
    var xt = indexTicks(cols).map(function (t) { return { at: t.at + 0.5, label: t.label }; });
    var yt = indexTicks(rows).map(function (t) { return { at: t.at + 0.5, label: t.label }; });
    axes(ctx, f, xt, yt, "dimension (2i: sin, 2i+1: cos)", "position pos");

    // colour bar
    var bar = { x: box.x + box.w + 14, y: box.y, w: 12, h: box.h };
    for (var k = 0; k < bar.h; k++) {
      var c = cmap[Math.round((1 - k / (bar.h - 1)) * (cmap.length - 1))];
      ctx.fillStyle = "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")";
      ctx.fillRect(bar.x, bar.y + k, bar.w, 1);
    }
    ctx.strokeStyle = INK;
    ctx.strokeRect(bar.x, bar.y, bar.w, bar.h);
    [[1, "1"], [0, "0"], [-1, MINUS + "1"]].forEach(function (t) {
      var y = bar.y + ((1 - t[0]) / 2) * bar.h;
      line(ctx, bar.x + bar.w, y, bar.x + bar.w + 4, y, INK);
      text(ctx, t[1], bar.x + bar.w + 6, y, "left", "middle");
    });

    var slowest = data.slowest_wavelength[s.base][s.d];
    return {
      values: values,
      box: box, // where the cells are, for the test that checks the pixels
      readout:
        "<i>d</i> = " + s.d + ", base = " + s.base + ": 가장 느린 쌍의 파장은 약 " +
        Math.round(slowest).toLocaleString("en-US") + " 토큰이다(그림의 위치는 " + rows + "개).",
    };
  };

  // Chapter 5: one pair of RoPE, q at position m and k at position n, and their dot product.
  draw.rope2d = function (fig, data, s) {
    var th = data.thetas[s.theta];
    var m = Number(s.m), n = Number(s.n), last = data.positions - 1;
    var q = th.q[m], k = th.k[n], score = th.scores[m][n], r = n - m;
    var wide = fig.querySelector("canvas").parentElement.clientWidth >= 560;
    var g = surface(fig, function (w) { return wide ? Math.min(340, w * 0.45) : Math.min(w, 340) + 230; });
    var ctx = g.ctx;

    // the plane
    var side = wide ? g.height - 20 : Math.min(g.width, 340) - 20;
    var plane = { x: wide ? 10 : (g.width - side) / 2, y: 10, w: side, h: side };
    var p = frame(ctx, plane, [-1.3, 1.3], [-1.3, 1.3]);
    line(ctx, p.x(-1.3), p.y(0), p.x(1.3), p.y(0), GRID);
    line(ctx, p.x(0), p.y(-1.3), p.x(0), p.y(1.3), GRID);
    ctx.strokeStyle = FAINT;
    ctx.beginPath();
    ctx.arc(p.x(0), p.y(0), p.x(1) - p.x(0), 0, 2 * Math.PI);
    ctx.stroke();
    var q0 = th.q[0], k0 = th.k[0]; // position 0: the vectors before rotation
    arrow(ctx, p.x(0), p.y(0), p.x(q0[0]), p.y(q0[1]), PALE_BLUE, 1.5, [4, 3]);
    arrow(ctx, p.x(0), p.y(0), p.x(k0[0]), p.y(k0[1]), PALE_ORANGE, 1.5, [4, 3]);
    arrow(ctx, p.x(0), p.y(0), p.x(q[0]), p.y(q[1]), BLUE, 2.5);
    arrow(ctx, p.x(0), p.y(0), p.x(k[0]), p.y(k[1]), ORANGE, 2.5);
    text(ctx, "R_m q", p.x(q[0] * 1.17), p.y(q[1] * 1.17), "center", "middle", BLUE);
    text(ctx, "R_n k", p.x(k[0] * 1.17), p.y(k[1] * 1.17), "center", "middle", ORANGE);
    text(ctx, "dashed: q, k (position 0)", plane.x + 4, plane.y + plane.h - 4, "left", "alphabetic", NOTE);

    // the dot product against r = n - m
    var left = wide ? plane.x + plane.w + 60 : 52;
    var top = wide ? 30 : plane.y + plane.h + 34;
    var box = { x: left, y: top, w: g.width - left - 12, h: g.height - top - 44 };
    var f = frame(ctx, box, [-last - 1, last + 1], [-1.1, 1.1]);
    var ticks = [-last, -Math.round(last / 2), 0, Math.round(last / 2), last].map(function (v) {
      return { at: v, label: signed(v), grid: v === 0 };
    });
    var yticks = [-1, -0.5, 0, 0.5, 1].map(function (v) { return { at: v, label: signed(v), grid: true }; });
    axes(ctx, f, ticks, yticks, "r = n " + MINUS + " m", "");
    text(ctx, "(R_m q)\u00b7(R_n k)", box.x, box.y - 8, "left", "alphabetic");
    var curve = [];
    for (var rr = -last; rr <= last; rr++) {
      curve.push([f.x(rr), f.y(th.scores[Math.max(0, -rr)][Math.max(0, rr)])]);
    }
    polyline(ctx, curve, FAINT, 1.5);
    ctx.fillStyle = BLUE;
    ctx.beginPath();
    ctx.arc(f.x(r), f.y(score), 5, 0, 2 * Math.PI);
    ctx.fill();

    return {
      values: { q: q, k: k, score: score, r: r },
      readout:
        "<i>m</i> = " + m + ", <i>n</i> = " + n + ", <i>r</i> = <i>n</i> " + MINUS + " <i>m</i> = " + signed(r) +
        ", <i>\u03b8</i> = " + s.theta + ": (<i>R</i><sub><i>m</i></sub><i>q</i>)\u00b7(<i>R</i><sub><i>n</i></sub><i>k</i>) = " +
        fixed(score, 4),
    };
  };

  // The relative-position chapter: T5's bucket of each relative position.
  draw.t5 = function (fig, data, s) {
    var key = s.num_buckets + "-" + s.max_distance + "-" + (s.bidirectional ? "bi" : "causal");
    var buckets = data.buckets[key] || null;
    var top = Number(s.num_buckets) - 1, dmax = Number(s.max_distance);
    var g = surface(fig, function (w) { return Math.min(360, Math.max(240, w * 0.45)); });
    var ctx = g.ctx;
    var box = { x: 46, y: 10, w: g.width - 46 - 12, h: g.height - 10 - 44 };
    var f = frame(ctx, box, [data.r_min - 5, data.r_max + 5], [-0.04 * top - 0.5, top + 0.5 + 0.04 * top]);
    var xticks = [];
    for (var x = -300; x <= 300; x += g.width < 480 ? 150 : 100) xticks.push({ at: x, label: signed(x), grid: x === 0 });
    var step = Math.max(1, (top + 1) / 8), yticks = [];
    for (var y = 0; y <= top; y += step) yticks.push({ at: y, label: String(y), grid: true });
    axes(ctx, f, xticks, yticks, "relative position r = n " + MINUS + " m (key " + MINUS + " query)", "bucket");
    (s.bidirectional ? [-dmax, dmax] : [-dmax]).forEach(function (v) {
      if (v >= data.r_min && v <= data.r_max) line(ctx, f.x(v), box.y, f.x(v), box.y + box.h, MARK, 1, [2, 3]);
    });
    if (buckets) {
      var points = [];
      buckets.forEach(function (b, i) {
        var rr = data.r_min + i;
        points.push([f.x(rr - 0.5), f.y(b)], [f.x(rr + 0.5), f.y(b)]);
      });
      polyline(ctx, points, BLUE, 2);
    } else {
      text(ctx, "not defined for these settings", box.x + box.w / 2, box.y + box.h / 2, "center", "middle", ERROR);
    }
    var setting = "<i>N</i><sub>bkt</sub> = " + s.num_buckets + ", <i>D</i><sub>max</sub> = " + s.max_distance + ", " + (s.bidirectional ? "양방향" : "인과");
    var used = buckets ? new Set(buckets).size : 0;
    return {
      values: buckets,
      readout: buckets
        ? setting + ": 그림의 범위에서 구간 " + s.num_buckets + "개 가운데 " + used + "개를 쓴다."
        : setting + ": " + data.refused[key],
    };
  };

  // Chapter 6: theta'_i / theta_i of each RoPE scaling type, pair by pair (log scale).
  var METHOD_NAMES = {
    linear: "PI (linear)",
    ntk: "NTK-aware",
    dynamic: "dynamic NTK at L = \u03b1 L_0",
    yarn: "YaRN",
    llama3: "Llama 3",
  };
  draw.scaling = function (fig, data, s) {
    var ratios = data.ratios[s.method][s.alpha];
    var low = Infinity;
    Object.keys(data.ratios).forEach(function (name) {
      Object.keys(data.ratios[name]).forEach(function (a) {
        data.ratios[name][a].forEach(function (v) { if (v < low) low = v; });
      });
    });
    var bottom = Math.floor(Math.log2(low)); // a power of two at or below every ratio of the file
    var g = surface(fig, function (w) { return Math.min(380, Math.max(260, w * 0.5)); });
    var ctx = g.ctx;
    var box = { x: 50, y: 26, w: g.width - 50 - 12, h: g.height - 26 - 44 };
    var pairs = ratios.length;
    var f = frame(ctx, box, [-1, pairs], [bottom - 0.3, 0.3]);
    var ly = function (v) { return f.y(Math.log2(v)); };
    var every = box.h / (-bottom + 1) < 16 ? 2 : 1, yticks = [];
    for (var e = 0; e >= bottom; e -= every) yticks.push({ at: e, label: e === 0 ? "1" : "1/" + Math.pow(2, -e), grid: true });
    axes(ctx, f, indexTicks(pairs), yticks, "pair index i (fast \u2192 slow)", "\u03b8'_i / \u03b8_i");
    var inv = data.inverse_alpha[s.alpha];
    line(ctx, box.x, ly(inv), box.x + box.w, ly(inv), GUIDE, 1, [3, 3]);
    text(ctx, "1/\u03b1", box.x + box.w - 4, ly(inv) - 3, "right", "bottom", GUIDE);
    Object.keys(data.ratios).forEach(function (name) {
      if (name === s.method) return;
      polyline(ctx, data.ratios[name][s.alpha].map(function (v, i) { return [f.x(i), ly(v)]; }), FAINT, 1.2);
    });
    polyline(ctx, ratios.map(function (v, i) { return [f.x(i), ly(v)]; }), BLUE, 2.5);
    text(ctx, METHOD_NAMES[s.method] + ", \u03b1 = " + s.alpha, box.x, 6, "left", "top");

    var scale = data.attention_scale[s.method][s.alpha];
    var label = fig.querySelector('input[type="radio"][value="' + s.method + '"] + label');
    return {
      values: { ratios: ratios, attention_scale: scale },
      readout:
        (label ? label.innerHTML : s.method) + ", <i>\u03b1</i> = " + s.alpha + ": 가장 빠른 쌍(<i>i</i> = 0)은 " +
        ratios[0] + "배, 가장 느린 쌍(<i>i</i> = " + (pairs - 1) + ")은 " + ratios[pairs - 1] +
        "배, cos와 sin에 곱하는 배율은 " + scale + "이다.",
    };
  };

  // --- the view in the address, and the posenc call of the view ---------------------------------

  // The page's address holds the settings of its explorers (?d=128&base=10000): read when the page
  // opens, rewritten (history.replaceState, no new history entry) when a control changes, so that
  // the text, the exercises and a reader can link to one view. Values that are not options of the
  // control are ignored.
  function readAddress(fig) {
    var params = new URLSearchParams(window.location.search);
    fig.querySelectorAll("input[data-key]").forEach(function (input) {
      var value = params.get(input.dataset.key);
      if (value === null) return;
      if (input.type === "range") {
        var index = JSON.parse(input.dataset.options).indexOf(value);
        if (index >= 0) input.value = String(index);
      } else if (input.type === "checkbox") {
        if (value === "true" || value === "false") input.checked = value === "true";
      } else if (input.type === "radio") {
        if (input.value === value) input.checked = true;
      }
    });
  }

  function writeAddress(fig) {
    var url = new URL(window.location.href);
    var s = settings(fig);
    Object.keys(s).forEach(function (key) { url.searchParams.set(key, String(s[key])); });
    if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url.href);
  }

  // The Python line that computes what the figure shows (its template comes from the build).
  function call(fig) {
    var spec = JSON.parse(fig.dataset.call);
    var s = settings(fig);
    var template = spec.by ? spec.templates[s[spec.by]] : spec.templates;
    return template.replace(/\{([a-z_]+)\}/g, function (whole, key) {
      if (!(key in s)) return whole;
      return s[key] === true ? "True" : s[key] === false ? "False" : String(s[key]);
    });
  }

  function copyCall(fig) {
    var line = call(fig);
    var status = fig.querySelector(".posenc-explorer-copied");
    var done = function () { status.textContent = "복사했다. 노트북 셀에 붙여 넣으면 이 그림의 값이 나온다."; };
    var failed = function () { status.textContent = "복사하지 못했다. 위의 줄을 직접 골라 복사하자."; };
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(line).then(done, failed);
    else failed();
  }

  // --- wiring --------------------------------------------------------------------------------

  function render(fig, data) {
    usePalette(theme());
    fig.dataset.theme = theme();
    showValues(fig);
    var drawn = draw[fig.dataset.explorer](fig, data, settings(fig));
    fig.dataset.values = JSON.stringify(drawn.values);
    if (drawn.box) fig.dataset.box = JSON.stringify(drawn.box);
    // The readout is built from this script's strings and the site's own data files.
    fig.querySelector(".posenc-explorer-readout").innerHTML = drawn.readout;
    var code = fig.querySelector(".posenc-explorer-code");
    if (code) code.textContent = call(fig);
    fig.dataset.ready = "true";
  }

  function start(fig) {
    var readout = fig.querySelector(".posenc-explorer-readout");
    readAddress(fig);
    var copy = fig.querySelector(".posenc-explorer-copy");
    if (copy) copy.addEventListener("click", function () { copyCall(fig); });
    fetch(new URL(fig.dataset.src, STATIC))
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        var redraw = function () { render(fig, data); };
        var changed = function () {
          redraw();
          writeAddress(fig);
          var status = fig.querySelector(".posenc-explorer-copied");
          if (status) status.textContent = "";
        };
        fig.addEventListener("input", changed);
        fig.addEventListener("change", changed);
        var width = 0;
        new ResizeObserver(function () {
          var now = fig.clientWidth;
          if (now !== width) { width = now; redraw(); }
        }).observe(fig);
        // the theme switch sets data-theme on <html>: draw again in the other palette
        new MutationObserver(function () {
          if (fig.dataset.theme !== theme()) redraw();
        }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
        redraw();
      })
      .catch(function (error) {
        fig.dataset.ready = "error";
        readout.textContent = "그림의 데이터를 불러오지 못했다(" + error.message + "). 이 그림은 웹 서버로 연 페이지에서 보인다.";
      });
  }

  function init() { document.querySelectorAll("figure.posenc-explorer").forEach(start); }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();

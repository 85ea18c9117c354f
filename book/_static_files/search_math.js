// Search result snippets: the text of a page carries its formulas as TeX source (\(n \times d\)),
// since MathJax only typesets the page itself. Turn that source into readable text (n × d) in
// the snippets; the pages are unchanged. Loaded on every page, active only where Sphinx's search
// (the `Search` object of searchtools.js) exists.
(() => {
  const SYMBOLS = {
    times: "×", cdot: "·", le: "≤", leq: "≤", ge: "≥", geq: "≥", neq: "≠", ne: "≠",
    approx: "≈", pm: "±", infty: "∞", to: "→", in: "∈", sum: "Σ", prod: "Π", sqrt: "√",
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", Delta: "Δ", zeta: "ζ", theta: "θ",
    lambda: "λ", mu: "μ", pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ",
    omega: "ω", Omega: "Ω", top: "ᵀ", dots: "…", ldots: "…", cdots: "⋯", lVert: "‖",
    rVert: "‖", lvert: "|", rvert: "|", mid: "|", quad: " ", qquad: " ", left: "", right: "",
  };
  const texToText = (tex) =>
    tex
      .replace(/\\mathbb\{R\}/g, "ℝ")
      .replace(/\\frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)")
      .replace(/\\(?:text|mathrm|operatorname|mathbf|mathit|textbf)\{([^{}]*)\}/g, "$1")
      .replace(/\\([A-Za-z]+)/g, (whole, name) => (name in SYMBOLS ? SYMBOLS[name] : name))
      .replace(/\\[,;:! ]/g, " ")
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  const readable = (text) =>
    text.replace(/\\\((.+?)\\\)|\\\[(.+?)\\\]|\$\$(.+?)\$\$/gs, (whole, a, b, c) => texToText(a ?? b ?? c));
  document.addEventListener("DOMContentLoaded", () => {
    if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
    const htmlToText = Search.htmlToText;
    Search.htmlToText = (html, anchor) => readable(htmlToText(html, anchor));
  });
})();

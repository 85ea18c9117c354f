// Display formulas get a tab stop, so that a reader on a keyboard can reach one and scroll it
// sideways when it is wider than the text. MathJax's context menu used to give every formula one;
// it is off because it speaks English only (book/_ext/offline_mathjax.py).
(function () {
  "use strict";
  function mark() {
    document.querySelectorAll('mjx-container[display="true"]').forEach(function (formula) {
      formula.setAttribute("tabindex", "0");
    });
  }
  window.addEventListener("load", function () {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(mark);
    }
  });
})();

// Make every sidebar toggle on the page work, not only the first.
//
// pydata-sphinx-theme (0.17) and sphinx-book-theme (1.3) bind their click handlers to
// document.querySelector(".primary-toggle") / (".secondary-toggle"): the first such button in
// the page, which with sphinx-book-theme is a header button that is never shown. The visible
// buttons (the ☰ in the article header, the page-contents button) get no handler and do nothing
// (upstream: pydata-sphinx-theme #2451, sphinx-book-theme #988). Here a click on any other toggle
// is handed to the first one, whose handlers then do what the themes meant: on a wide screen
// hide or show the primary sidebar, on a narrow one open the sidebar as a drawer (a modal
// <dialog>, closed by Escape or a click beside it).
(function () {
  "use strict";

  function forward(selector) {
    const buttons = Array.from(document.querySelectorAll(selector));
    const bound = buttons[0];
    buttons.slice(1).forEach((button) => {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        button.blur();
        bound.click();
      });
    });
  }

  function setUp() {
    forward(".primary-toggle");
    forward(".secondary-toggle");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();

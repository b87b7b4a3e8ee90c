// wa-outbox ops: confirmations for destructive buttons, an opt-in auto-refresh, "/" to search. No dependencies.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) { event.preventDefault(); }
  });

  var REFRESH_KEY = "wa-outbox-ops-auto-refresh";
  var REFRESH_MS = 10000;
  var timer = null;
  function schedule(on) {
    if (timer) { clearTimeout(timer); timer = null; }
    // Only pages without a form being filled in: a reload would lose what was typed.
    if (on) { timer = setTimeout(function () { if (!document.activeElement || document.activeElement.tagName !== "INPUT") { location.reload(); } else { schedule(true); } }, REFRESH_MS); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("auto-refresh");
    if (box) {
      box.checked = localStorage.getItem(REFRESH_KEY) === "on";
      box.addEventListener("change", function () {
        localStorage.setItem(REFRESH_KEY, box.checked ? "on" : "off");
        schedule(box.checked);
      });
      schedule(box.checked);
    }
  });

  document.addEventListener("keydown", function (event) {
    var q = document.getElementById("q");
    if (event.key === "/" && q && document.activeElement !== q && !/INPUT|TEXTAREA/.test(document.activeElement.tagName)) {
      event.preventDefault();
      q.focus();
    }
  });
})();

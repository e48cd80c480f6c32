// The pybroker console's only script: confirmations before forms that change
// the cluster, and the live charts (re-fetched from the broker every 2 s).
"use strict";
document.addEventListener("click", function (event) {
  const button = event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) {
    event.preventDefault();
  }
});
const REFRESH_MS = 2000;
function refreshCharts() {
  document.querySelectorAll(".refresh[data-src]").forEach(function (box) {
    fetch(box.dataset.src, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (svg) { if (svg !== null) { box.innerHTML = svg; } })
      .catch(function () { /* the broker is away: keep the last chart */ });
  });
}
if (document.querySelector(".refresh[data-src]")) {
  window.setInterval(refreshCharts, REFRESH_MS);
}

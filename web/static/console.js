// Switchyard console: the Live switch. htmx polls each page's live region
// every two seconds while switchyardLive() says so. Live updates pause when
// the operator switches them off (remembered in this browser), and while
// they read or act inside a live region — an open disclosure (a payload, a
// confirmation), a focused field, or rows chosen for a bulk action — so
// nothing changes under their hands.
(function () {
  "use strict";
  var KEY = "switchyard.live";

  var on = true;
  try {
    on = window.localStorage.getItem(KEY) !== "off";
  } catch (e) {
    // No storage (private mode): live by default.
  }

  window.switchyardLive = function () {
    if (!on || document.hidden) {
      return false;
    }
    if (document.querySelector(".live details[open]") || document.querySelector(".live input[type=checkbox][form]:checked")) {
      return false;
    }
    var f = document.activeElement;
    if (f && f.closest && f.closest(".live") && /^(INPUT|TEXTAREA|SELECT)$/.test(f.tagName)) {
      return false;
    }
    return true;
  };

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("live-toggle");
    if (!box) {
      return;
    }
    var label = box.closest("label");
    if (label) {
      label.hidden = false;
    }
    box.checked = on;
    document.body.classList.toggle("paused", !on);
    box.addEventListener("change", function () {
      on = box.checked;
      try {
        window.localStorage.setItem(KEY, on ? "on" : "off");
      } catch (e) {
        // Private mode: the switch still works for this page.
      }
      document.body.classList.toggle("paused", !on);
    });
  });
})();

// evalfleet review pages: keyboard shortcuts. The only script the page serves; the
// review pages allow it (script-src 'self'), every other page allows no script.
(function () {
  "use strict";
  var labelForm = document.getElementById("label-form");
  var nextForm = document.getElementById("next-form");
  var help = document.getElementById("help");
  var groups = labelForm ? Array.prototype.slice.call(labelForm.querySelectorAll("fieldset.score")) : [];
  var current = 0;

  function mark() {
    groups.forEach(function (group, index) { group.classList.toggle("current", index === current); });
  }

  function typing(target) {
    return target && (target.tagName === "TEXTAREA" ||
      (target.tagName === "INPUT" && (target.type === "text" || target.type === "password")));
  }

  function choose(key) {
    var group = groups[current];
    if (!group) { return false; }
    var inputs = group.querySelectorAll("input[type=radio]");
    for (var i = 0; i < inputs.length; i += 1) {
      if (inputs[i].getAttribute("data-key") === key) {
        inputs[i].checked = true;
        if (current < groups.length - 1) { current += 1; }
        mark();
        return true;
      }
    }
    return false;
  }

  // The scores not given yet, named in a message (the browser's own check would only
  // move focus to the first of them, silently).
  function missing() {
    var names = groups.filter(function (group) {
      return !group.querySelector("input[type=radio]:checked");
    }).map(function (group) { return group.getAttribute("data-score"); });
    var message = document.getElementById("missing");
    if (message) {
      message.textContent = names.length ? "Not labelled yet: " + names.join(", ") +
        " (pick a value, or x if you cannot say)" : "";
      message.hidden = !names.length;
    }
    if (names.length) {
      current = groups.findIndex(function (group) {
        return group.getAttribute("data-score") === names[0];
      });
      mark();
    }
    return names.length > 0;
  }

  function submit(id) {
    var form = document.getElementById(id);
    if (form) { form.requestSubmit(); }
  }

  groups.forEach(function (group, index) {
    group.addEventListener("change", function () { current = index; mark(); });
  });
  if (labelForm) {
    labelForm.noValidate = true;  // missing() says which scores are left instead
    labelForm.addEventListener("submit", function (event) {
      if (missing()) { event.preventDefault(); }
    });
  }

  // An agent's trajectory: t goes to its first step; on a step j/k (or the arrows) move,
  // Enter and Space open or close it (the browser's own <details>), Esc goes back to
  // the scores. While a step has the focus, the scoring keys do nothing.
  var steps = Array.prototype.slice.call(document.querySelectorAll("#trajectory summary"));

  function onStep(target) {
    return target && target.tagName === "SUMMARY" && steps.indexOf(target) >= 0;
  }

  function stepKey(event) {
    var at = steps.indexOf(event.target);
    var key = event.key;
    if (key === "Enter" || key === " ") { return; }  // the browser opens the step
    if (key === "j" || key === "ArrowDown") {
      steps[Math.min(at + 1, steps.length - 1)].focus();
    } else if (key === "k" || key === "ArrowUp") {
      steps[Math.max(at - 1, 0)].focus();
    } else if (key === "Escape") {
      event.target.blur(); mark();
    } else if (key === "?") {
      if (help) { help.hidden = !help.hidden; }
    }
    event.preventDefault();
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) { return; }
    if (typing(event.target)) {
      if (event.key === "Escape") { event.target.blur(); }
      return;
    }
    if (onStep(event.target)) { stepKey(event); return; }
    var key = event.key;
    var handled = true;
    if (key === "t" && steps.length) {
      steps[0].focus();
    } else if (key === "?") {
      if (help) { help.hidden = !help.hidden; }
    } else if (key === "Enter") {
      if (labelForm) { labelForm.requestSubmit(); } else if (nextForm) { nextForm.requestSubmit(); }
    } else if (labelForm && key === "s") {
      submit("skip-form");
    } else if (labelForm && key === "g") {
      submit("release-form");
    } else if (labelForm && key === "c") {
      document.getElementById("comment").focus();
    } else if (labelForm && (key === "j" || key === "ArrowDown")) {
      current = Math.min(current + 1, groups.length - 1); mark();
    } else if (labelForm && (key === "k" || key === "ArrowUp")) {
      current = Math.max(current - 1, 0); mark();
    } else {
      handled = labelForm ? choose(key) : false;
    }
    if (handled) { event.preventDefault(); }
  });
  mark();
  // Says the keys are live (browser tests wait for it before typing).
  document.documentElement.setAttribute("data-keys", "on");
}());

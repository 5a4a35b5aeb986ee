// The console's one script: copy buttons. Every page works without it; a
// button stays hidden where the script does not run.
document.querySelectorAll("button[data-copy]").forEach(function (b) {
  var src = document.getElementById(b.dataset.copy);
  if (!src || !navigator.clipboard) return;
  b.hidden = false;
  b.addEventListener("click", function () {
    navigator.clipboard.writeText(src.textContent).then(
      function () { b.textContent = "copied"; },
      function () { b.textContent = "copy failed: select the text instead"; });
  });
});

// "paged" voila template, while the server runs the chapter: a page that hears nothing from it for STALL_S says on
// its spinner which cell it was waiting for and what to do, instead of "Executing i of n" for ever. The server's own
// limit for a cell (uprobe_lab/lecture.py, CELL_TIMEOUT_S) is shorter and normally ends a stall first (paged.js then
// names the cell); this is for a server that stops answering altogether.
(function () {
  var STALL_S = 55;
  var sections = JSON.parse(document.getElementById('paged-cell-sections').textContent);
  var done = 0, last = Date.now(), process = window.voila_process;
  window.voila_process = function (i, n) { done = i; last = Date.now(); return process(i, n); };
  var timer = setInterval(function () {
    var text = document.getElementById('loading_text');
    if (!text || !document.getElementById('loading')) { clearInterval(timer); return; }
    if (Date.now() - last < STALL_S * 1000) return;
    clearInterval(timer);
    var where = done < sections.length ? 'cell ' + (done + 1) + ' of ' + sections.length +
      (sections[done] ? ' (in "' + sections[done] + '")' : '') : 'the end of the page';
    text.textContent = 'Stalled: nothing came from the server for ' + STALL_S + ' s while it ran ' + where +
      '. Reload the page to run the chapter again; if it stalls again, run the chapter in JupyterLab ' +
      '(./lab course) to see why.';
    text.classList.add('paged-stalled');
  }, 1000);
})();

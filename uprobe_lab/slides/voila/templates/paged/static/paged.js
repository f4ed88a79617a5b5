// "paged" voila template: show one slide of the notebook at a time (cells grouped by slideshow.slide_type).
(function () {
  var types = JSON.parse(document.getElementById('paged-slide-types').textContent);
  var cells = Array.prototype.slice.call(document.querySelectorAll('#rendered_cells [cell-index]'));
  var explicit = types.some(function (t) { return t === 'slide' || t === 'subslide'; });
  var slides = [], notesWin = null, current = 0;
  cells.forEach(function (div, i) {
    var cell = div.querySelector('.jp-Cell') || div, type = types[i] || '';
    var md = cell.classList.contains('jp-MarkdownCell');
    var first = md && cell.querySelector('.jp-RenderedMarkdown > :first-child, .jp-RenderedHTMLCommon > :first-child');
    var starts = explicit ? (type === 'slide' || type === 'subslide')
                          : !!(first && /^H[1-3]$/.test(first.tagName));
    if (type === 'skip') { div.classList.add('paged-skip'); return; }
    if (type === 'notes') { div.classList.add('paged-notes'); }
    if (starts || !slides.length) slides.push([]);
    slides[slides.length - 1].push(div);
  });
  // the lecture copy's folded "Presenter notes" are notes too: hidden from the audience until asked for
  document.querySelectorAll('#rendered_cells details').forEach(function (d) {
    var s = d.querySelector('summary');
    if (s && /presenter notes/i.test(s.textContent)) { d.classList.add('paged-notes'); d.open = true; }
  });
  var bar = document.createElement('div'); bar.id = 'paged-progress'; document.body.appendChild(bar);
  document.body.classList.add('paged');

  // the notes as the presenter reads them: without the headings' anchor links (their "¶")
  function notesText(e) {
    var copy = e.cloneNode(true);
    copy.querySelectorAll('a.anchor-link, .jp-InternalAnchorLink').forEach(function (a) { a.remove(); });
    copy.querySelectorAll('a').forEach(function (a) { if (a.textContent.trim() === '\u00b6') a.remove(); });
    return copy.innerHTML;
  }
  function notesHtml(n) {
    var html = slides[n].map(function (div) {
      return Array.prototype.map.call(div.querySelectorAll('.paged-notes'), notesText)
        .concat(div.classList.contains('paged-notes') ? [notesText(div)] : []).join('');
    }).join('');
    var next = slides[n + 1] && slides[n + 1][0].querySelector('h1, h2, h3');
    return '<h3>slide ' + (n + 1) + ' / ' + slides.length + '</h3>' + (html || '<p><i>no notes</i></p>') +
      '<hr><p>next: ' + (next ? next.textContent.replace(/\u00b6/g, '') : '(end)') + '</p>';
  }
  function show(n) {
    current = Math.max(0, Math.min(slides.length - 1, n));
    slides.forEach(function (s, i) { s.forEach(function (div) { div.classList.toggle('paged-off', i !== current); }); });
    cells.forEach(function (div) { if (!slides.some(function (s) { return s.indexOf(div) >= 0; })) div.classList.add('paged-off'); });
    document.getElementById('paged-count').textContent = (current + 1) + ' / ' + slides.length;
    bar.style.width = (100 * (current + 1) / slides.length) + '%';
    history.replaceState(null, '', '#' + (current + 1));
    var scroller = document.getElementById('rendered_cells');  // voila's frontend makes it the scrolling box
    if (scroller) scroller.scrollTop = 0;
    window.scrollTo(0, 0);
    window.dispatchEvent(new Event('resize'));  // let charts and widgets that were hidden measure themselves
    if (notesWin && !notesWin.closed) notesWin.document.body.innerHTML = notesHtml(current);
  }
  // a slide taller than the screen: down (or a clicker's next) scrolls it first, then turns the page
  function scroll(direction) {
    var box = document.getElementById('rendered_cells');
    if (!box) return false;
    var room = direction > 0 ? box.scrollHeight - box.clientHeight - box.scrollTop : box.scrollTop;
    if (room <= 4) return false;
    box.scrollBy(0, direction * Math.min(room, 0.8 * box.clientHeight));
    return true;
  }
  function openNotes() {
    notesWin = window.open('', 'paged-notes', 'width=700,height=600');
    if (!notesWin) return;
    notesWin.document.title = 'Presenter notes';
    notesWin.document.body.style.font = '20px sans-serif';
    notesWin.document.body.innerHTML = notesHtml(current);
    // the presenter's clicker or keys turn the slides from this window too (it has the focus once opened);
    // a window opened again by a reloaded page gets this page's listener in place of the old one
    if (notesWin.pagedKeys) notesWin.document.removeEventListener('keydown', notesWin.pagedKeys);
    notesWin.pagedKeys = function (e) { if (turn(e.key)) e.preventDefault(); };
    notesWin.document.addEventListener('keydown', notesWin.pagedKeys);
  }
  // the keys that turn the slides, pressed here or in the notes window; true when the key was one of them
  function turn(k) {
    if (k === 'ArrowRight') show(current + 1);
    else if (k === 'ArrowLeft') show(current - 1);
    else if (k === 'PageDown' || k === ' ' || k === 'ArrowDown') { if (!scroll(1)) show(current + 1); }
    else if (k === 'PageUp' || k === 'ArrowUp') { if (!scroll(-1)) show(current - 1); }
    else if (k === 'Home') show(0);
    else if (k === 'End') show(slides.length - 1);
    else return false;
    return true;
  }
  document.addEventListener('keydown', function (e) {
    var t = e.target, k = e.key;  // keys typed into a widget (a slider's arrows, a text box) stay with it;
    // Escape gives the keys back to the slides, and a clicker's PageUp/PageDown always turn the page
    if (t.closest && t.closest('input, textarea, select, [contenteditable], .jupyter-widgets')) {
      if (k === 'Escape' || k === 'PageDown' || k === 'PageUp') t.blur();
      if (k !== 'PageDown' && k !== 'PageUp') return;
    }
    if (turn(k)) { e.preventDefault(); return; }
    if (k === 'n' || k === 'N') document.body.classList.toggle('paged-show-notes');
    else if (k === 'p' || k === 'P') openNotes();
    else return;
    e.preventDefault();
  });
  // The server stops at a cell that raised an error or ran past the lecture's limit (uprobe_lab/lecture.py) and
  // sends nothing after it; Voila shows the error (its only stderr output) in that cell. Say on every slide which
  // slide stopped and what to do; a click goes there.
  function reportStoppedCell() {
    var err = document.querySelector('#rendered_cells [cell-index] [data-mime-type="application/vnd.jupyter.stderr"]');
    if (!err) return;
    var div = err.closest('[cell-index]');
    var n = slides.findIndex(function (s) { return s.indexOf(div) >= 0; });
    var heading = n >= 0 && slides[n][0].querySelector('h1, h2, h3');
    var note = document.createElement('div');
    note.id = 'paged-stopped';
    note.setAttribute('role', 'alert');
    note.style.cssText = 'position:fixed;top:0;left:0;right:0;z-index:1001;padding:0.6em 1em;cursor:pointer;' +
      'background:#b71c1c;color:#fff;font:18px sans-serif';
    note.textContent = 'The chapter stopped at slide ' + (n + 1) + ' of ' + slides.length +
      (heading ? ' ("' + heading.textContent.replace(/\u00b6/g, '').trim() + '")' : '') + ': ' +
      err.textContent.trim().replace(/^There was an error when executing cell \[\d*\]\.\s*/, '');
    note.onclick = function () { show(n); };
    document.body.appendChild(note);
  }
  reportStoppedCell();
  document.getElementById('paged-prev').onclick = function () { show(current - 1); };
  document.getElementById('paged-next').onclick = function () { show(current + 1); };
  document.getElementById('paged-notes').onclick = openNotes;
  show((parseInt(location.hash.slice(1), 10) || 1) - 1);
})();

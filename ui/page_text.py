"""The live page's fixed text: its how-to, its style sheet and the script in its head (for ui/app.py)."""

HOW_TO = """
1. **Start a meeting**: pick a sample and press *Replay live* (the speed slider paces it), upload a recording, or
   open *Microphone / webcam* and allow the browser to use them. The line on top says how far the audio was heard
   and transcribed, and how far behind the machine is.
2. **Read along**: the transcript follows the newest line while you are at the bottom; scroll up to read and
   *Jump to live* to come back. Grey text at the end is not final yet. *Search* marks words and links the lines.
   With a replayed recording, click a line's time to hear it.
3. **Ask**: type a question (*Who will send the report?*, *What is the budget for the pilot?*). The answer cites
   the lines it comes from: click one to see and hear it. When the meeting does not say, the answer says so.
4. **Summary and action items** refresh as the meeting goes on; *Export* downloads the transcript (Markdown, JSON,
   subtitles), the summary and the slides.
5. **Speakers**: give a speaker their real name (*Rename*), or remove everything one person said (*Forget*).
6. **Engine** shows the model's memory of the meeting and its settings (another model or budget applies to the
   next meeting you start).
"""

CSS = """
.mt-transcript { max-height: 460px; overflow-y: auto; font-size: 0.95rem; line-height: 1.45; }
.mt-line { padding: 2px 4px; border-radius: 4px; }
.mt-time { color: #777; font-family: monospace; margin-right: 4px; }
.mt-speaker { font-weight: 600; margin-right: 4px; }
.mt-tentative { color: #999; font-style: italic; }
.mt-unsure { text-decoration: underline dotted #c77; text-underline-offset: 3px; cursor: help; }
.mt-flash { background: #fff3b0; transition: background 0.3s; }
.mt-empty { color: #888; }
.mt-transcript mark { background: #ffe066; padding: 0 1px; border-radius: 2px; }
.mt-search-hits { font-size: 0.85rem; color: #555; margin-bottom: 4px; }
.mt-audio { width: 100%; height: 36px; }
.mt-player-hint { font-size: 0.8rem; color: #777; }
.mt-playable .mt-time { cursor: pointer; text-decoration: underline dotted; }
.mt-jump { margin-top: 4px; padding: 2px 10px; border-radius: 12px; border: 1px solid #bbb; background: #f4f4f4; cursor: pointer; }
#mt-summary h1 { font-size: 1.2rem; margin: 0.2em 0; }
#mt-summary h2 { font-size: 1.05rem; margin: 0.4em 0 0.2em; }
"""

# The transcript follows the newest line while the reader is at the bottom; scrolled up, it stays where the
# reader put it across re-renders (each update replaces the box) and a "Jump to live" button brings it back.
# A citation link (#mt-t-<centiseconds>) scrolls it to the line spoken at that time (the line with that id,
# else the last line starting before it: turns can be re-split as later words arrive) and holds it there.
# With a recording's player on the page, a click on a line's time, or on an answer's citation, plays from that moment.
HEAD = """
<script>
(function () {
  var focus = null;  // {anchor, until}: a cited line to keep in view
  var following = true;  // the reader is at the newest line
  var savedTop = 0;  // where a reader who scrolled up left the box
  var ownTop = -1;  // the scrollTop this script last set: a scroll event landing there is ours, not the reader's
  function atBottom(box) { return box.scrollHeight - box.scrollTop - box.clientHeight < 40; }
  function setTop(box, top) { box.scrollTop = top; ownTop = box.scrollTop; }
  function showJump() {
    document.querySelectorAll('.mt-jump').forEach(function (b) { b.hidden = following; });
  }
  function lineFor(anchor) {
    var target = document.getElementById(anchor);
    if (target || anchor.indexOf('mt-t-') !== 0) return target;
    var t = parseInt(anchor.slice(5), 10) / 100;
    document.querySelectorAll('.mt-line[data-start]').forEach(function (line) {
      var start = parseFloat(line.getAttribute('data-start'));
      if (!isNaN(start) && start <= t + 0.01) target = line;
    });
    return target;
  }
  function show(anchor) {
    var target = lineFor(anchor);
    if (!target) return;
    var box = target.closest('.mt-transcript');
    if (box) { setTop(box, target.offsetTop - box.offsetTop - box.clientHeight / 2); savedTop = box.scrollTop; }
    following = false;
    target.scrollIntoView({block: 'nearest'});
    target.classList.add('mt-flash');
  }
  function play(t) {
    var audio = document.querySelector('#mt-player audio');
    if (!audio || isNaN(t)) return;
    audio.currentTime = Math.max(0, t);
    var started = audio.play();
    if (started && started.catch) started.catch(function () {});
  }
  function follow() {
    document.body.classList.toggle('mt-playable', !!document.querySelector('#mt-player audio'));
    if (focus && Date.now() < focus.until) { show(focus.anchor); return; }
    focus = null;
    document.querySelectorAll('.mt-flash').forEach(function (line) { line.classList.remove('mt-flash'); });
    var box = document.querySelector('.mt-transcript');
    if (box) setTop(box, following ? box.scrollHeight : savedTop);
    showJump();
  }
  document.addEventListener('scroll', function (event) {  // scroll does not bubble: listen while it is captured
    var box = event.target;
    if (!box.classList || !box.classList.contains('mt-transcript') || Math.abs(box.scrollTop - ownTop) < 1) return;
    following = atBottom(box);
    savedTop = box.scrollTop;
    ownTop = -1;  // the reader moved it: the next scroll event is theirs too, wherever it lands
    if (following) focus = null;
    showJump();
  }, true);
  document.addEventListener('click', function (event) {
    if (event.target.classList && event.target.classList.contains('mt-jump')) {
      focus = null; following = true; follow(); return;
    }
    var time = event.target.closest ? event.target.closest('.mt-line[data-start] .mt-time') : null;
    if (time) { play(parseFloat(time.parentElement.getAttribute('data-start'))); return; }
    var link = event.target.closest ? event.target.closest('a[href*="#mt-t-"], a[href*="#mt-turn-"]') : null;
    if (!link) return;
    event.preventDefault(); event.stopPropagation();
    document.querySelectorAll('.mt-flash').forEach(function (line) { line.classList.remove('mt-flash'); });
    focus = {anchor: link.getAttribute('href').split('#')[1], until: Date.now() + 20000};
    show(focus.anchor);
    if (link.closest('#mt-chat') && focus.anchor.indexOf('mt-t-') === 0) play(parseInt(focus.anchor.slice(5), 10) / 100);
  }, true);
  var pending = false;
  new MutationObserver(function (changes) {
    if (pending) return;
    var ours = changes.some(function (c) { return c.target.closest && c.target.closest('#mt-transcript, #mt-player'); });
    if (!ours) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; follow(); });
  }).observe(document.documentElement, {childList: true, subtree: true});
})();
</script>
"""

// The keys an annotator repeats: run, submit, next, the left button's tool, brush size, the mask, frames.
// Ignored while typing in a text field, except Enter in the prompt (it runs).
export function bindKeys(actions) {
  document.addEventListener('keydown', (ev) => {
    const typing = ev.target.matches?.('input:not([type=range]):not([type=checkbox]), textarea, select');
    if (typing) {
      if (ev.key === 'Enter' && ev.target.id === 'umind-prompt') {
        ev.preventDefault();
        actions.run();
      }
      return;
    }
    if (ev.target.matches?.('button') && (ev.key === 'Enter' || ev.key === ' ')) return; // the button's own click
    if ((ev.ctrlKey || ev.metaKey) && ev.key.toLowerCase() === 'z') {
      ev.preventDefault();
      actions.undo();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const map = {
      Enter: actions.run, r: actions.run, s: actions.submit, n: actions.next,
      b: () => actions.tool('brush'), e: () => actions.tool('eraser'), p: () => actions.tool('positive'),
      m: () => actions.tool('negative'), x: () => actions.tool('box'), v: () => actions.tool('view'),
      h: actions.toggleMask, '[': () => actions.brush(-2), ']': () => actions.brush(2),
      ArrowUp: () => actions.frame(-1), ArrowDown: () => actions.frame(1),
      PageUp: () => actions.frame(-1), PageDown: () => actions.frame(1),
    };
    const fn = map[ev.key];
    if (fn) {
      ev.preventDefault();
      fn();
    }
  });
}

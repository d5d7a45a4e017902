"""What a user does in OHIF's MONAI Label mode, step by step, for the OHIF test (and to try by hand).

The steps follow the MONAI Label extension of the OHIF build that MONAI Label 0.8.5 ships (`/ohif/`): the
panel's server field (`#monailabelServerURL`) and connect button, the "Options / Configurations" dialog that
renders each task's `config()` as inputs (`id = section + name + key`, e.g. `inferumind_segmentprompt`) and
hands them to the infer call as params, and the Auto-Segmentation tab's Run button. React reads inputs
through its own value setter, so values are set with the native setter and an `input` event.
"""

from __future__ import annotations

import json
from pathlib import Path

SET_INPUT = """(function(id, value) {
  const el = document.getElementById(id);
  if (!el) return false;
  const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
  setter.call(el, value);
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  el.dispatchEvent(new Event('blur', {bubbles: true}));
  return true;
})(%s, %s)"""

CLICK_TEXT = """(function(selector, text) {
  const el = Array.from(document.querySelectorAll(selector)).find(e => e.textContent.trim() === text);
  if (!el) return false;
  el.click();
  return true;
})(%s, %s)"""


def set_input(browser, element_id: str, value: str) -> bool:
    return bool(browser.js(SET_INPUT % (json.dumps(element_id), json.dumps(value))))


def click_text(browser, selector: str, text: str) -> bool:
    return bool(browser.js(CLICK_TEXT % (json.dumps(selector), json.dumps(text))))


def body_text(browser) -> str:
    return browser.js("document.body ? document.body.innerText : ''") or ""


def connect_panel(browser, server_url: str, timeout: float) -> None:
    """Point the MONAI Label panel at `server_url` and wait until it lists its models."""
    browser.wait_for("!!document.getElementById('monailabelServerURL')", timeout, "the MONAI Label panel")
    set_input(browser, "monailabelServerURL", server_url.rstrip("/") + "/")
    # the connect button reads the URL from the settings' React state, which the first click only updates
    for _ in range(2):
        browser.js("document.querySelector('.settingsTable .actionButton').click()")
        browser.pump(3.0)
    browser.wait_for("document.body.innerText.includes('Options / Configurations')", timeout,
                     "the panel connected to the UMind server")


def set_prompt(browser, task: str, prompt: str, timeout: float) -> bool:
    """Type `prompt` into the task's `prompt` option and confirm the dialog; False when the field is absent."""
    click_text(browser, "a", "Options / Configurations")
    field = f"infer{task}prompt"
    browser.wait_for("document.body.innerText.includes('Options / Configurations') && "
                     "!!document.querySelector('.optionsForm')", timeout, "the options dialog")
    browser.js("""(function(name) { const s = document.querySelector("select[name='selectName']");
      if (!s) return false; const setter = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype,
      'value').set; setter.call(s, name); s.dispatchEvent(new Event('change', {bubbles: true})); return true;
      })(%s)""" % json.dumps(task))
    browser.pump(1.0)
    found = set_input(browser, field, prompt)
    click_text(browser, "button", "Confirm")
    return found


def run_auto_segmentation(browser, task: str, timeout: float) -> None:
    """Open the Auto-Segmentation tab, pick `task` and press Run."""
    click_text(browser, "label", "Auto-Segmentation")
    browser.js("""(function(task) { const s = Array.from(document.querySelectorAll('.modelSelector select'))
      .find(x => Array.from(x.options).some(o => o.value === task)); if (!s) return false;
      const setter = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'value').set;
      setter.call(s, task); s.dispatchEvent(new Event('change', {bubbles: true})); return true; })(%s)"""
               % json.dumps(task))
    browser.js("""(function() { const b = Array.from(document.querySelectorAll('button'))
      .find(x => x.title === 'Run Segmentation' && x.offsetParent !== null); if (b) b.click(); return !!b; })()""")


def open_series(browser, description: str) -> bool:
    """Double-click the series' thumbnail in the study browser (loads it into the active viewport)."""
    return bool(browser.js("""(function(text) {
      const card = Array.from(document.querySelectorAll('[data-cy^="study-browser-thumbnail"], div'))
        .find(d => d.innerText && d.innerText.includes(text) && d.querySelector('img, canvas')
                   && d.querySelectorAll('img, canvas').length === 1);
      if (!card) return false;
      const target = card.querySelector('img, canvas');
      for (const type of ['mousedown', 'mouseup', 'click', 'mousedown', 'mouseup', 'click', 'dblclick'])
        target.dispatchEvent(new MouseEvent(type, {bubbles: true, detail: type === 'dblclick' ? 2 : 1}));
      return true; })(%s)""" % json.dumps(description)))


def infer_calls(browser, task: str) -> list[dict]:
    return [r for r in browser.requests.values() if f"/infer/{task}" in r["url"]]


def shot(browser, out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    return browser.screenshot(out_dir / f"{name}.png")

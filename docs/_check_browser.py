"""After ``mkdocs build``: open every page of the site in a headless Chromium, served from a local
HTTP server (no network), and check that

* the browser's console shows no error (a script that fails, a resource that does not load:
  an image, a font, MathJax);
* every formula is typeset (each ``arithmatex`` element holds MathJax's output, no raw TeX left);
* every image has loaded (``naturalWidth > 0``, read from the page after its scripts ran).

Needs Debian's ``chromium`` (``apt-get install -y chromium``); without it the check says so and
exits 0, so ``make docs`` works without a browser, unless ``GEOMJAX_REQUIRE_BROWSER=1`` (CI) makes
a missing browser an error.  Exit status 1 lists the failures.

    python docs/_check_browser.py [site]
"""

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# appended to each page's copy: after MathJax's typesetting, the page records what it sees in
# its own DOM (images loaded or not, formulas typeset or not), which --dump-dom then prints
PROBE = """
<script>
window.addEventListener("load", () => {
  const done = () => {
    const imgs = [...document.images].filter((i) => !(i.complete && i.naturalWidth > 0));
    const math = [...document.querySelectorAll(".arithmatex")];
    const raw = math.filter((m) => !m.querySelector("mjx-container"));
    const out = document.createElement("pre");
    out.id = "geomjax-probe";
    out.textContent = JSON.stringify({
      broken_images: imgs.map((i) => i.getAttribute("src")),
      formulas: math.length,
      untypeset: raw.map((m) => m.textContent.slice(0, 60)),
    });
    document.body.appendChild(out);
  };
  const ready = window.MathJax && MathJax.startup && MathJax.startup.promise;
  (ready ? MathJax.startup.promise.then(() => MathJax.typesetPromise()) : Promise.resolve())
    .then(done, done);
});
</script>
"""


def browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def check_page(exe: str, url: str) -> tuple[list[str], int]:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=15000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    problems = []
    for line in proc.stderr.splitlines():
        # console messages: "... CONSOLE(12)] "message", source: ..." ; level ERROR lines, and
        # resources that failed to load
        if "CONSOLE" in line and ("ERROR" in line or "Uncaught" in line):
            problems.append(f"console: {line.strip()[:300]}")
        elif "Failed to load resource" in line:
            problems.append(f"resource: {line.strip()[:300]}")
    m = re.search(r'<pre id="geomjax-probe">(.*?)</pre>', proc.stdout, flags=re.S)
    if m is None:
        problems.append("the page did not finish loading (no probe output)")
        return problems, 0
    probe = json.loads(html.unescape(m.group(1)))
    problems += [f"image not loaded: {src}" for src in probe["broken_images"]]
    problems += [f"formula not typeset: {tex!r}" for tex in probe["untypeset"]]
    return problems, probe["formulas"]


def main(site: Path) -> int:
    exe = browser()
    if exe is None:
        print("browser check skipped: no chromium (Debian: apt-get install -y chromium)")
        return 1 if os.environ.get("GEOMJAX_REQUIRE_BROWSER") == "1" else 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "site"
        shutil.copytree(site, root)
        pages = sorted(root.rglob("*.html"))
        for page in pages:  # the probe goes into the copies only
            text = page.read_text()
            page.write_text(text.replace("</body>", PROBE + "</body>", 1))
        handler = functools.partial(_Quiet, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        failures, formulas = {}, 0
        try:
            for page in pages:
                rel = page.relative_to(root).as_posix()
                problems, n = check_page(exe, base + rel)
                formulas += n
                if problems:
                    failures[rel] = problems
        finally:
            server.shutdown()
    for rel, problems in failures.items():
        print(rel, *problems, sep="\n  ")
    if failures:
        print(f"browser check: {len(failures)} of {len(pages)} pages have problems")
        return 1
    print(
        f"browser check: {len(pages)} pages, no console error, all {formulas} formulas typeset, "
        "every image loaded"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "site")))

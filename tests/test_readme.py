"""The README's example runs as written and says what it claims (the examples of the guides are
run by tests/test_docs.py)."""

import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_holds():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "the README keeps one example; the guides in docs/ hold the rest"
    ns: dict = {}
    exec(compile(blocks[0], str(README), "exec"), ns)
    np.testing.assert_allclose(ns["w"], [0.1, -0.4, 2.9], atol=1e-12)  # log(exp(w)) = w, θ < π
    e = ns["gj"].diagnostics(ns["body"], ns["sol"])["energy"]
    assert float(jnp.max(jnp.abs(e / e[0] - 1))) < 1e-3  # LGVI: bounded energy error
    assert float(ns["sol"].max_residual) < 1e-12
    # the compiled gradient against central differences of the loss
    x, h = np.array([0.5, 1.0, 0.2]), 1e-6
    fd = [
        (float(ns["loss"](x + h * e)) - float(ns["loss"](x - h * e))) / (2 * h) for e in np.eye(3)
    ]
    np.testing.assert_allclose(ns["g"], fd, rtol=1e-6, atol=1e-9)


def test_readme_links_point_into_the_repository():
    text = README.read_text()
    root = README.parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (root / target).exists(), target
    assert "../" not in text

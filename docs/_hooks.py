"""MkDocs hooks: the docstrings use Sphinx roles (:func:`simulate`); mkdocstrings renders them
literally, so they are turned into inline code here."""

import re

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):(<code>[^<]*</code>)")


def on_page_content(html, **kwargs):
    return _ROLE.sub(r"\1", html)
